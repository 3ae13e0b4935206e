//! Sealing complete chunks into a real S3-compatible server (s3s-fs), reading
//! them back once their local copy is gone, and riding out an outage.

use crate::common;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::s3::{wait_gone, S3sFs};
use common::{header, stream_path, Api, TestOrigin};
use origin::http::HttpConfig;
use origin::objects::keys;
use origin::store::StoreConfig;
use shared::offset::{Offset, CHUNK_BYTES};

const MIB: usize = 1024 * 1024;

fn store_config(server: &S3sFs) -> impl FnOnce(std::path::PathBuf) -> StoreConfig {
    store_config_with(server, |_| {})
}

fn store_config_with(
    server: &S3sFs,
    tune: impl FnOnce(&mut StoreConfig),
) -> impl FnOnce(std::path::PathBuf) -> StoreConfig {
    let settings = server.settings();
    move |data| {
        let mut c = StoreConfig::new(data);
        c.object_store = Some(S3sFs::URL.to_owned());
        c.object_store_settings = settings;
        tune(&mut c);
        c
    }
}

/// Polls a metric until it reaches `at_least` (generous deadline).
async fn wait_metric(api: &Api, name: &str, at_least: i64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let v = api.metric(name).await;
        if v >= at_least {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{name} stayed at {v}, below {at_least}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn wait_sealed(api: &Api, chunks: i64) {
    wait_metric(api, "ds_origin_chunks_sealed_total", chunks).await;
}

/// Disk space the stream files hold (allocated blocks, so punched holes
/// count as nothing).
fn stream_files_bytes(data: &Path) -> u64 {
    std::fs::read_dir(data.join("streams"))
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().blocks() * 512)
        .sum()
}

fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (seed * 31 + j % 251) as u8).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn complete_chunks_and_a_closed_streams_last_chunk_are_sealed_byte_exact() {
    let server = S3sFs::start();
    let dir = tempfile::tempdir().unwrap();
    let origin = TestOrigin::start_in(
        dir.path().to_owned(),
        HttpConfig::default(),
        store_config(&server),
    )
    .await;
    let api = Api::on(origin);
    let path = stream_path("sealing");
    let token = header(
        &api.create(&path, "application/octet-stream").await,
        "stream-incarnation",
    )
    .unwrap();
    let mut all = Vec::new();
    for i in 0..9 {
        let part: Vec<u8> = (0..MIB).map(|j| (i * 13 + j % 241) as u8).collect();
        api.append(&path, "application/octet-stream", part.clone())
            .await;
        all.extend(part);
    }
    // 9 MiB: chunks 0 and 1 are complete, the third is open.
    wait_sealed(&api, 2).await;
    // Once their seals are durable, their local copies go.
    wait_metric(
        &api,
        "ds_origin_local_dropped_bytes_total",
        2 * CHUNK_BYTES as i64,
    )
    .await;
    let on_disk = stream_files_bytes(dir.path());
    assert!(
        on_disk <= (2 * MIB) as u64,
        "the stream file keeps only the open chunk ({on_disk} bytes allocated)"
    );
    // Reads of the dropped range come from object storage, byte-exact, also
    // when they span sealed and local bytes.
    assert_eq!(read_paginated(&api, &path).await, all);
    let span = api
        .get(&format!(
            "{path}?offset={}&max_bytes=2097152",
            Offset(7 * MIB as u64)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(span.status(), 200);
    assert_eq!(span.bytes().await.unwrap(), all[7 * MIB..9 * MIB]);
    assert!(api.metric("ds_origin_chunk_cache_misses_total").await >= 2);
    assert_eq!(read_by_chunks(&api, &path, &token).await, all);
    let objects = server.objects();
    for k in 0..2u64 {
        let key = keys::chunk(&path, &token, Offset(k * CHUNK_BYTES));
        let stored = objects.get(&key).await.unwrap();
        assert_eq!(
            stored,
            all[(k * CHUNK_BYTES) as usize..((k + 1) * CHUNK_BYTES) as usize],
            "chunk {k}"
        );
    }
    let open_chunk = keys::chunk(&path, &token, Offset(2 * CHUNK_BYTES));
    assert!(
        objects.get(&open_chunk).await.is_err(),
        "the open chunk is not sealed"
    );

    // Closing seals the last, short chunk.
    api.close(&path).await;
    wait_sealed(&api, 3).await;
    assert_eq!(
        objects.get(&open_chunk).await.unwrap(),
        all[(2 * CHUNK_BYTES) as usize..]
    );

    // After a restart the stream reads the same, and nothing is sealed twice
    // (the sealed prefix came back from the log).
    let Api { origin, .. } = api;
    let (data, _keep) = origin.stop().await;
    let origin = TestOrigin::start_in(data, HttpConfig::default(), store_config(&server)).await;
    let api = Api::on(origin);
    assert_eq!(read_paginated(&api, &path).await, all);
    assert_eq!(api.metric("ds_origin_chunks_sealed_total").await, 0);
    assert_eq!(api.metric("ds_origin_seal_errors_total").await, 0);
}

/// Reads a stream from the start through its chunk URLs.
async fn read_by_chunks(api: &Api, path: &str, token: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = Offset(0);
    loop {
        let r = api
            .get(&format!("{path}/incarnation/{token}/chunk/{offset}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "chunk at {offset}");
        let next = header(&r, "stream-next-offset").unwrap();
        let body = r.bytes().await.unwrap();
        out.extend_from_slice(&body);
        if body.is_empty() || next == offset.to_string() {
            return out;
        }
        offset = Offset(u64::from_str_radix(&next, 16).unwrap());
    }
}

/// Reads a stream from the start by following `Stream-Next-Offset`.
async fn read_paginated(api: &Api, path: &str) -> Vec<u8> {
    let mut out = Vec::new();
    let mut offset = "-1".to_owned();
    loop {
        let r = api
            .get(&format!("{path}?offset={offset}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let done = header(&r, "stream-up-to-date").is_some();
        offset = header(&r, "stream-next-offset").unwrap();
        out.extend_from_slice(&r.bytes().await.unwrap());
        if done {
            return out;
        }
    }
}

/// More than 64 MiB across many streams, an origin restart, then every byte
/// back by ordinary reads and by chunk URLs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_over_64_mib_read_back_byte_exact_after_a_restart() {
    let server = S3sFs::start();
    let dir = tempfile::tempdir().unwrap();
    let origin = TestOrigin::start_in(
        dir.path().to_owned(),
        HttpConfig::default(),
        store_config(&server),
    )
    .await;
    let api = Api::on(origin);
    const STREAMS: usize = 8;
    const PER_STREAM: usize = 9 * MIB; // 72 MiB in all
    let mut streams = Vec::new();
    for s in 0..STREAMS {
        let path = stream_path(&format!("bulk-{s}"));
        let token = header(
            &api.create(&path, "application/octet-stream").await,
            "stream-incarnation",
        )
        .unwrap();
        streams.push((path, token, Vec::new()));
    }
    // Interleaved appends of uneven sizes, so chunk boundaries fall inside
    // appends.
    let mut round = 0;
    while streams.iter().any(|(_, _, d)| d.len() < PER_STREAM) {
        for (s, (path, _, data)) in streams.iter_mut().enumerate() {
            let len = (700 * 1024 + round * 4099 + s * 17).min(PER_STREAM - data.len());
            if len == 0 {
                continue;
            }
            let part = pattern(s + round, len);
            api.append(path, "application/octet-stream", part.clone())
                .await;
            data.extend(part);
        }
        round += 1;
    }
    // Half of them closed: their last, short chunk is sealed too.
    for (path, _, _) in streams.iter().step_by(2) {
        api.close(path).await;
    }
    let chunks = (STREAMS * 2 + STREAMS / 2) as i64;
    wait_sealed(&api, chunks).await;
    let Api { origin, .. } = api;
    let (data_dir, _keep) = origin.stop().await;
    let origin = TestOrigin::start_in(
        data_dir.clone(),
        HttpConfig::default(),
        store_config(&server),
    )
    .await;
    let api = Api::on(origin);
    let on_disk = stream_files_bytes(&data_dir);
    assert!(
        on_disk <= (STREAMS * 2 * MIB) as u64,
        "only open chunks stay on local disk ({on_disk} bytes allocated)"
    );
    for (path, token, data) in &streams {
        assert_eq!(&read_paginated(&api, path).await, data, "{path} by reads");
        assert_eq!(
            &read_by_chunks(&api, path, token).await,
            data,
            "{path} by chunks"
        );
    }
    assert_eq!(api.metric("ds_origin_seal_errors_total").await, 0);
}

/// Object storage goes away mid-load: appends go on up to the bound of
/// unsealed bytes, then 503 + Retry-After; a read that needs a sealed chunk
/// answers 503 + Retry-After; an origin restart in the outage loses
/// nothing; once the server is back, sealing resumes by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_storage_outage_bounds_local_growth_and_loses_nothing() {
    let mut server = S3sFs::start();
    let dir = tempfile::tempdir().unwrap();
    let bound = 2 * CHUNK_BYTES;
    let tune = move |c: &mut StoreConfig| {
        c.max_unsealed_bytes = bound;
        c.chunk_cache_bytes = 0; // every sealed read goes to object storage
        c.seal_retry_max = Duration::from_millis(200);
    };
    let origin = TestOrigin::start_in(
        dir.path().to_owned(),
        HttpConfig::default(),
        store_config_with(&server, tune),
    )
    .await;
    let api = Api::on(origin);
    let path = stream_path("outage");
    api.create(&path, "application/octet-stream").await;
    let mut acked = Vec::new();
    for i in 0..5 {
        let part = pattern(i, MIB);
        api.append(&path, "application/octet-stream", part.clone())
            .await;
        acked.extend(part);
    }
    wait_sealed(&api, 1).await;
    wait_metric(
        &api,
        "ds_origin_local_dropped_bytes_total",
        CHUNK_BYTES as i64,
    )
    .await;

    server.stop();
    // Appends go on until the complete, unsealed chunks reach the bound.
    let mut refused = None;
    for i in 5..64 {
        let part = pattern(i, MIB);
        let r = api
            .post(&path)
            .header("content-type", "application/octet-stream")
            .body(part.clone())
            .send()
            .await
            .unwrap();
        if r.status() == 503 {
            refused = Some(r);
            break;
        }
        assert!(r.status().is_success(), "append {i}: {}", r.status());
        acked.extend(part);
    }
    let refused = refused.expect("appends are refused once the bound is reached");
    assert!(header(&refused, "retry-after").is_some());
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "UNAVAILABLE");
    let unsealed = (acked.len() as u64 / CHUNK_BYTES) * CHUNK_BYTES - CHUNK_BYTES;
    assert!(
        unsealed >= bound && unsealed < bound + CHUNK_BYTES,
        "refusals start at the bound ({unsealed} bytes unsealed)"
    );
    let local = stream_files_bytes(dir.path());
    assert!(
        local <= bound + CHUNK_BYTES + MIB as u64,
        "local growth stays bounded ({local} bytes)"
    );
    // A read of the sealed (dropped) chunk cannot be served: 503, at once.
    let started = Instant::now();
    let r = api.get(&format!("{path}?offset=-1")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(header(&r, "retry-after").is_some());
    assert!(started.elapsed() < Duration::from_secs(30));
    // Unsealed bytes still read from local disk.
    let r = api
        .get(&format!("{path}?offset={}", Offset(CHUNK_BYTES)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.bytes().await.unwrap(),
        acked[CHUNK_BYTES as usize..(CHUNK_BYTES as usize + 8 * MIB).min(acked.len())]
    );

    // Restart the origin during the outage: nothing acknowledged is lost,
    // and the bound still holds.
    let Api { origin, .. } = api;
    let (data_dir, _keep) = origin.stop().await;
    let origin = TestOrigin::start_in(
        data_dir,
        HttpConfig::default(),
        store_config_with(&server, tune),
    )
    .await;
    let api = Api::on(origin);
    let r = api
        .post(&path)
        .header("content-type", "application/octet-stream")
        .body(vec![1u8; 10])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 503, "the bound holds across the restart");

    // Object storage is back: sealing resumes, appends are taken again.
    server.restart();
    wait_metric(&api, "ds_origin_chunks_sealed_total", 2).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while api.metric("ds_origin_unsealed_bytes").await > 0 {
        assert!(Instant::now() < deadline, "sealing caught up in time");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let last = pattern(99, 1000);
    api.append(&path, "application/octet-stream", last.clone())
        .await;
    acked.extend(last);
    assert_eq!(read_paginated(&api, &path).await, acked);
}

/// A snapshot in parts (a multipart upload into s3s-fs), retention to it,
/// and garbage collection: chunks wholly before retention, the replaced
/// snapshot, and everything of a deleted stream leave object storage; the
/// chunk that retention cuts through stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_and_deletes_collect_garbage_in_object_storage() {
    let server = S3sFs::start();
    let dir = tempfile::tempdir().unwrap();
    let origin = TestOrigin::start_in(
        dir.path().to_owned(),
        HttpConfig::default(),
        store_config_with(&server, |c| c.gc_grace = Duration::ZERO),
    )
    .await;
    let api = Api::on(origin);
    let objects = server.objects();
    let path = stream_path("gc");
    let token = header(
        &api.create(&path, "application/octet-stream").await,
        "stream-incarnation",
    )
    .unwrap();
    let mut all = Vec::new();
    for i in 0..9 {
        let part = pattern(i, MIB);
        api.append(&path, "application/octet-stream", part.clone())
            .await;
        all.extend(part);
    }
    wait_sealed(&api, 2).await;

    // A 12 MiB snapshot in two staged parts.
    let at = 8 * MIB as u64 + 100;
    let parts = [pattern(50, 6 * MIB), pattern(51, 6 * MIB)];
    for (n, p) in parts.iter().enumerate() {
        let r = api
            .put(&format!("{path}/snapshot/{}/part/{n}", Offset(at)))
            .body(p.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
    }
    let r = api
        .put(&format!("{path}/snapshot/{}", Offset(at)))
        .header("stream-snapshot-parts", "2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let digest = header(&r, "stream-snapshot-digest").unwrap();
    let snapshot_key = keys::snapshot(&path, &token, Offset(at), &digest);
    assert_eq!(objects.get(&snapshot_key).await.unwrap(), parts.concat());
    let got = api.get(&format!("{path}/snapshot")).send().await.unwrap();
    assert_eq!(got.bytes().await.unwrap(), parts.concat());

    let r = api
        .put(&format!("{path}/snapshot/{}/retain", Offset(at)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    for k in 0..2 {
        wait_gone(
            &objects,
            &keys::chunk(&path, &token, Offset(k * CHUNK_BYTES)),
        )
        .await;
    }
    api.close(&path).await;
    wait_sealed(&api, 3).await;
    let cut = keys::chunk(&path, &token, Offset(2 * CHUNK_BYTES));
    assert_eq!(
        objects.get(&cut).await.unwrap(),
        all[2 * CHUNK_BYTES as usize..],
        "the chunk retention cuts through stays"
    );
    assert_eq!(read_paginated(&api, &path).await, all[at as usize..]);

    // Replacing the snapshot collects the old one.
    let r = api
        .put(&format!("{path}/snapshot/{}", Offset(all.len() as u64)))
        .header("stream-snapshot-match", &digest)
        .body("final")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let final_key = keys::snapshot(
        &path,
        &token,
        Offset(all.len() as u64),
        &header(&r, "stream-snapshot-digest").unwrap(),
    );
    wait_gone(&objects, &snapshot_key).await;
    assert_eq!(objects.get(&final_key).await.unwrap(), &b"final"[..]);

    // Deleting the stream collects everything of its incarnation.
    let r = api.delete(&path).send().await.unwrap();
    assert_eq!(r.status(), 204);
    wait_gone(&objects, &cut).await;
    wait_gone(&objects, &final_key).await;
}
