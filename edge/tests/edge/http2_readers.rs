//! Readers over HTTP/2 (prior knowledge): SSE tails and long-polls
//! multiplexed on one client connection get exactly what HTTP/1.1 readers
//! get: every byte once, in order, from one shared upstream tail, and
//! long-polls collapsed into one upstream request.

use futures::future::join_all;
use http::Version;

use crate::common::*;

const UPSTREAM_LONG_POLLS: &str = "ds_edge_upstream_requests_total{kind=\"long_poll\"}";

/// Below the edge's streams per HTTP/2 connection (256), SSE readers and
/// long-polls together.
const READERS: usize = 150;
const POLLERS: usize = 100;
const APPENDS: usize = 30;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_readers_and_long_polls_on_one_http2_connection_get_every_byte_once() {
    let mut s = Stack::start().await;
    // The test's own writes and metric reads close their connections, so
    // the edge's established connections are the readers' alone.
    s.http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .expect("client");
    let p = stream_path("h2-readers");
    s.create(&p, "text/plain").await;
    s.append(&p, "text/plain", "hello\n").await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .expect("client");
    let port = s.edge_addr.port();

    let mut expected = b"hello\n".to_vec();
    for i in 0..APPENDS {
        expected.extend_from_slice(format!("event {i}\n").as_bytes());
    }
    let end = offset(expected.len() as u64);
    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let req = h2.get(s.url(&format!("{p}?offset=-1&live=sse")));
            let end = end.clone();
            tokio::spawn(async move {
                let r = req.send().await.expect("SSE");
                assert_eq!(r.status(), 200);
                assert_eq!(r.version(), Version::HTTP_2);
                let mut sse = Sse::new(r, WAIT);
                let data = sse.read_until(&end).await;
                (data, sse)
            })
        })
        .collect();
    s.wait_metric("ds_edge_sse_open", |v| v == READERS as i64)
        .await;
    assert_eq!(s.metric("ds_edge_upstream_live_reads").await, 1);
    one_connection(port).await;
    for i in 0..APPENDS {
        s.append(&p, "text/plain", format!("event {i}\n")).await;
    }
    let mut open = Vec::new();
    for r in join_all(readers).await {
        let (data, sse) = r.expect("reader");
        assert!(
            data == expected,
            "byte-exact: {:?}",
            String::from_utf8_lossy(&data)
        );
        open.push(sse);
    }

    // Long-polls at the end, beside the open tails, on the same connection.
    let upstream = s.metric(UPSTREAM_LONG_POLLS).await;
    let url = s.url(&format!("{p}?offset={end}&live=long-poll&timeout_ms=30000"));
    let pollers: Vec<_> = (0..POLLERS)
        .map(|_| {
            let req = h2.get(&url);
            tokio::spawn(async move {
                let r = req.send().await.expect("long-poll");
                assert_eq!(r.version(), Version::HTTP_2);
                let status = r.status().as_u16();
                let next = header(&r, "stream-next-offset");
                (status, next, r.bytes().await.expect("body"))
            })
        })
        .collect();
    s.wait_metric("ds_edge_long_polls_waiting", |v| v == POLLERS as i64)
        .await;
    assert_eq!(s.metric(UPSTREAM_LONG_POLLS).await, upstream + 1);
    s.append(&p, "text/plain", "last\n").await;
    let last_end = offset(expected.len() as u64 + 5);
    for a in join_all(pollers).await {
        let (status, next, body) = a.expect("poller");
        assert_eq!(status, 200);
        assert_eq!(&body[..], b"last\n");
        assert_eq!(next.as_deref(), Some(last_end.as_str()));
    }
    assert_eq!(
        s.metric(UPSTREAM_LONG_POLLS).await,
        upstream + 1,
        "one upstream long-poll for {POLLERS} waiters"
    );
    // The tails go on: each gets the last append too, once.
    for mut sse in open {
        assert_eq!(sse.read_until(&last_end).await, b"last\n");
    }
    one_connection(port).await;
}

/// Waits until the edge has exactly one established connection (the
/// readers'; a closed one of the test's own may take a moment to go).
async fn one_connection(port: u16) {
    testkit::tcp::wait_established(
        port,
        std::time::Instant::now() + WAIT,
        |n| n == 1,
        |n| format!("{n} connections to the edge, not the readers' one"),
    )
    .await;
}
