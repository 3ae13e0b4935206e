//! Waiting requests to the origin (the shared SSE tails' long-polls,
//! collapsed long-polls, the invalidation feed) share a bounded set of
//! HTTP/2 connections (`upstream::multiplexed`): connections fill before
//! more open, every reader still gets its events, and past connections ×
//! streams a new long-poll answers 503 + `Retry-After` until room frees.

use edge::config::Limits;
use edge::upstream::multiplexed::MultiplexLimits;
use origin::http::JsonReads;

use crate::common::*;

const CONNECTIONS: &str = "ds_edge_upstream_h2_connections";
const STREAMS: &str = "ds_edge_upstream_h2_streams";
const INVALIDATIONS: &str = "ds_edge_invalidations_total";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tails_share_few_http2_connections_and_past_their_room_a_long_poll_is_refused() {
    // 3 connections of 4 requests: the feed's long-poll and 11 tails fill
    // all 12.
    let limits = Limits {
        upstream_waiting: MultiplexLimits {
            connections: 3,
            streams: 4,
            ..MultiplexLimits::default()
        },
        ..Limits::default()
    };
    let s = Stack::start_with(JsonReads::Ndjson, limits).await;
    s.wait_metric(STREAMS, |v| v == 1).await;
    assert_eq!(
        s.metric(CONNECTIONS).await,
        1,
        "the feed alone: one connection"
    );
    const TAILED: usize = 11;
    let mut readers = Vec::new();
    for i in 0..TAILED {
        let p = stream_path(&format!("tailed-{i}"));
        s.create(&p, "text/plain").await;
        let r = s
            .http
            .get(s.url(&format!("{p}?offset=now&live=sse")))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        readers.push((p, Sse::new(r, WAIT)));
        // Connections fill before another opens.
        let want = (i as i64 + 2 + 3) / 4;
        s.wait_metric(CONNECTIONS, |v| v == want).await;
    }
    s.wait_metric(STREAMS, |v| v == 1 + TAILED as i64).await;
    assert_eq!(s.metric(CONNECTIONS).await, 3);
    assert_eq!(s.metric("ds_edge_upstream_live_reads").await, TAILED as i64);

    // Every reader gets its own stream's append through them.
    for (i, (p, _)) in readers.iter().enumerate() {
        s.append(p, "text/plain", format!("to {i}\n")).await;
    }
    for (i, (_, sse)) in readers.iter_mut().enumerate() {
        let got = sse
            .read_until(&offset(format!("to {i}\n").len() as u64))
            .await;
        assert_eq!(got, format!("to {i}\n").as_bytes(), "reader {i}");
    }

    // No room for one more waiting request: a long-poll of another stream
    // is refused at once. Creating a stream answers the feed's long-poll
    // (creates are in the feed), so every stream the probes use is created
    // first and the probes start once the feed and every tail wait again.
    // Each tail and the feed start their next poll as soon as one is
    // answered; a probe that lands in such a gap is served, and the next
    // probe goes on, on a stream of its own: a probe of the same stream
    // would join the flight the last one left behind.
    let seen = s.metric(INVALIDATIONS).await;
    let other = stream_path("one-too-many");
    s.create(&other, "text/plain").await;
    const PROBES: usize = 20;
    let probes: Vec<String> = (0..PROBES)
        .map(|i| stream_path(&format!("probe-{i}")))
        .collect();
    for probe in &probes {
        s.create(probe, "text/plain").await;
    }
    s.wait_metric(INVALIDATIONS, |v| v == seen + 1 + PROBES as i64)
        .await;
    s.wait_metric(STREAMS, |v| v == 1 + TAILED as i64).await;
    let mut probes = probes.iter();
    let refused = loop {
        let probe = probes
            .next()
            .expect("no long-poll was refused with every connection full");
        let r = s
            .get(&format!("{probe}?offset=now&live=long-poll&timeout_ms=500"))
            .await;
        if r.status() == 503 {
            break r;
        }
        // Room found: it waited its `timeout_ms` (204), or shared a
        // flight an earlier probe left behind and got its answer.
        assert!(
            r.status().is_success(),
            "a probe that found room: {} {:?}",
            r.status(),
            r.headers()
        );
    };
    assert_eq!(header(&refused, "retry-after").as_deref(), Some("1"));
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "UNAVAILABLE");

    // A reader leaves, its tail ends, and its room serves the long-poll.
    drop(readers.pop());
    s.wait_metric("ds_edge_upstream_live_reads", |v| v == TAILED as i64 - 1)
        .await;
    s.wait_metric(STREAMS, |v| v == TAILED as i64).await;
    let waiting = tokio::spawn({
        let url = s.url(&format!(
            "{other}?offset=now&live=long-poll&timeout_ms=30000"
        ));
        let http = s.http.clone();
        async move { http.get(url).send().await.unwrap() }
    });
    s.wait_metric(STREAMS, |v| v == 1 + TAILED as i64).await;
    s.append(&other, "text/plain", "woken").await;
    let answered = waiting.await.unwrap();
    assert_eq!(answered.status(), 200);
    assert_eq!(answered.text().await.unwrap(), "woken");
    assert_eq!(
        s.metric(CONNECTIONS).await,
        3,
        "no connection past the bound"
    );
}
