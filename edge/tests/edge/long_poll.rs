//! Long-poll collapsing, counted at the edge's `/metrics`.

use futures::future::join_all;

use crate::common::*;

const UPSTREAM_LONG_POLLS: &str = "ds_edge_upstream_requests_total{kind=\"long_poll\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_long_pollers_make_one_upstream_long_poll_per_append() {
    const N: usize = 1000;
    let s = Stack::start().await;
    let p = stream_path("lp");
    s.create(&p, "text/plain").await;
    s.append(&p, "text/plain", "a").await;
    let mut at = offset(1);
    let mut cursor: Option<String> = None;
    for round in 0..3 {
        let before = s.metric(UPSTREAM_LONG_POLLS).await;
        let url = match &cursor {
            Some(c) => s.url(&format!(
                "{p}?offset={at}&live=long-poll&timeout_ms=30000&cursor={c}"
            )),
            None => s.url(&format!("{p}?offset={at}&live=long-poll&timeout_ms=30000")),
        };
        let pollers: Vec<_> = (0..N)
            .map(|_| {
                let req = s.http.get(&url);
                tokio::spawn(async move {
                    let r = req.send().await.expect("long-poll");
                    let status = r.status().as_u16();
                    let next = header(&r, "stream-next-offset");
                    let cursor = header(&r, "stream-cursor");
                    let body = r.bytes().await.expect("body");
                    (status, next, cursor, body)
                })
            })
            .collect();
        s.wait_metric("ds_edge_long_polls_waiting", |v| v == N as i64)
            .await;
        assert_eq!(s.metric(UPSTREAM_LONG_POLLS).await, before + 1);
        let text = format!("round {round}");
        s.append(&p, "text/plain", text.clone()).await;
        let answers = join_all(pollers).await;
        let (_, next, c, _) = answers[0].as_ref().unwrap().clone();
        for a in answers {
            let (status, n, cur, body) = a.unwrap();
            assert_eq!(status, 200);
            assert_eq!(&body[..], text.as_bytes());
            assert_eq!(n, next, "every waiter gets the same answer");
            assert_eq!(cur, c);
        }
        assert_eq!(
            s.metric(UPSTREAM_LONG_POLLS).await,
            before + 1,
            "one upstream long-poll for {N} waiters"
        );
        at = next.expect("next offset");
        cursor = c;
    }
    assert_eq!(
        s.metric("ds_edge_collapsed_waiters_total").await,
        3 * (N as i64 - 1)
    );
    assert_eq!(s.metric("ds_edge_long_polls_waiting").await, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn different_keys_do_not_share_and_a_timeout_is_the_origins_204() {
    let s = Stack::start().await;
    let p = stream_path("lp-keys");
    s.create(&p, "text/plain").await;
    s.append(&p, "text/plain", "abc").await;
    let get = |q: &str| s.http.get(s.url(&format!("{p}?{q}"))).send();
    let (a, b) = tokio::join!(
        get("offset=0000000000000003&live=long-poll&timeout_ms=300"),
        get("offset=0000000000000003&live=long-poll&timeout_ms=300&max_bytes=1"),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.status(), 204);
    assert_eq!(b.status(), 204);
    assert_eq!(header(&a, "cache-control").as_deref(), Some("no-store"));
    assert_eq!(header(&a, "stream-up-to-date").as_deref(), Some("true"));
    assert!(header(&a, "stream-cursor").is_some());
    assert_eq!(s.metric(UPSTREAM_LONG_POLLS).await, 2);
    // Data already there answers at once, with the origin's caching.
    let r = get("offset=0000000000000001&live=long-poll").await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        header(&r, "cache-control").as_deref(),
        Some("public, max-age=60, stale-while-revalidate=300")
    );
    assert_eq!(&r.bytes().await.unwrap()[..], b"bc");
    // A missing stream: the origin's 404.
    let r = s
        .get(&format!("{}?offset=-1&live=long-poll", stream_path("none")))
        .await;
    assert_eq!(r.status(), 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_the_edge_ends_waiting_long_polls_and_sse_readers() {
    let mut s = Stack::start().await;
    let p = stream_path("stop");
    s.create(&p, "text/plain").await;
    let poll = s
        .http
        .get(s.url(&format!("{p}?offset=now&live=long-poll&timeout_ms=60000")));
    let poll = tokio::spawn(async move { poll.send().await.map(|r| r.status().as_u16()) });
    let sse = s.get(&format!("{p}?offset=-1&live=sse")).await;
    assert_eq!(sse.status(), 200);
    let mut sse = Sse::new(sse, WAIT);
    assert_eq!(sse.next().await.expect("control").event, "control");
    s.wait_metric("ds_edge_long_polls_waiting", |v| v == 1)
        .await;
    let took = s.stop_edge().await;
    assert!(took.as_secs() < 5, "stopping took {took:?}");
    assert_eq!(poll.await.unwrap().ok(), Some(503));
    assert_eq!(sse.next().await, None, "the SSE answer ends");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_waiter_and_reader_limits_the_edge_answers_503() {
    let limits = edge::config::Limits {
        max_waiters: 2,
        max_sse_readers: 1,
        ..Default::default()
    };
    let s = Stack::start_with(origin::http::JsonReads::Ndjson, limits).await;
    let p = stream_path("limits");
    s.create(&p, "text/plain").await;
    let waiting: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|c| {
            let req = s.http.get(s.url(&format!(
                "{p}?offset=now&live=long-poll&timeout_ms=60000&cursor={c}"
            )));
            tokio::spawn(async move { req.send().await.map(|r| r.status().as_u16()) })
        })
        .collect();
    s.wait_metric("ds_edge_long_polls_waiting", |v| v == 2)
        .await;
    let r = s
        .get(&format!("{p}?offset=now&live=long-poll&cursor=c"))
        .await;
    assert_eq!(r.status(), 503);
    assert_eq!(header(&r, "retry-after").as_deref(), Some("1"));
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["code"], "UNAVAILABLE");

    let first = s.get(&format!("{p}?offset=-1&live=sse")).await;
    assert_eq!(first.status(), 200);
    let r = s.get(&format!("{p}?offset=-1&live=sse")).await;
    assert_eq!(r.status(), 503);
    assert_eq!(header(&r, "retry-after").as_deref(), Some("1"));

    // The waiters still get their answer.
    s.append(&p, "text/plain", "x").await;
    for w in waiting {
        assert_eq!(w.await.unwrap().ok(), Some(200));
    }
    drop(first);
}

/// An SSE reader the edge forwards to the origin (here one with a small
/// `max_bytes`, which the shared feed does not serve) holds a place among
/// `max_sse_readers` as a shared one does, until its answer ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forwarded_sse_reader_holds_a_place_among_the_readers() {
    let limits = edge::config::Limits {
        max_sse_readers: 1,
        ..Default::default()
    };
    let s = Stack::start_with(origin::http::JsonReads::Ndjson, limits).await;
    let p = stream_path("forwarded-sse");
    s.create(&p, "text/plain").await;
    let forwarded = s.get(&format!("{p}?offset=-1&live=sse&max_bytes=10")).await;
    assert_eq!(forwarded.status(), 200);
    let r = s.get(&format!("{p}?offset=-1&live=sse")).await;
    assert_eq!(r.status(), 503, "the forwarded reader holds the one place");
    assert_eq!(header(&r, "retry-after").as_deref(), Some("1"));
    // Closing the stream ends the forwarded answer, and its place with it.
    let closed = s
        .http
        .post(s.origin_url(&p))
        .header("content-type", "text/plain")
        .header("stream-closed", "true")
        .send()
        .await
        .unwrap();
    assert!(closed.status().is_success(), "{}", closed.status());
    let ended = tokio::time::timeout(WAIT, forwarded.bytes()).await;
    assert!(ended.is_ok(), "the forwarded answer ended");
    // The edge lets go of the answer just after its last byte.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let r = s.get(&format!("{p}?offset=-1&live=sse")).await;
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 503);
        assert!(
            tokio::time::Instant::now() < deadline,
            "its place never came back"
        );
    }
}
