//! The shell's connection limits at the edge (the shell's own tests check
//! each limit exactly on a paused clock; these check the edge is served by
//! it and maps its refusals): a body that goes silent answers 408 and
//! appends nothing at the origin, and stalled bodies forwarded by the edge
//! (one client at the origin) stop no other write; idle connections to the
//! origin are bounded.

use std::time::Duration;

use shared::negotiate::JsonReads;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

fn stalled_post(path: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 8388608\r\n\r\na few bytes"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_body_answers_408_and_appends_nothing() {
    let mut limits = edge::config::Limits::default();
    limits.serve.body_idle_timeout = Duration::from_millis(300);
    let s = Stack::start_with(JsonReads::Ndjson, limits).await;
    let path = stream_path("edge-stalled");
    assert_eq!(s.create(&path, "text/plain").await.status(), 201);
    let mut c = tokio::net::TcpStream::connect(s.edge_addr).await.unwrap();
    c.write_all(stalled_post(&path).as_bytes()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    // Within 5 s: the origin's own idle timeout (10 s) cannot be the one
    // that answers.
    let n = tokio::time::timeout(Duration::from_secs(5), c.read(&mut buf))
        .await
        .expect("an answer within the test's bound")
        .unwrap();
    let answer = String::from_utf8_lossy(&buf[..n]);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("REQUEST_TIMEOUT"), "{answer}");
    let head = s.http.head(s.origin_url(&path)).send().await.unwrap();
    assert_eq!(header(&head, "stream-next-offset").unwrap(), offset(0));
}

/// 40 clients that send a POST's head through the edge with
/// `Content-Length: 8 MiB` and then nothing stop no other write through it.
/// At the origin they are one client (the edge's address): each first takes
/// its share for the length it declared, and gives back what it has not sent
/// once it pauses, so the share is free again within a second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_never_come_stop_no_other_write_through_the_edge() {
    let s = Stack::start().await;
    let path = stream_path("edge-slow-bodies");
    assert_eq!(s.create(&path, "text/plain").await.status(), 201);
    let mut stalled = Vec::new();
    for _ in 0..40 {
        let mut c = tokio::net::TcpStream::connect(s.edge_addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 8388608\r\n\r\n"
        );
        c.write_all(head.as_bytes()).await.unwrap();
        stalled.push(c);
    }
    for i in 0..10 {
        let r = s
            .http
            .post(s.url(&path))
            .header("content-type", "text/plain")
            .body(format!("append {i}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204, "append {i} beside 40 stalled bodies");
    }
    drop(stalled);
}

/// Idle connections to the origin are bounded (`--upstream-idle-connections`):
/// a burst of forwards opens one connection each, and once answered all
/// but the bound are closed rather than kept. Each forward here holds its
/// connection until its client sends the last byte of its body, so the
/// burst surely needs one connection per forward.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_idle_bound_connections_to_the_origin_are_closed() {
    const BURST: usize = 12;
    const IDLE: usize = 2;
    let mut limits = edge::config::Limits::default();
    limits.upstream_waiting.idle_http1 = IDLE;
    let s = Stack::start_with(JsonReads::Ndjson, limits).await;
    let origin_port = s.origin.addr.port();
    let path = stream_path("edge-idle-bound");
    assert_eq!(s.create(&path, "text/plain").await.status(), 201);
    // Every forward's head, then (with all of them open) every body.
    let mut open = Vec::new();
    for _ in 0..BURST {
        let mut c = tokio::net::TcpStream::connect(s.edge_addr).await.unwrap();
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n"
        );
        c.write_all(head.as_bytes()).await.unwrap();
        open.push(c);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    // One connection per waiting forward (the invalidation feed has one
    // more; the create's may be one of them).
    testkit::tcp::wait_established(
        origin_port,
        deadline,
        |n| n >= BURST,
        |n| format!("a connection to the origin per forward: {n} for {BURST} forwards"),
    )
    .await;
    for c in &mut open {
        c.write_all(b"ok").await.unwrap();
    }
    for c in &mut open {
        let mut buf = vec![0u8; 1024];
        let n = c.read(&mut buf).await.unwrap();
        let answer = String::from_utf8_lossy(&buf[..n]);
        assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");
    }
    // (A client of its own, whose connection closes with it.)
    let head = reqwest::Client::new()
        .head(s.origin_url(&path))
        .send()
        .await
        .unwrap();
    assert_eq!(
        header(&head, "stream-next-offset").unwrap(),
        offset(2 * BURST as u64)
    );
    drop(head);
    // All answered: at most the bound stay open, with the feed's (the
    // origin's side of a closed one ends once it reads the close).
    testkit::tcp::wait_established(
        origin_port,
        deadline + Duration::from_secs(10),
        |n| n <= IDLE + 1,
        |n| format!("idle connections kept past the bound: {n} open"),
    )
    .await;
}
