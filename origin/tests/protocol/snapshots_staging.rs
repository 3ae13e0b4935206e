//! The bounds on snapshot parts staged on disk (`core::staging`): offsets
//! per stream, disk in total, the TTL of an abandoned upload, and what
//! frees them (a publish, a delete, a restart). Time is a `ManualClock`
//! here: the once-a-second sweeper reads it, so expiry needs no sleeping.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use origin::clock::{Clock, ManualClock, SystemClock};
use origin::http::HttpConfig;

use crate::common::*;

/// Disk is counted in blocks of this size.
const BLOCK: usize = 4096;

async fn stream(api: &Api, name: &str) -> String {
    let path = stream_path(name);
    api.create_with(&path, "application/octet-stream", vec![b'x'; 100])
        .await;
    path
}

async fn stage(api: &Api, path: &str, at: u64, part: u32, body: Vec<u8>) -> reqwest::Response {
    send(
        api.put(&format!("{path}/snapshot/{}/part/{part}", offset(at)))
            .body(body),
    )
    .await
}

async fn publish_parts(api: &Api, path: &str, at: u64, parts: u32) -> reqwest::Response {
    send(
        api.put(&format!("{path}/snapshot/{}", offset(at)))
            .header("stream-snapshot-parts", parts.to_string()),
    )
    .await
}

/// Every file under the staging directory.
fn staged_files(data: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.map(|e| e.expect("entry").path()) {
            if e.is_dir() {
                walk(&e, out);
            } else {
                out.push(e);
            }
        }
    }
    let mut out = Vec::new();
    walk(&data.join("staging"), &mut out);
    out
}

