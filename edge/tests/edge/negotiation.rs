//! Content negotiation through the edge: a JSON stream's long-poll and SSE
//! readers that accept arrays and those that accept NDJSON never share an
//! upstream answer, and each gets the origin's answer for its own shape.

use futures::future::join_all;

use crate::common::*;

const JSON: &str = "application/json";
const NDJSON: &str = "application/x-ndjson";
const UPSTREAM_LONG_POLLS: &str = "ds_edge_upstream_requests_total{kind=\"long_poll\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_pollers_collapse_per_shape() {
    let s = Stack::start().await;
    let p = stream_path("neg-lp");
    s.create(&p, JSON).await;
    s.append(&p, JSON, "{\"a\":1}").await;
    let url = s.url(&format!(
        "{p}?offset={}&live=long-poll&timeout_ms=30000",
        offset(8)
    ));
    let before = s.metric(UPSTREAM_LONG_POLLS).await;
    // Ten readers of each shape; the Accept strings differ within a shape.
    let accepts = [
        Some("application/json"),
        Some("text/plain;q=0.1, application/json"),
        None,
        Some("*/*"),
        Some("application/x-ndjson"),
    ];
    let pollers: Vec<_> = (0..20)
        .map(|i| {
            let mut req = s.http.get(&url);
            let accept = accepts[i % accepts.len()];
            if let Some(a) = accept {
                req = req.header("accept", a);
            }
            tokio::spawn(async move {
                let r = req.send().await.expect("long-poll");
                let ct = header(&r, "content-type");
                let vary = header(&r, "vary");
                (
                    accept,
                    r.status().as_u16(),
                    ct,
                    vary,
                    r.text().await.unwrap(),
                )
            })
        })
        .collect();
    s.wait_metric("ds_edge_long_polls_waiting", |v| v == 20)
        .await;
    // Arrays, and the origin's default (no Accept, `*/*` and explicit
    // NDJSON send the same upstream request only when they mean the same:
    // the default and explicit NDJSON are kept apart).
    assert_eq!(s.metric(UPSTREAM_LONG_POLLS).await, before + 3);
    s.append(&p, JSON, "{\"b\":2}").await;
    for got in join_all(pollers).await {
        let (accept, status, ct, vary, body) = got.unwrap();
        assert_eq!(status, 200);
        assert_eq!(vary.as_deref(), Some("accept"));
        let arrays = accept.is_some_and(|a| a.contains(JSON));
        if arrays {
            assert_eq!(
                (ct.as_deref(), body.as_str()),
                (Some(JSON), "[{\"b\":2}]"),
                "{accept:?}"
            );
        } else {
            assert_eq!(
                (ct.as_deref(), body.as_str()),
                (Some(NDJSON), "{\"b\":2}\n"),
                "{accept:?}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_readers_get_the_shape_they_accept_from_their_own_hub() {
    let s = Stack::start().await;
    let p = stream_path("neg-sse");
    s.create(&p, JSON).await;
    s.append(&p, JSON, "[{\"a\":1},{\"a\":2}]").await;
    let open = |accept: &'static str| {
        let req = s
            .http
            .get(s.url(&format!("{p}?offset=-1&live=sse")))
            .header("accept", accept);
        async move { Sse::new(req.send().await.expect("sse"), WAIT) }
    };
    let mut arrays = open("text/event-stream, application/json").await;
    let mut ndjson = open("text/event-stream").await;
    assert_eq!(
        header(&arrays.resp, "stream-data-content-type").as_deref(),
        Some(JSON)
    );
    assert_eq!(
        header(&ndjson.resp, "stream-data-content-type").as_deref(),
        Some(NDJSON)
    );
    assert_eq!(header(&arrays.resp, "vary").as_deref(), Some("accept"));
    let end = offset(16);
    assert_eq!(arrays.read_until(&end).await, b"[{\"a\":1},{\"a\":2}]");
    assert_eq!(ndjson.read_until(&end).await, b"{\"a\":1}\n{\"a\":2}\n");
    // Both live now: one upstream tail per shape.
    s.wait_metric("ds_edge_upstream_live_reads", |v| v == 2)
        .await;
    s.append(&p, JSON, "{\"b\":3}").await;
    let end = offset(24);
    assert_eq!(arrays.read_until(&end).await, b"[{\"b\":3}]");
    assert_eq!(ndjson.read_until(&end).await, b"{\"b\":3}\n");
}
