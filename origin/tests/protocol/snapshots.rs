//! Snapshots and retention: publish (whole and in parts), read the latest
//! (Range, If-None-Match), read at the cacheable URL, advance retention,
//! and every refusal on the way.

use origin::http::HttpConfig;
use sha2::{Digest, Sha256};

use super::common::{expect_error, header, offset, stream_path, Api, TestOrigin};

fn sha(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

async fn publish(api: &Api, path: &str, at: u64, body: &'static [u8]) -> reqwest::Response {
    api.put(&format!("{path}/snapshot/{}", offset(at)))
        .header("content-type", "text/plain")
        .body(body)
        .send()
        .await
        .unwrap()
}

async fn stream_with(api: &Api, name: &str, body: &str) -> (String, String) {
    let path = stream_path(name);
    let created = api.create(&path, "application/octet-stream").await;
    let token = header(&created, "stream-incarnation").unwrap();
    api.append(&path, "application/octet-stream", body.as_bytes().to_vec())
        .await;
    (path, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn publish_read_and_replace_a_snapshot() {
    let api = Api::start().await;
    let (path, token) = stream_with(&api, "snap", "abcdef").await;

    let r = publish(&api, &path, 3, b"SNAP").await;
    assert_eq!(r.status(), 204);
    let digest = sha(b"SNAP");
    assert_eq!(header(&r, "stream-snapshot-digest"), Some(digest.clone()));
    assert_eq!(header(&r, "stream-snapshot-offset"), Some(offset(3)));
    // The same publish again: same answer, nothing changes.
    let again = publish(&api, &path, 3, b"SNAP").await;
    assert_eq!(again.status(), 204);
    assert_eq!(
        header(&again, "stream-snapshot-digest"),
        Some(digest.clone())
    );

    let head = api.head(&path).send().await.unwrap();
    assert_eq!(header(&head, "stream-snapshot-offset"), Some(offset(3)));
    assert_eq!(
        header(&head, "stream-snapshot-digest"),
        Some(digest.clone())
    );
    assert_eq!(header(&head, "stream-retained-offset"), Some(offset(0)));

    // The latest snapshot, whole, in part, and unchanged.
    let latest = api.get(&format!("{path}/snapshot")).send().await.unwrap();
    assert_eq!(latest.status(), 200);
    assert_eq!(
        header(&latest, "content-type").as_deref(),
        Some("text/plain")
    );
    assert_eq!(header(&latest, "stream-snapshot-offset"), Some(offset(3)));
    assert_eq!(header(&latest, "stream-next-offset"), Some(offset(3)));
    assert_eq!(header(&latest, "accept-ranges").as_deref(), Some("bytes"));
    assert_eq!(header(&latest, "stream-immutable"), None);
    let cacheable = format!("{path}/incarnation/{token}/snapshot/{}", offset(3));
    assert_eq!(header(&latest, "content-location"), Some(cacheable.clone()));
    let etag = header(&latest, "etag").unwrap();
    assert_eq!(latest.bytes().await.unwrap(), &b"SNAP"[..]);
    let part = api
        .get(&format!("{path}/snapshot"))
        .header("range", "bytes=1-2")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), 206);
    assert_eq!(
        header(&part, "content-range").as_deref(),
        Some("bytes 1-2/4")
    );
    assert_eq!(part.bytes().await.unwrap(), &b"NA"[..]);
    let unchanged = api
        .get(&format!("{path}/snapshot"))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(unchanged.status(), 304);
    let outside = api
        .get(&format!("{path}/snapshot"))
        .header("range", "bytes=9-")
        .send()
        .await
        .unwrap();
    assert_eq!(
        header(&outside, "content-range").as_deref(),
        Some("bytes */4")
    );
    expect_error(outside, 416, "RANGE_NOT_SATISFIABLE").await;

    // At its cacheable URL: immutable; any other offset or token refused.
    let fixed = api.get(&cacheable).send().await.unwrap();
    assert_eq!(fixed.status(), 200);
    assert_eq!(header(&fixed, "stream-immutable").as_deref(), Some("true"));
    assert_eq!(
        header(&fixed, "cache-control").as_deref(),
        Some("public, max-age=31536000, immutable")
    );
    assert_eq!(
        header(&fixed, "stream-snapshot-digest"),
        Some(digest.clone())
    );
    assert_eq!(fixed.bytes().await.unwrap(), &b"SNAP"[..]);
    let ranged = api
        .get(&cacheable)
        .header("range", "bytes=-1")
        .send()
        .await
        .unwrap();
    assert_eq!(ranged.status(), 206);
    assert_eq!(ranged.bytes().await.unwrap(), &b"P"[..]);
    expect_error(
        api.get(&format!("{cacheable}?x=1")).send().await.unwrap(),
        400,
        "BAD_REQUEST",
    )
    .await;
    let other = format!("{path}/incarnation/{token}/snapshot/{}", offset(2));
    expect_error(
        api.get(&other).send().await.unwrap(),
        404,
        "SNAPSHOT_NOT_FOUND",
    )
    .await;
    expect_error(
        api.get(&format!("{path}/snapshot/{}", offset(2)))
            .send()
            .await
            .unwrap(),
        404,
        "SNAPSHOT_NOT_FOUND",
    )
    .await;

    // Refusals: another blob at the same offset, an older offset, past the
    // end, a failed match, a malformed offset.
    expect_error(
        publish(&api, &path, 3, b"OTHER").await,
        409,
        "SNAPSHOT_CONFLICT",
    )
    .await;
    expect_error(
        publish(&api, &path, 2, b"OLD").await,
        409,
        "SNAPSHOT_CONFLICT",
    )
    .await;
    expect_error(
        publish(&api, &path, 7, b"PAST").await,
        409,
        "SNAPSHOT_CONFLICT",
    )
    .await;
    let mismatch = api
        .put(&format!("{path}/snapshot/{}", offset(6)))
        .header("stream-snapshot-match", sha(b"nope"))
        .body("NEW")
        .send()
        .await
        .unwrap();
    expect_error(mismatch, 409, "SNAPSHOT_CONFLICT").await;
    expect_error(
        api.put(&format!("{path}/snapshot/xyz"))
            .body("x")
            .send()
            .await
            .unwrap(),
        400,
        "INVALID_OFFSET",
    )
    .await;
    expect_error(
        api.put(&format!("{}/snapshot/{}", stream_path("none"), offset(0)))
            .body("x")
            .send()
            .await
            .unwrap(),
        404,
        "STREAM_NOT_FOUND",
    )
    .await;

    // A later snapshot with the right match replaces it: the old URL is 404.
    let newer = api
        .put(&format!("{path}/snapshot/{}", offset(6)))
        .header("stream-snapshot-match", &digest)
        .body("NEWER")
        .send()
        .await
        .unwrap();
    assert_eq!(newer.status(), 204);
    expect_error(
        api.get(&cacheable).send().await.unwrap(),
        404,
        "SNAPSHOT_NOT_FOUND",
    )
    .await;
    let latest = api.get(&format!("{path}/snapshot")).send().await.unwrap();
    assert_eq!(header(&latest, "stream-snapshot-offset"), Some(offset(6)));
    assert_eq!(
        header(&latest, "stream-up-to-date").as_deref(),
        Some("true")
    );
    assert_eq!(
        header(&latest, "content-type").as_deref(),
        Some("application/octet-stream"),
        "no Content-Type: the default"
    );
    assert_eq!(latest.bytes().await.unwrap(), &b"NEWER"[..]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_larger_than_a_request_goes_up_in_parts() {
    let api = Api::start_with(HttpConfig {
        max_body: 1000,
        max_snapshot: 2500,
        ..HttpConfig::default()
    })
    .await;
    let (path, _) = stream_with(&api, "parts", "0123456789").await;
    let head = api.head(&path).send().await.unwrap();
    assert_eq!(
        header(&head, "ursula-max-snapshot-bytes").as_deref(),
        Some("2500")
    );
    let parts: Vec<Vec<u8>> = (0..3u8).map(|i| vec![b'a' + i; 800]).collect();
    let stage = |n: usize, body: Vec<u8>| {
        api.put(&format!("{path}/snapshot/{}/part/{n}", offset(10)))
            .body(body)
            .send()
    };
    // A whole body over the request limit is refused; parts are not.
    expect_error(
        api.put(&format!("{path}/snapshot/{}", offset(10)))
            .body(vec![0u8; 1001])
            .send()
            .await
            .unwrap(),
        413,
        "PAYLOAD_TOO_LARGE",
    )
    .await;
    for (n, p) in parts.iter().enumerate() {
        assert_eq!(stage(n, p.clone()).await.unwrap().status(), 204);
    }
    // One more part would pass the snapshot limit.
    expect_error(
        stage(3, vec![0u8; 900]).await.unwrap(),
        413,
        "PAYLOAD_TOO_LARGE",
    )
    .await;
    // Publishing more parts than were staged names the missing one.
    let missing = api
        .put(&format!("{path}/snapshot/{}", offset(10)))
        .header("stream-snapshot-parts", "4")
        .send()
        .await
        .unwrap();
    expect_error(missing, 400, "BAD_REQUEST").await;
    let done = api
        .put(&format!("{path}/snapshot/{}", offset(10)))
        .header("stream-snapshot-parts", "3")
        .header("content-type", "application/x-state")
        .send()
        .await
        .unwrap();
    assert_eq!(done.status(), 204);
    let whole: Vec<u8> = parts.concat();
    assert_eq!(header(&done, "stream-snapshot-digest"), Some(sha(&whole)));
    let latest = api.get(&format!("{path}/snapshot")).send().await.unwrap();
    assert_eq!(
        header(&latest, "content-type").as_deref(),
        Some("application/x-state")
    );
    assert_eq!(latest.bytes().await.unwrap(), whole);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_advances_to_the_latest_snapshot_and_survives_a_restart() {
    let api = Api::start().await;
    let (path, token) = stream_with(&api, "retain", "0123456789").await;
    let retain = |at: u64| {
        api.put(&format!("{path}/snapshot/{}/retain", offset(at)))
            .send()
    };
    // Nothing to retain to before a snapshot exists.
    expect_error(retain(4).await.unwrap(), 404, "SNAPSHOT_NOT_FOUND").await;
    assert_eq!(publish(&api, &path, 4, b"S4").await.status(), 204);
    expect_error(retain(2).await.unwrap(), 404, "SNAPSHOT_NOT_FOUND").await;
    let r = retain(4).await.unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(header(&r, "stream-retained-offset"), Some(offset(4)));
    assert_eq!(retain(4).await.unwrap().status(), 204, "idempotent");

    check_retained(&api, &path, &token).await;
    let Api { origin, .. } = api;
    let (data, _keep) = origin.stop().await;
    let api = Api::on(
        TestOrigin::start_in(data, HttpConfig::default(), origin::store::StoreConfig::new).await,
    );
    check_retained(&api, &path, &token).await;
    let latest = api.get(&format!("{path}/snapshot")).send().await.unwrap();
    assert_eq!(latest.bytes().await.unwrap(), &b"S4"[..]);
}

/// Checkpoints write only the streams changed since the last one: a
/// change that is a stream's only one in a checkpoint's span (a snapshot,
/// retention, visibility) is in that checkpoint, so it survives a restart
/// whose log starts after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_alone_in_a_checkpoint_survives_a_restart() {
    let small = |data| {
        let mut c = origin::store::StoreConfig::new(data);
        c.checkpoint_bytes = 64 * 1024;
        c
    };
    let dir = tempfile::tempdir().unwrap();
    let api =
        Api::on(TestOrigin::start_in(dir.path().to_owned(), HttpConfig::default(), small).await);
    let (path, token) = stream_with(&api, "alone", "0123456789").await;
    let filler = stream_path("alone-filler");
    api.create(&filler, "application/octet-stream").await;
    checkpoint(&api, &filler).await;
    assert_eq!(publish(&api, &path, 4, b"S4").await.status(), 204);
    checkpoint(&api, &filler).await;
    let r = api
        .put(&format!("{path}/snapshot/{}/retain", offset(4)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    checkpoint(&api, &filler).await;
    let r = api
        .put(&path)
        .header("content-type", "application/octet-stream")
        .header("stream-public", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    checkpoint(&api, &filler).await;

    let Api { origin, .. } = api;
    let (data, _) = origin.stop().await;
    let api = Api::on(TestOrigin::start_in(data, HttpConfig::default(), small).await);
    check_retained(&api, &path, &token).await;
    let latest = api.get(&format!("{path}/snapshot")).send().await.unwrap();
    assert_eq!(latest.bytes().await.unwrap(), &b"S4"[..]);
    let head = api.head(&path).send().await.unwrap();
    assert_eq!(header(&head, "stream-public").as_deref(), Some("true"));
    drop(dir);
}

/// Another stream's appends carry the log past a checkpoint.
async fn checkpoint(api: &Api, filler: &str) {
    let before = api
        .metric("ds_origin_checkpoint_duration_seconds_count")
        .await;
    while api
        .metric("ds_origin_checkpoint_duration_seconds_count")
        .await
        == before
    {
        api.append(filler, "application/octet-stream", vec![b'f'; 32 * 1024])
            .await;
    }
}

async fn check_retained(api: &Api, path: &str, token: &str) {
    let head = api.head(path).send().await.unwrap();
    assert_eq!(header(&head, "stream-retained-offset"), Some(offset(4)));
    assert_eq!(header(&head, "stream-snapshot-offset"), Some(offset(4)));
    // Before retention: 410 naming where to read from.
    let gone = api
        .get(&format!("{path}?offset={}", offset(1)))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&gone, "stream-retained-offset"), Some(offset(4)));
    assert_eq!(header(&gone, "stream-next-offset"), Some(offset(4)));
    expect_error(gone, 410, "OFFSET_TRIMMED").await;
    for live in ["long-poll", "sse"] {
        let r = api
            .get(&format!("{path}?offset={}&live={live}", offset(0)))
            .send()
            .await
            .unwrap();
        expect_error(r, 410, "OFFSET_TRIMMED").await;
    }
    let chunk = api
        .get(&format!("{path}/incarnation/{token}/chunk/{}", offset(0)))
        .send()
        .await
        .unwrap();
    expect_error(chunk, 410, "OFFSET_TRIMMED").await;
    // -1 starts at the retained offset.
    let from_start = api.get(&format!("{path}?offset=-1")).send().await.unwrap();
    assert_eq!(from_start.status(), 200);
    assert_eq!(from_start.bytes().await.unwrap(), &b"456789"[..]);
    // A snapshot before retention is refused.
    expect_error(publish(api, path, 2, b"S2").await, 410, "OFFSET_TRIMMED").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_streams_snapshot_falls_between_messages() {
    let api = Api::start().await;
    let path = stream_path("json-snap");
    api.create(&path, "application/json").await;
    api.append(&path, "application/json", br#"[{"a":1},{"b":2}]"#.to_vec())
        .await;
    // Stored as NDJSON: `{"a":1}\n{"b":2}\n`; 8 is between the two.
    expect_error(publish(&api, &path, 5, b"{}").await, 400, "BAD_REQUEST").await;
    assert_eq!(publish(&api, &path, 8, b"{}").await.status(), 204);
}

/// A range whose last byte is the largest number a request can name is
/// cut at the snapshot's end (it used to wrap: `206` with an empty body
/// and a `Content-Range` past the end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_range_to_the_largest_offset_is_cut_at_the_end() {
    let api = Api::start().await;
    let (path, _) = stream_with(&api, "range-max", "abcdefgh").await;
    assert_eq!(publish(&api, &path, 8, b"0123456789").await.status(), 204);
    let r = api
        .get(&format!("{path}/snapshot"))
        .header("range", "bytes=5-18446744073709551615")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 206);
    assert_eq!(header(&r, "content-range").as_deref(), Some("bytes 5-9/10"));
    assert_eq!(r.bytes().await.unwrap(), &b"56789"[..]);
}

/// A JSON fork at its source's retained offset: the byte before it is
/// gone, and the offset is between messages by construction (retention
/// moves only to a snapshot's offset), so the fork is made, not refused as
/// "inside a message" (found by the edge's differential test with the
/// origin in object durability, where the bytes go sooner).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_json_fork_at_the_retained_offset_is_made() {
    let api = Api::start().await;
    let source = stream_path("json-retained-source");
    assert_eq!(api.create(&source, "application/json").await.status(), 201);
    let r = api
        .append(&source, "application/json", r#"[{"a":1},{"b":2}]"#)
        .await;
    assert!(r.status().is_success());
    let end: u64 = api.read_all(&source).await.len() as u64;
    let first = stream_path("json-retained-first");
    let r = api
        .put(&first)
        .header("stream-forked-from", &source)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = api
        .put(&format!("{source}/snapshot/{}", offset(end)))
        .header("content-type", "application/json")
        .body(r#"{"state":1}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = api
        .put(&format!("{source}/snapshot/{}/retain", offset(end)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    // A fork of the fork at its end, which is the retained offset.
    let second = stream_path("json-retained-second");
    let r = api
        .put(&second)
        .header("stream-forked-from", &first)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    // And at the source's own retained offset, named.
    let third = stream_path("json-retained-third");
    let r = api
        .put(&third)
        .header("stream-forked-from", &source)
        .header("stream-fork-offset", offset(end))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{:?}", r.text().await);
    assert!(api
        .append(&third, "application/json", r#"{"c":3}"#)
        .await
        .status()
        .is_success());
}
