//! An edge whose origin sits behind an HTTP/1.1-only hop (nginx, as an
//! internal balancer or a sidecar without `h2c` would be): the edge finds
//! that HTTP/2 with prior knowledge does not pass (`upstream::waiting`),
//! says so in `ds_edge_upstream_protocol`, and sends its waiting requests
//! (the invalidation feed, shared tails, collapsed long-polls) over
//! HTTP/1.1; once the hop speaks HTTP/2, the next re-check moves them back.
//! (`DS_TEST_HOP=nginx` runs every other edge test through such a hop.)

use std::time::Duration;

use edge::config::{EdgeConfig, Limits};
use edge::core::upstream_protocol::Mode;
use edge::upstream::waiting::ProtocolChoice;
use futures::future::join_all;
use origin::http::JsonReads;

use crate::common::hop::Hop;
use crate::common::*;

fn protocol(hop: &std::net::SocketAddr, protocol: &str) -> String {
    format!("ds_edge_upstream_protocol{{origin=\"http://{hop}\",protocol=\"{protocol}\"}}")
}

/// An origin, a hop in front of it, and an edge in front of the hop (the
/// edge's own `DS_TEST_HOP` wrapping left out: the hop is this test's).
struct Behind {
    s: Stack,
    hop: Hop,
}

