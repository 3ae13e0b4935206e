//! `Stream-Read-Origin` through the edge: without `--read-origin` the
//! edge passes on the origin's (its answers are the origin's), with it
//! the edge's replaces it on `HEAD` and every read, cached or not; a
//! refusal names none.

use edge::config::EdgeConfig;
use origin::http::{HttpConfig, JsonReads};

use crate::common::*;

async fn stack(origin_says: &str, edge_says: Option<&str>) -> Stack {
    let origin = TestOrigin::start_http(
        HttpConfig {
            json_reads: JsonReads::Ndjson,
            read_origin: Some(shared::read_origin::parse(origin_says).unwrap()),
            ..HttpConfig::default()
        },
        None,
    )
    .await;
    let mut config =
        EdgeConfig::new(format!("http://{}", origin.addr).parse().unwrap(), 64 << 20).unwrap();
    config.read_origin = edge_says.map(|e| shared::read_origin::parse(e).unwrap());
    let served = serve_edge(config).await;
    Stack::around(origin, served)
}

async fn names(s: &Stack, method: reqwest::Method, path_and_query: &str) -> (u16, Option<String>) {
    let r = s
        .http
        .request(method, s.url(path_and_query))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), header(&r, "stream-read-origin"))
}

/// A stream `name` with bytes in it, and what its `HEAD`, catch-up reads
/// (a miss, then a hit from the edge's cache), a long-poll and an SSE
/// reader are answered with as `Stream-Read-Origin`: `said`, each time.
async fn every_read_names(s: &Stack, name: &str, said: &str) {
    let p = stream_path(name);
    s.create(&p, "text/plain").await;
    s.append(&p, "text/plain", "abc").await;
    let said = Some(said.to_owned());
    let head = names(s, reqwest::Method::HEAD, &p).await;
    assert_eq!(head, (200, said.clone()));
    for _ in 0..2 {
        let read = names(s, reqwest::Method::GET, &format!("{p}?offset=-1")).await;
        assert_eq!(read, (200, said.clone()));
    }
    let poll = format!("{p}?offset=now&live=long-poll&timeout_ms=10");
    assert_eq!(
        names(s, reqwest::Method::GET, &poll).await,
        (204, said.clone())
    );
    let sse = s
        .http
        .get(s.url(&format!("{p}?offset=now&live=sse")))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&sse, "stream-read-origin"), said);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_passes_on_the_origins_read_origin() {
    let s = stack("https://origin-cdn.example", None).await;
    every_read_names(&s, "read-origin-passed", "https://origin-cdn.example").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edges_read_origin_replaces_the_origins() {
    let s = stack(
        "https://origin-cdn.example",
        Some("https://edge-cdn.example"),
    )
    .await;
    every_read_names(&s, "read-origin-replaced", "https://edge-cdn.example").await;
    assert_eq!(
        names(&s, reqwest::Method::HEAD, &stream_path("no-such")).await,
        (404, None)
    );
    // A write's answer names none.
    let created = s
        .create(&stream_path("read-origin-write"), "text/plain")
        .await;
    assert_eq!(header(&created, "stream-read-origin"), None);
}
