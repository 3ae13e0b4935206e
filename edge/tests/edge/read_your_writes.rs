//! Read your writes through an edge in front of a follower (decision
//! 0025): a client appends through the region's owner and reads at once
//! through an edge whose origin is the follower, passing the append's
//! `Stream-Next-Offset` as `min_next_offset`. The edge knew the stream's
//! state from before the write, so it asks again (reads cut from chunks)
//! or passes the floor on (reads it forwards): every answer holds the
//! write. The origins are processes in object durability on SeaweedFS
//! (`cargo build -p origin` first, as for the differential test).

use std::time::{Duration, Instant};

use crate::common::seaweed::Seaweed;
use crate::common::*;
use crate::differential::region::{base, spawn, wait_until};

async fn edge_metric(http: &reqwest::Client, edge: &str, series: &str) -> i64 {
    let text = http
        .get(format!("{edge}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    metric_value(&text, series).unwrap_or(0)
}

/// Appends `body` at `url`: the `Stream-Next-Offset` it was answered with.
async fn append(http: &reqwest::Client, url: &str, body: Vec<u8>) -> String {
    let resp = http
        .post(url)
        .header("content-type", "application/octet-stream")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    resp.headers()["stream-next-offset"]
        .to_str()
        .unwrap()
        .to_owned()
}

/// A read of `url`: status, `Stream-Next-Offset`, body.
async fn read(http: &reqwest::Client, url: &str) -> (u16, String, Vec<u8>) {
    let resp = http
        .get(url)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    let next = header(&resp, "stream-next-offset").unwrap_or_default();
    (status, next, resp.bytes().await.unwrap().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_reads_a_write_through_an_edge_in_front_of_a_follower() {
    const CHUNK: usize = 4 << 20;
    let weed = Seaweed::start();
    let dir = tempfile::tempdir().unwrap();
    let http = client();
    let a = spawn(&weed, dir.path().join("a"), "edge-ryw", "a");
    wait_until(&http, &base(&a), true).await;
    let b = spawn(&weed, dir.path().join("b"), "edge-ryw", "b");
    wait_until(&http, &base(&b), false).await;
    let config = edge::config::EdgeConfig::new(base(&b).parse().unwrap(), 64 << 20).unwrap();
    let (edge_addr, _, stop, _) = serve_edge(config).await;
    let edge = format!("http://{edge_addr}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while edge_metric(&http, &edge, "ds_edge_feed_live").await != 1 {
        assert!(
            Instant::now() < deadline,
            "the edge never followed the feed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // A stream past its first chunk, so reads from inside that chunk are
    // cut from chunks with the stream's state.
    let on_owner = format!("{}/v1/stream/edge-floor", base(&a));
    let on_edge = format!("{edge}/v1/stream/edge-floor");
    let made = http
        .put(&on_owner)
        .header("content-type", "application/octet-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(made.status(), 201);
    let mut written: Vec<u8> = (0..CHUNK + 100).map(|i| b'a' + (i % 26) as u8).collect();
    let mut floor = append(&http, &on_owner, written.clone()).await;
    let from = CHUNK - 16;
    let from_chunk = format!("{on_edge}?offset={}", offset(from as u64));
    // The edge learns the stream's state and tail before the writes.
    for _ in 0..2 {
        let (status, next, body) =
            read(&http, &format!("{from_chunk}&min_next_offset={floor}")).await;
        assert_eq!((status, next.as_str()), (200, floor.as_str()));
        assert_eq!(body, written[from..]);
    }
    let chunk_hits = r#"ds_edge_cache_hits_total{kind="chunk"}"#;
    let hits = edge_metric(&http, &edge, chunk_hits).await;

    for i in 0..100 {
        let before = floor.clone();
        let body = format!("<{i:03}>").into_bytes();
        floor = append(&http, &on_owner, body.clone()).await;
        written.extend_from_slice(&body);
        // Cut from chunks: the state the edge knew is below the floor.
        let (status, next, got) =
            read(&http, &format!("{from_chunk}&min_next_offset={floor}")).await;
        assert_eq!(
            (status, next.as_str()),
            (200, floor.as_str()),
            "after write {i}"
        );
        assert_eq!(got, written[from..], "after write {i}");
        // Forwarded to the follower with the floor (in the open chunk).
        let (status, next, got) = read(
            &http,
            &format!("{on_edge}?offset={before}&min_next_offset={floor}"),
        )
        .await;
        assert_eq!(
            (status, next.as_str()),
            (200, floor.as_str()),
            "after write {i}"
        );
        assert_eq!(got, body, "after write {i}");
    }
    let hits = edge_metric(&http, &edge, chunk_hits).await - hits;
    assert!(
        hits >= 100,
        "the reads were not cut from chunks ({hits} chunk hits)"
    );

    // A malformed floor is the origin's refusal, passed on.
    let (status, _, _) = read(&http, &format!("{on_edge}?offset=-1&min_next_offset=now")).await;
    assert_eq!(status, 400);
    let _ = stop.send(());
    drop((a, b));
}