async fn behind_a_hop(choice: ProtocolChoice) -> Behind {
    let origin = TestOrigin::start(JsonReads::Ndjson).await;
    let hop = Hop::start(origin.addr);
    let mut config = EdgeConfig::new(
        format!("http://{}", hop.addr).parse().expect("hop url"),
        64 << 20,
    )
    .expect("config");
    config.limits = Limits {
        upstream_protocol: choice,
        ..Limits::default()
    };
    let served = serve_edge_direct(config).await;
    Behind {
        s: Stack::around(origin, served),
        hop,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_an_http1_hop_waiting_requests_take_http1_and_tails_long_polls_and_the_feed_work() {
    let Behind { s, hop } = behind_a_hop(ProtocolChoice::default()).await;
    // The feed follows (the edge was served once it did): over HTTP/1.1.
    assert_eq!(s.metric(&protocol(&hop.addr, "http1")).await, 1);
    assert_eq!(s.metric(&protocol(&hop.addr, "h2")).await, 0);
    assert_eq!(s.metric("ds_edge_upstream_h2_connections").await, 0);
    s.wait_metric("ds_edge_upstream_http1_waiting", |v| v >= 1)
        .await;

    // Collapsed long-polls: 50 readers, one upstream long-poll, all woken.
    let p = stream_path("hop-lp");
    s.create(&p, "text/plain").await;
    let url = s.url(&format!("{p}?offset=now&live=long-poll&timeout_ms=30000"));
    let before = s
        .metric("ds_edge_upstream_requests_total{kind=\"long_poll\"}")
        .await;
    let pollers: Vec<_> = (0..50)
        .map(|_| {
            let req = s.http.get(&url);
            tokio::spawn(async move {
                let r = req.send().await.expect("long-poll");
                (r.status().as_u16(), r.bytes().await.expect("body"))
            })
        })
        .collect();
    s.wait_metric("ds_edge_long_polls_waiting", |v| v == 50)
        .await;
    assert_eq!(
        s.metric("ds_edge_upstream_requests_total{kind=\"long_poll\"}")
            .await,
        before + 1,
        "one upstream long-poll for 50 readers"
    );
    s.append(&p, "text/plain", "woken").await;
    for answer in join_all(pollers).await {
        let (status, body) = answer.expect("poller");
        assert_eq!(status, 200);
        assert_eq!(&body[..], b"woken");
    }

    // A shared SSE tail: every reader gets every append.
    let t = stream_path("hop-sse");
    s.create(&t, "text/plain").await;
    let mut readers = Vec::new();
    for _ in 0..3 {
        let r = s
            .http
            .get(s.url(&format!("{t}?offset=now&live=sse")))
            .send()
            .await
            .expect("sse");
        assert_eq!(r.status(), 200);
        readers.push(Sse::new(r, WAIT));
    }
    s.wait_metric("ds_edge_upstream_live_reads", |v| v == 1)
        .await;
    s.append(&t, "text/plain", "one\n").await;
    s.append(&t, "text/plain", "two\n").await;
    for sse in &mut readers {
        assert_eq!(sse.read_until(&offset(8)).await, b"one\ntwo\n");
    }

    // The invalidation feed: a closed stream's chunk, kept by the edge,
    // stops being answered from memory once the stream is deleted at the
    // origin itself.
    let c = stream_path("hop-feed");
    let r = s
        .http
        .put(s.origin_url(&c))
        .header("content-type", "text/plain")
        .header("stream-closed", "true")
        .body("kept")
        .send()
        .await
        .expect("create closed");
    assert_eq!(r.status(), 201);
    let inc = header(&r, "stream-incarnation").expect("incarnation");
    let chunk = format!("{c}/incarnation/{inc}/chunk/{}", offset(0));
    let hits = "ds_edge_cache_hits_total{kind=\"chunk\"}";
    let before = s.metric(hits).await;
    for _ in 0..2 {
        let r = s.get(&chunk).await;
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.expect("chunk"), "kept");
    }
    assert!(s.metric(hits).await > before, "served from memory");
    let invalidations = s.metric("ds_edge_invalidations_total").await;
    let deleted = s
        .http
        .delete(s.origin_url(&c))
        .send()
        .await
        .expect("delete at the origin");
    assert_eq!(deleted.status().as_u16(), 204);
    let deadline = tokio::time::Instant::now() + WAIT;
    while s.get(&chunk).await.status() == 200 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the delete did not reach the edge through the hop's feed"
        );
        tokio::time::sleep(POLL).await;
    }
    assert!(s.metric("ds_edge_invalidations_total").await > invalidations);

    // Every request the hop passed on was HTTP/1.1 but the edge's one
    // probe of HTTP/2, which nginx refused.
    let log = hop.access_log();
    let h2: Vec<_> = log.iter().filter(|l| !l.starts_with("HTTP/1.1 ")).collect();
    assert!(
        h2.iter().all(|l| l.contains(" 400 PRI * HTTP/2.0")),
        "{h2:?}"
    );
    assert_eq!(h2.len(), 1, "one probe: {h2:?}");
    assert!(log.iter().any(|l| l.contains("live=long-poll")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hop_that_starts_speaking_h2_is_found_at_the_next_recheck() {
    let Behind { s, hop } = behind_a_hop(ProtocolChoice {
        mode: Mode::Auto,
        recheck: Duration::from_millis(200),
    })
    .await;
    assert_eq!(s.metric(&protocol(&hop.addr, "http1")).await, 1);
    // The same address now takes HTTP/2 with prior knowledge (nginx's
    // plain `listen … http2`), still HTTP/1.1 to the origin behind it.
    let upstream = hop.upstream;
    let addr = hop.stop();
    let h2c = Hop::start_h2c(upstream, Some(addr));
    // The feed's next long-polls re-check: the edge moves to HTTP/2.
    s.wait_metric(&protocol(&addr, "h2"), |v| v == 1).await;
    assert_eq!(s.metric(&protocol(&addr, "http1")).await, 0);
    s.wait_metric("ds_edge_upstream_h2_connections", |v| v >= 1)
        .await;
    // And long-polls work over it. (Written at the origin: nginx 1.22's
    // plain `http2` listener takes HTTP/2 alone, so the edge's HTTP/1.1
    // forwards cannot pass this hop.)
    let p = stream_path("hop-h2");
    let created = s
        .http
        .put(s.origin_url(&p))
        .header("content-type", "text/plain")
        .send()
        .await
        .expect("create");
    assert_eq!(created.status(), 201);
    let poll = s
        .http
        .get(s.url(&format!("{p}?offset=now&live=long-poll&timeout_ms=30000")))
        .send();
    let append = async {
        s.wait_metric("ds_edge_long_polls_waiting", |v| v == 1)
            .await;
        let appended = s
            .http
            .post(s.origin_url(&p))
            .header("content-type", "text/plain")
            .body("over h2")
            .send()
            .await
            .expect("append");
        assert_eq!(appended.status(), 204);
    };
    let (poll, ()) = tokio::join!(poll, append);
    let poll = poll.expect("long-poll");
    assert_eq!(poll.status(), 200);
    assert_eq!(&poll.bytes().await.expect("body")[..], b"over h2");
    assert!(
        h2c.access_log()
            .iter()
            .any(|l| l.starts_with("HTTP/2.0 200 GET ") && l.contains("live=long-poll")),
        "{:?}",
        h2c.access_log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_origin_that_speaks_h2_gets_it_and_http1_can_be_forced() {
    // Straight to the origin: found to speak HTTP/2.
    let origin = TestOrigin::start(JsonReads::Ndjson).await;
    let url = format!("http://{}", origin.addr);
    let config = EdgeConfig::new(url.parse().expect("url"), 64 << 20).expect("config");
    let s = Stack::around(origin, serve_edge_direct(config).await);
    assert_eq!(s.metric(&protocol(&s.origin.addr, "h2")).await, 1);
    assert_eq!(s.metric(&protocol(&s.origin.addr, "http1")).await, 0);
    assert_eq!(s.metric("ds_edge_upstream_http1_waiting").await, 0);

    // `--upstream-protocol http1`: HTTP/1.1 although HTTP/2 would pass.
    let origin = TestOrigin::start(JsonReads::Ndjson).await;
    let url = format!("http://{}", origin.addr);
    let mut config = EdgeConfig::new(url.parse().expect("url"), 64 << 20).expect("config");
    config.limits.upstream_protocol.mode = Mode::Http1;
    let s = Stack::around(origin, serve_edge_direct(config).await);
    assert_eq!(s.metric(&protocol(&s.origin.addr, "http1")).await, 1);
    s.wait_metric("ds_edge_upstream_http1_waiting", |v| v >= 1)
        .await;
    assert_eq!(s.metric("ds_edge_upstream_h2_connections").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_http1_bound_a_long_poll_is_refused_at_once() {
    // Room for the feed and one long-poll over HTTP/1.1.
    let origin = TestOrigin::start(JsonReads::Ndjson).await;
    let url = format!("http://{}", origin.addr);
    let mut config = EdgeConfig::new(url.parse().expect("url"), 64 << 20).expect("config");
    config.limits.upstream_protocol.mode = Mode::Http1;
    config.limits.upstream_waiting.http1_waiting = 2;
    let s = Stack::around(origin, serve_edge_direct(config).await);
    let p = stream_path("http1-bound");
    s.create(&p, "text/plain").await;
    let first = s
        .http
        .get(s.url(&format!("{p}?offset=now&live=long-poll&timeout_ms=30000")))
        .send();
    let second = async {
        s.wait_metric("ds_edge_upstream_http1_waiting", |v| v == 2)
            .await;
        // The feed polls again between answers: a long-poll that lands in
        // such a gap is served; the next goes on a stream of its own.
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let other = stream_path("http1-bound-probe");
            s.create(&other, "text/plain").await;
            let r = s
                .get(&format!("{other}?offset=now&live=long-poll&timeout_ms=300"))
                .await;
            if r.status() == 503 {
                assert!(header(&r, "retry-after").is_some());
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "never refused");
        }
        s.append(&p, "text/plain", "a").await;
    };
    let (first, ()) = tokio::join!(first, second);
    assert_eq!(first.expect("first").status(), 200);
}
