//! Deletes, recreations and retention made at the origin reach the edge
//! through the origin's invalidation feed: within the bound (1 s), every
//! URL of the stream answers at the edge as at the origin, including the
//! chunk URLs the edge kept; and an edge that lost its feed, or was
//! restarted, does not answer from what it can no longer cover for.

use std::time::{Duration, Instant};

use shared::offset::CHUNK_BYTES;

use crate::common::*;

const BOUND: Duration = Duration::from_secs(1);

/// Status, body and the headers an answer is judged by.
async fn answer(resp: reqwest::Response) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let status = resp.status().as_u16();
    let mut headers: Vec<(String, String)> = resp
        .headers()
        .iter()
        .filter(|(k, _)| {
            let k = k.as_str();
            (k.starts_with("stream-") && k != "stream-cursor")
                || ["etag", "content-type", "cache-control", "vary"].contains(&k)
        })
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("?").to_owned()))
        .collect();
    headers.sort();
    (
        status,
        headers,
        super::common::without_request_id(&resp.bytes().await.unwrap()),
    )
}

/// Polls until the edge answers `path_and_query` as the origin does; the
/// time it took.
async fn until_edge_agrees(s: &Stack, path_and_query: &str) -> Duration {
    let started = Instant::now();
    let want = answer(
        s.http
            .get(s.origin_url(path_and_query))
            .send()
            .await
            .unwrap(),
    )
    .await;
    loop {
        let got = answer(s.get(path_and_query).await).await;
        if got == want {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < WAIT,
            "{path_and_query}: the edge still answers {} with {:?}, the origin {} with {:?}",
            got.0,
            got.1,
            want.0,
            want.1
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A closed stream whose one chunk is immutable, filled into the edge.
async fn cached_closed_stream(s: &Stack, p: &str, body: &str) -> String {
    let r = s
        .http
        .put(s.origin_url(p))
        .header("content-type", "text/plain")
        .header("stream-closed", "true")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let inc = header(&r, "stream-incarnation").unwrap();
    let chunk = format!("{p}/incarnation/{inc}/chunk/{}", offset(0));
    for _ in 0..2 {
        let r = s.get(&chunk).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "stream-immutable").as_deref(), Some("true"));
        assert_eq!(r.text().await.unwrap(), body);
    }
    chunk
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletes_and_recreations_reach_every_url_within_the_bound() {
    let s = Stack::start().await;
    let mut delays = Vec::new();
    for i in 0..20 {
        let p = stream_path(&format!("inv-delete-{i}"));
        let chunk = cached_closed_stream(&s, &p, "old bytes").await;
        let hits = s.metric("ds_edge_cache_hits_total{kind=\"chunk\"}").await;
        assert!(
            hits > 0,
            "the chunk is served from memory before the delete"
        );
        let r = s.http.delete(s.origin_url(&p)).send().await.unwrap();
        assert_eq!(r.status(), 204);
        delays.push(until_edge_agrees(&s, &chunk).await);
        // Recreated with other bytes: reads and the old chunk URL answer as
        // the origin does, never with the old incarnation's bytes.
        let r = s
            .http
            .put(s.origin_url(&p))
            .header("content-type", "text/plain")
            .body("new")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        for q in [
            chunk.clone(),
            format!("{p}?offset=-1"),
            format!("{p}?offset={}&max_bytes=65536", offset(0)),
        ] {
            delays.push(until_edge_agrees(&s, &q).await);
        }
        let r = s.get(&format!("{p}?offset=-1")).await;
        assert_eq!(r.text().await.unwrap(), "new");
    }
    delays.sort();
    let p50 = delays[delays.len() / 2];
    let p99 = delays[delays.len() * 99 / 100];
    println!(
        "invalidation delay over {} answers: p50 {p50:?}, p99 {p99:?}, max {:?}",
        delays.len(),
        delays[delays.len() - 1]
    );
    assert!(p99 <= BOUND, "p99 {p99:?} over the bound");
    assert!(s.metric("ds_edge_invalidations_total").await >= 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_reaches_reads_and_chunk_urls_cut_from_memory() {
    let s = Stack::start_with_bucket().await;
    let p = stream_path("inv-retain");
    s.create(&p, "application/octet-stream").await;
    let data: Vec<u8> = (0..2 * CHUNK_BYTES + 100)
        .map(|i| (i % 251) as u8)
        .collect();
    for part in data.chunks(1 << 20) {
        s.append(&p, "application/octet-stream", part.to_vec())
            .await;
    }
    let head = s.http.head(s.origin_url(&p)).send().await.unwrap();
    let inc = header(&head, "stream-incarnation").unwrap();
    let c = CHUNK_BYTES;
    let urls = [
        format!("{p}?offset=-1"),
        format!("{p}?offset={}", offset(10)),
        format!("{p}?offset={}", offset(c + 10)),
        format!("{p}/incarnation/{inc}/chunk/{}", offset(0)),
        format!("{p}/incarnation/{inc}/chunk/{}", offset(c)),
    ];
    // Everything read once through the edge: chunks kept, state known.
    for u in &urls {
        until_edge_agrees(&s, u).await;
    }
    for u in &urls {
        s.get(u).await;
    }
    let at = c + 4096;
    let r = s
        .http
        .put(s.origin_url(&format!("{p}/snapshot/{}", offset(at))))
        .header("content-type", "application/octet-stream")
        .body("state")
        .send()
        .await
        .unwrap();
    let status = r.status();
    assert!(
        status.is_success(),
        "snapshot: {status} {}",
        r.text().await.unwrap()
    );
    let r = s
        .http
        .put(s.origin_url(&format!("{p}/snapshot/{}/retain", offset(at))))
        .send()
        .await
        .unwrap();
    assert!(r.status().is_success(), "retain: {}", r.status());
    for u in &urls {
        let took = until_edge_agrees(&s, u).await;
        assert!(took <= BOUND, "{u}: {took:?}");
    }
    let r = s.get(&urls[0]).await;
    assert_eq!(header(&r, "stream-retained-offset"), Some(offset(at)));
    assert_eq!(r.bytes().await.unwrap(), data[at as usize..]);
    let r = s.get(&urls[1]).await;
    assert_eq!(r.status(), 410);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_that_lost_its_feed_asks_the_origin_until_it_follows_it_again() {
    let mut s = Stack::start().await;
    let p = stream_path("inv-lost");
    let chunk = cached_closed_stream(&s, &p, "kept").await;
    let losses = s.metric("ds_edge_feed_losses_total").await;
    // The origin restarts (its feed starts again: the edge may have missed
    // events) and the stream is deleted at once, before the edge is back.
    s.origin.restart().await;
    let r = s.http.delete(s.origin_url(&p)).send().await.unwrap();
    assert_eq!(r.status(), 204);
    let took = until_edge_agrees(&s, &chunk).await;
    assert!(took <= BOUND, "{took:?}");
    assert!(s.metric("ds_edge_feed_losses_total").await > losses);
    wait_for_feed(&s.edge).await;
    // Followed again: a new stream's chunk is kept and served from memory.
    let q = stream_path("inv-lost-after");
    cached_closed_stream(&s, &q, "again").await;
    assert_eq!(s.metric("ds_edge_feed_live").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_restarted_during_a_delete_answers_as_the_origin() {
    let mut s = Stack::start().await;
    let p = stream_path("inv-edge-restart");
    let chunk = cached_closed_stream(&s, &p, "kept").await;
    s.stop_edge().await;
    let r = s.http.delete(s.origin_url(&p)).send().await.unwrap();
    assert_eq!(r.status(), 204);
    let (addr, state, stop, task) =
        start_edge(&format!("http://{}", s.origin.addr), Default::default()).await;
    s.edge_addr = addr;
    s.edge = state;
    s.replace_edge(stop, task);
    let took = until_edge_agrees(&s, &chunk).await;
    assert!(took <= BOUND);
    let r = s.get(&chunk).await;
    assert_eq!(r.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_made_through_the_edge_is_read_back_at_once_through_it() {
    let s = Stack::start().await;
    for i in 0..10 {
        let p = stream_path(&format!("inv-own-{i}"));
        let chunk = cached_closed_stream(&s, &p, "kept").await;
        let r = s.http.delete(s.url(&p)).send().await.unwrap();
        assert_eq!(r.status(), 204);
        // The very next request, with no wait for the feed.
        let r = s.get(&chunk).await;
        assert_eq!(r.status(), 404, "{chunk}");
    }
}

/// A rollback at the origin reaches the edge as a delete and a create do:
/// within the bound, the stream's reads answer with the new incarnation's
/// bytes and headers, and the old incarnation's chunk URL as the origin
/// answers it (412, naming the new one). A rollback sent through the edge
/// is read back through it at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollbacks_reach_every_url_within_the_bound() {
    let s = Stack::start().await;
    let p = stream_path("inv-rollback");
    let chunk = cached_closed_stream(&s, &p, "old bytes").await;
    let read = format!("{p}?offset=-1");
    until_edge_agrees(&s, &read).await;
    let old = chunk.split('/').rev().nth(2).unwrap().to_owned();
    let r = s
        .http
        .post(s.origin_url(&format!("{p}/incarnation/{old}/restore")))
        .header("stream-restore-offset", offset(3))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let new = header(&r, "stream-incarnation").unwrap();
    for url in [&read, &chunk] {
        let took = until_edge_agrees(&s, url).await;
        assert!(took <= BOUND, "{url}: {took:?}");
    }
    let r = s.get(&read).await;
    assert_eq!(header(&r, "stream-previous-incarnation"), Some(old));
    assert_eq!(r.text().await.unwrap(), "old");

    // Through the edge: the next read there is the rolled-back stream's.
    let r = s
        .http
        .post(s.url(&format!("{p}/incarnation/{new}/restore")))
        .header("stream-restore-offset", offset(1))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = s.get(&read).await;
    assert_eq!(header(&r, "stream-previous-incarnation"), Some(new));
    assert_eq!(r.text().await.unwrap(), "o");
}

/// SSE readers of an incarnation a rollback replaced, at the origin and
/// through the edge (one upstream tail fanned out), end with the same
/// `error` event: `INCARNATION_MISMATCH`, as a deleted stream's end with
/// `STREAM_NOT_FOUND`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_readers_of_a_rolled_back_incarnation_end_with_the_origins_error_event() {
    let s = Stack::start().await;
    let p = stream_path("inv-rollback-sse");
    s.create(&p, "text/plain").await;
    s.append(&p, "text/plain", "abcdef").await;
    let end = offset(6);
    let mut readers = Vec::new();
    for url in [s.origin_url(&p), s.url(&p)] {
        let r = s
            .http
            .get(format!("{url}?offset=-1&live=sse"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let mut sse = Sse::new(r, WAIT);
        assert_eq!(sse.read_until(&end).await, b"abcdef");
        readers.push(sse);
    }
    s.wait_metric("ds_edge_sse_open", |v| v == 1).await;
    let head = s.http.head(s.origin_url(&p)).send().await.unwrap();
    let token = header(&head, "stream-incarnation").unwrap();
    let r = s
        .http
        .post(s.origin_url(&format!("{p}/incarnation/{token}/restore")))
        .header("stream-restore-offset", offset(3))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for (at, mut sse) in ["origin", "edge"].into_iter().zip(readers) {
        let e = sse.expect("error").await;
        assert_eq!(e.json()["error"]["code"], "INCARNATION_MISMATCH", "{at}");
        sse.expect_end().await;
    }
}
