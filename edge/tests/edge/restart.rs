//! The origin restarts behind the edge: waiting long-polls are answered
//! (never stranded), cached chunks stay valid (the incarnation survives a
//! restart), and reads and writes through the edge go on byte-exact.

use shared::offset::CHUNK_BYTES;

use super::common::{header, offset, stream_path, Stack, WAIT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_rides_out_an_origin_restart() {
    let mut stack = Stack::start().await;
    let p = stream_path("restart");
    stack.create(&p, "application/octet-stream").await;
    let mut all: Vec<u8> = Vec::new();
    for i in 0..5u8 {
        let part = vec![i.wrapping_mul(37); 1 << 20];
        stack
            .append(&p, "application/octet-stream", part.clone())
            .await;
        all.extend(part);
    }
    let head = stack.http.head(stack.url(&p)).send().await.unwrap();
    let inc = header(&head, "stream-incarnation").unwrap();
    let chunk = stack.url(&format!("{p}/incarnation/{inc}/chunk/{}", offset(0)));
    let r = stack.http.get(&chunk).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap(), all[..CHUNK_BYTES as usize]);

    // Long-pollers wait at the end through the edge (one upstream flight).
    let end = offset(all.len() as u64);
    let mut waiters = Vec::new();
    for _ in 0..5 {
        let (http, url) = (
            stack.http.clone(),
            stack.url(&format!("{p}?offset={end}&live=long-poll&timeout_ms=30000")),
        );
        waiters.push(tokio::spawn(async move {
            http.get(url).send().await.unwrap().status().as_u16()
        }));
    }
    stack
        .wait_metric("ds_edge_long_polls_waiting", |v| v == 5)
        .await;

    stack.origin.restart().await;

    // Every waiter is answered: 503 when the shared upstream long-poll died
    // with the old origin, or the answer of a new one.
    for w in waiters {
        let status = tokio::time::timeout(WAIT, w)
            .await
            .expect("a waiter was stranded")
            .unwrap();
        assert!(matches!(status, 503 | 204 | 200), "a waiter got {status}");
    }
    // The cached chunk is still the stream's, and so is everything else.
    let r = stack.http.get(&chunk).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "stream-incarnation"), Some(inc.clone()));
    assert_eq!(r.bytes().await.unwrap(), all[..CHUNK_BYTES as usize]);
    stack
        .append(&p, "application/octet-stream", b"after".to_vec())
        .await;
    all.extend_from_slice(b"after");
    let mut read = Vec::new();
    let mut at = "-1".to_owned();
    loop {
        let r = stack
            .http
            .get(stack.url(&format!("{p}?offset={at}")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let done = header(&r, "stream-up-to-date").is_some();
        at = header(&r, "stream-next-offset").unwrap();
        read.extend_from_slice(&r.bytes().await.unwrap());
        if done {
            break;
        }
    }
    assert_eq!(read, all);
    // A new long-poll through the edge is answered by the new origin.
    let url = stack.url(&format!("{p}?offset={at}&live=long-poll&timeout_ms=30000"));
    let waiting = tokio::spawn({
        let http = stack.http.clone();
        async move { http.get(url).send().await.unwrap() }
    });
    stack
        .wait_metric("ds_edge_long_polls_waiting", |v| v == 1)
        .await;
    stack
        .append(&p, "application/octet-stream", b"!".to_vec())
        .await;
    let r = tokio::time::timeout(WAIT, waiting).await.unwrap().unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap(), &b"!"[..]);
}