async fn staged(api: &Api) -> (i64, i64) {
    (
        api.metric("ds_origin_snapshot_staged_uploads").await,
        api.metric("ds_origin_snapshot_staged_bytes").await,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_stages_under_four_offsets_at_most() {
    let api = Api::start().await;
    let path = stream(&api, "staging-offsets").await;
    for at in 1..=4 {
        assert_eq!(stage(&api, &path, at, 0, b"p".to_vec()).await.status(), 204);
    }
    // A fifth offset is refused, and nothing of it is written.
    expect_error(
        stage(&api, &path, 5, 0, b"p".to_vec()).await,
        409,
        "STAGING_LIMIT",
    )
    .await;
    assert_eq!(staged_files(&api.origin.data).len(), 4);
    assert_eq!(staged(&api).await, (4, 4 * BLOCK as i64));
    // More parts of a staged offset, and other streams, still go.
    assert_eq!(stage(&api, &path, 4, 1, b"q".to_vec()).await.status(), 204);
    let other = stream(&api, "staging-offsets-other").await;
    assert_eq!(stage(&api, &other, 1, 0, b"o".to_vec()).await.status(), 204);
    // A publish frees its offset for another.
    assert_eq!(publish_parts(&api, &path, 4, 2).await.status(), 204);
    assert_eq!(stage(&api, &path, 5, 0, b"p".to_vec()).await.status(), 204);
    assert_eq!(staged(&api).await, (5, 5 * BLOCK as i64));
    // A delete drops the stream's uploads, files and all; others stay.
    assert_eq!(send(api.delete(&path)).await.status(), 204);
    assert_eq!(staged(&api).await, (1, BLOCK as i64));
    assert_eq!(staged_files(&api.origin.data).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staged_parts_in_total_are_bounded_until_a_publish_frees_room() {
    let api = Api::start_with(HttpConfig {
        max_staged_bytes: 3 * BLOCK as u64,
        ..HttpConfig::default()
    })
    .await;
    let a = stream(&api, "staging-total-a").await;
    let b = stream(&api, "staging-total-b").await;
    let part = |c: u8| vec![c; BLOCK];
    for n in 0..2 {
        assert_eq!(stage(&api, &a, 10, n, part(b'a')).await.status(), 204);
    }
    assert_eq!(stage(&api, &b, 10, 0, part(b'b')).await.status(), 204);
    // Full: 503 + Retry-After, nothing written; a tiny part takes a block.
    for body in [part(b'c'), b"1".to_vec()] {
        let headers = expect_error(stage(&api, &b, 10, 1, body).await, 503, "UNAVAILABLE").await;
        assert!(headers.contains_key("retry-after"));
    }
    assert_eq!(staged_files(&api.origin.data).len(), 3);
    assert_eq!(staged(&api).await, (2, 3 * BLOCK as i64));
    // The publish of `a` frees its room: the same part now goes.
    assert_eq!(publish_parts(&api, &a, 10, 2).await.status(), 204);
    assert_eq!(staged(&api).await, (1, BLOCK as i64));
    assert_eq!(stage(&api, &b, 10, 1, part(b'c')).await.status(), 204);
    assert_eq!(publish_parts(&api, &b, 10, 2).await.status(), 204);
    let latest = send(api.get(&format!("{b}/snapshot"))).await;
    assert_eq!(
        latest.bytes().await.unwrap(),
        [part(b'b'), part(b'c')].concat()
    );
    assert_eq!(staged(&api).await, (0, 0));
    assert_eq!(staged_files(&api.origin.data), Vec::<PathBuf>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_upload_is_dropped_after_an_hour_untouched() {
    const MINUTE: u64 = 60_000;
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let api = Api::on(TestOrigin::start_with_clock(HttpConfig::default(), clock.clone()).await);
    let path = stream(&api, "staging-ttl").await;
    assert_eq!(stage(&api, &path, 1, 0, vec![b'o'; 10]).await.status(), 204);
    clock.advance(30 * MINUTE);
    assert_eq!(stage(&api, &path, 2, 0, vec![b'y'; 10]).await.status(), 204);
    assert_eq!(staged_files(&api.origin.data).len(), 2);
    // An hour after the first was touched, it goes; the second (half an
    // hour old when the sweeper dropped the first) stays.
    clock.advance(30 * MINUTE);
    api.wait_for_metric("ds_origin_snapshot_staged_uploads", 1)
        .await;
    assert_eq!(staged(&api).await, (1, BLOCK as i64));
    assert_eq!(staged_files(&api.origin.data).len(), 1);
    expect_error(publish_parts(&api, &path, 1, 1).await, 400, "BAD_REQUEST").await;
    // A part sent again touches its upload: a minute after another upload
    // starts, the second's part 0 is sent again, and an hour after that
    // other one, only the other goes.
    clock.advance(19 * MINUTE);
    assert_eq!(stage(&api, &path, 3, 0, vec![b'w'; 10]).await.status(), 204);
    clock.advance(MINUTE);
    assert_eq!(stage(&api, &path, 2, 0, vec![b'z'; 10]).await.status(), 204);
    clock.advance(59 * MINUTE);
    api.wait_for_metric("ds_origin_snapshot_staged_uploads", 1)
        .await;
    assert_eq!(staged_files(&api.origin.data).len(), 1);
    clock.advance(MINUTE);
    api.wait_for_metric("ds_origin_snapshot_staged_uploads", 0)
        .await;
    assert_eq!(staged(&api).await, (0, 0));
    assert_eq!(staged_files(&api.origin.data), Vec::<PathBuf>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_part_sent_again_is_counted_once() {
    let api = Api::start_with(HttpConfig {
        max_staged_bytes: 2 * BLOCK as u64,
        ..HttpConfig::default()
    })
    .await;
    let path = stream(&api, "staging-again").await;
    for c in [b'a', b'b', b'c'] {
        assert_eq!(stage(&api, &path, 5, 0, vec![c; BLOCK]).await.status(), 204);
    }
    assert_eq!(staged(&api).await, (1, BLOCK as i64));
    // Counted three times, this would not fit.
    assert_eq!(
        stage(&api, &path, 5, 1, vec![b'd'; BLOCK]).await.status(),
        204
    );
    assert_eq!(
        stage(&api, &path, 5, 0, vec![b'e'; 100]).await.status(),
        204
    );
    assert_eq!(staged(&api).await, (1, 2 * BLOCK as i64));
    assert_eq!(staged_files(&api.origin.data).len(), 2);
    assert_eq!(publish_parts(&api, &path, 5, 2).await.status(), 204);
    let latest = send(api.get(&format!("{path}/snapshot"))).await;
    assert_eq!(
        latest.bytes().await.unwrap(),
        [vec![b'e'; 100], vec![b'd'; BLOCK]].concat()
    );
    assert_eq!(staged(&api).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_empties_staging_and_its_accounting() {
    let http = || HttpConfig {
        max_staged_bytes: 2 * BLOCK as u64,
        ..HttpConfig::default()
    };
    let api = Api::start_with(http()).await;
    let path = stream(&api, "staging-restart").await;
    for n in 0..2 {
        assert_eq!(
            stage(&api, &path, 5, n, vec![b'a'; BLOCK]).await.status(),
            204
        );
    }
    let Api { origin, .. } = api;
    let (data, _keep) = origin.stop().await;
    let api = Api::on(TestOrigin::start_in(data, http(), origin::store::StoreConfig::new).await);
    assert_eq!(staged(&api).await, (0, 0));
    assert_eq!(staged_files(&api.origin.data), Vec::<PathBuf>::new());
    if std::env::var("DS_TEST_DURABILITY").as_deref() == Ok("object") {
        // In object durability the parts are in the bucket too: the
        // restarted origin brings them back and publishes them
        // (`http::staging_bucket`; the region's tests check it across a
        // takeover).
        assert_eq!(publish_parts(&api, &path, 5, 2).await.status(), 204);
        assert_eq!(staged(&api).await, (0, 0));
    } else {
        expect_error(publish_parts(&api, &path, 5, 2).await, 400, "BAD_REQUEST").await;
    }
    // The whole bound is there again.
    for n in 0..2 {
        assert_eq!(
            stage(&api, &path, 5, n, vec![b'b'; BLOCK]).await.status(),
            204
        );
    }
}
