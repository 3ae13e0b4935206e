//! Sealing complete chunks into a real S3-compatible server (s3s-fs).

mod common;

use std::time::{Duration, Instant};

use common::s3::S3sFs;
use common::{header, stream_path, Api, TestOrigin};
use origin::http::HttpConfig;
use origin::objects::keys;
use origin::store::StoreConfig;
use shared::offset::{Offset, CHUNK_BYTES};

const MIB: usize = 1024 * 1024;

fn store_config(server: &S3sFs) -> impl FnOnce(std::path::PathBuf) -> StoreConfig {
    let settings = server.settings();
    move |data| {
        let mut c = StoreConfig::new(data);
        c.object_store = Some(S3sFs::URL.to_owned());
        c.object_store_settings = settings;
        c
    }
}

async fn wait_sealed(api: &Api, chunks: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while api.metric("ds_chunks_sealed_total").await < chunks {
        assert!(
            Instant::now() < deadline,
            "{chunks} chunks were not sealed in time"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
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
    assert_eq!(api.metric("ds_chunks_sealed_total").await, 0);
    assert_eq!(api.metric("ds_seal_errors_total").await, 0);
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
