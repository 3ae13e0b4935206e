//! Readiness (`/readyz`): an edge is ready once its origin's invalidation
//! feed has caught up, stays ready when the feed is lost later (it forwards
//! meanwhile; every edge loses the feed at once when the origin restarts),
//! and is not ready while draining. `/healthz` says it lives all along.

use edge::config::EdgeConfig;

use super::common::{spawn_edge, Stack};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_before_the_feed_caught_up() {
    // Nobody answers at the origin's address: the feed never catches up.
    let config = EdgeConfig::new("http://127.0.0.1:9".parse().unwrap(), 16 << 20).unwrap();
    let (addr, _state, stop, task) = spawn_edge(config).await;
    let http = reqwest::Client::new();
    let health = http
        .get(format!("http://{addr}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    let ready = http
        .get(format!("http://{addr}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(ready.status(), 503);
    assert_eq!(ready.headers()["retry-after"], "1");
    assert_eq!(ready.headers()["cache-control"], "no-store");
    let body: serde_json::Value = ready.json().await.unwrap();
    assert_eq!(body["error"]["code"], "NOT_READY");
    let _ = stop.send(());
    task.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_through_a_lost_feed_and_not_while_draining() {
    let mut s = Stack::start().await;
    assert_eq!(s.get("/readyz").await.status(), 200);
    let losses = s.metric("ds_edge_feed_losses_total").await;
    s.origin.restart().await;
    s.wait_metric("ds_edge_feed_losses_total", |v| v > losses)
        .await;
    assert_eq!(
        s.get("/readyz").await.status(),
        200,
        "a feed lost after the start keeps the edge in rotation"
    );
    // Draining (what SIGTERM starts, `--drain-delay` before the close):
    // out of rotation, and still serving.
    s.edge.draining.start();
    let r = s.get("/readyz").await;
    assert_eq!(r.status(), 503);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["message"], "draining: shutting down");
    assert_eq!(s.get("/healthz").await.status(), 200);
}
