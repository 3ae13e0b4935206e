//! `--origin A,B`: the edge sends to one origin at a time and moves to the
//! next when it cannot connect; requests without a body go there at once,
//! one with a body fails (it was consumed; the edge answers 503) and the
//! next goes on.

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_origin_is_passed_over_for_the_next() {
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let live = TestOrigin::start(origin::http::JsonReads::Ndjson).await;
    let mut config = edge::config::EdgeConfig::new(dead_url.parse().unwrap(), 64 << 20).unwrap();
    config.more_origins = vec![format!("http://{}", live.addr).parse().unwrap()];
    let (addr, _state, _stop, _task) = spawn_edge(config).await;
    let http = client();
    let p = stream_path("failover");
    let on_live = format!("http://{}{p}", live.addr);
    let created = http
        .put(&on_live)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    // A read goes to the live origin at once, though the dead one comes first.
    let read = http
        .get(format!("http://{addr}{p}?offset=-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    // From now on writes go there too.
    let appended = http
        .post(format!("http://{addr}{p}"))
        .header("content-type", "text/plain")
        .body("through the edge")
        .send()
        .await
        .unwrap();
    assert_eq!(appended.status(), 204);
    let text = http
        .get(format!("{on_live}?offset=-1"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text, "through the edge");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_to_an_unreachable_origin_fails_and_the_next_goes_on() {
    use edge::metrics::Upstream as Kind;
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead_url: http::Uri = format!("http://{}", dead.local_addr().unwrap())
        .parse()
        .unwrap();
    drop(dead);
    let live = TestOrigin::start(origin::http::JsonReads::Ndjson).await;
    let live_url: http::Uri = format!("http://{}", live.addr).parse().unwrap();
    let upstream = edge::upstream::Upstream::new(
        &[dead_url, live_url],
        std::sync::Arc::new(edge::metrics::Metrics::default()),
        1 << 20,
        Default::default(),
        Default::default(),
    );
    let create = || {
        let mut req = http::Request::new(axum::body::Body::from("first"));
        *req.method_mut() = http::Method::PUT;
        *req.uri_mut() = stream_path("failover-write").parse().unwrap();
        req.headers_mut()
            .insert("content-type", "text/plain".parse().unwrap());
        req
    };
    // The body went with the failed try: no answer, nothing applied.
    let first = upstream.forward(create(), Kind::Forward).await;
    assert!(
        matches!(first, Err(edge::upstream::UpstreamError::Connect(_))),
        "{first:?}"
    );
    let second = upstream.forward(create(), Kind::Forward).await.unwrap();
    assert_eq!(second.status(), 201);
}
