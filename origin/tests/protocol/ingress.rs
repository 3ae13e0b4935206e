//! The ingress budget's shares: one client (here, one address) holding
//! stalled bodies takes at most its share of the budget, and another
//! client's appends go on. Before, one address could hold the whole budget
//! and every write of every client answered 503.

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

use crate::common::*;

/// A connection from `ip` (any 127.x.y.z reaches loopback).
async fn connect_from(ip: [u8; 4], to: std::net::SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.bind(std::net::SocketAddr::from((ip, 0))).unwrap();
    socket.connect(to).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_holds_at_most_its_share_and_others_write_on() {
    // 16 bodies of 2 MiB, each stalled after its first MiB: 16 MiB, the
    // whole budget, if nothing stopped them. (Large bodies take their share
    // ahead, and give back what they did not send once they pause.)
    stalled_bodies_hold_at_most_their_share(2 << 20, 1 << 20, 16).await;
}

/// The same with small bodies (64 KiB, which take share only once they
/// have to wait): 200 of them stalled after 32 KiB would hold 6.4 MiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_stalled_bodies_hold_at_most_their_share_too() {
    stalled_bodies_hold_at_most_their_share(64 << 10, 32 << 10, 200).await;
}

/// `count` bodies declaring `declared` bytes from 127.0.0.3, each stalled
/// after `sent`: at most the client's share (4 MiB) is held, the rest are
/// refused, and another client's appends go on.
async fn stalled_bodies_hold_at_most_their_share(declared: usize, sent: usize, count: usize) {
    let api = Api::start_with(origin::http::HttpConfig {
        max_body: 2 << 20,
        ingress_budget: 16 << 20,
        ingress_share_percent: 25,
        ingress_wait: Duration::from_millis(200),
        serve: shell::ServeConfig {
            body_idle_timeout: Duration::from_secs(120),
            ..shell::ServeConfig::default()
        },
        ..origin::http::HttpConfig::default()
    })
    .await;
    let path = stream_path(&format!("shares-{declared}"));
    api.create(&path, "application/octet-stream").await;
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: {declared}\r\n\r\n"
    );
    let mut stalled = Vec::new();
    for _ in 0..count {
        let mut c = connect_from([127, 0, 0, 3], api.origin.addr).await;
        c.write_all(head.as_bytes()).await.unwrap();
        c.write_all(&vec![7u8; sent]).await.unwrap();
        stalled.push(c);
    }
    // Each body either holds what it sent (and waits for the rest, which
    // never comes) or, finding the client's share (4 MiB) full, waits
    // `ingress_wait` and is refused. Settled: held / sent + refused = count.
    let share = 4 << 20;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = api.metrics().await;
        let refused = text
            .lines()
            .filter(|l| l.starts_with("ds_origin_requests_total{route=\"append\",status=\"503\"}"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
            .sum::<u64>();
        let held =
            metric_in(&text, "ds_origin_ingress_bytes").expect("ds_origin_ingress_bytes") as u64;
        assert!(held <= share, "one address holds {held} B, past its share");
        let sent = sent as u64;
        if held.is_multiple_of(sent) && held / sent + refused == count as u64 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "held {held} B, {refused} refused"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Another address (reqwest connects from 127.0.0.1) appends as usual.
    for i in 0..10 {
        let r = api
            .post(&path)
            .header("content-type", "application/octet-stream")
            .body(vec![i; 1 << 20])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204, "append {i} of another client");
    }
    drop(stalled);
    assert_eq!(
        api.end(&path).await,
        offset(10 << 20),
        "only the other client's bytes"
    );
}

/// Bodies of one client that together need more than its share pass in
/// turn: each takes its share for its whole declared length at once, so
/// none holds part of it while waiting for the rest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_clients_bodies_past_its_share_pass_in_turn() {
    let api = Api::start_with(origin::http::HttpConfig {
        max_body: 2 << 20,
        ingress_budget: 16 << 20,
        ingress_share_percent: 25,
        ..origin::http::HttpConfig::default()
    })
    .await;
    let path = stream_path("shares-in-turn");
    api.create(&path, "application/octet-stream").await;
    // Twelve 2 MiB bodies at once: 24 MiB against a share of 4 MiB.
    let sends = (0..12u8).map(|i| {
        api.post(&path)
            .header("content-type", "application/octet-stream")
            .body(vec![i; 2 << 20])
            .send()
    });
    for r in futures::future::join_all(sends).await {
        assert_eq!(r.unwrap().status(), 204);
    }
    assert_eq!(api.end(&path).await, offset(24 << 20));
}
