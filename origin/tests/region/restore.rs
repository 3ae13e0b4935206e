//! A rollback in a region: asked of a follower (forwarded to the owner),
//! answered alike by every origin and by an edge in front of them,
//! followed by the follower's replica, and kept by the origin that takes
//! over when the owner is killed and its disk deleted.

use std::time::{Duration, Instant};

use shared::offset::Offset;

use super::origins::{create, InProcessEdge};
use super::replicas::until_local;
use super::takeover::two_origins;
use crate::common::seaweed::Seaweed;

fn header(r: &reqwest::Response, name: &str) -> Option<String> {
    r.headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
}

/// Reads `url` from the start until it answers 200 with `want` (a takeover
/// may be under way); its answer's headers.
async fn until_read(client: &reqwest::Client, url: &str, want: &str) -> reqwest::header::HeaderMap {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = client
            .get(format!("{url}?offset=-1"))
            .timeout(Duration::from_secs(5))
            .send()
            .await;
        if let Ok(r) = r {
            let headers = r.headers().clone();
            if r.status() == 200 && r.text().await.unwrap() == want {
                return headers;
            }
        }
        assert!(Instant::now() < deadline, "{url} never read {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_is_the_regions_and_survives_a_takeover() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    // Checkpoints every few objects: the one the survivor starts from
    // holds the replaced incarnation, detached, beside the new one.
    let often = [
        "--region-checkpoint-objects",
        "2",
        "--region-checkpoint-interval",
        "100ms",
    ];
    let (mut procs, bases, owner) =
        two_origins(&weed, &client, dir.path(), "restore", &often).await;
    let follower = 1 - owner;
    let url = |i: usize| format!("{}/v1/stream/rolled", bases[i]);
    assert_eq!(create(&client, &url(owner)).await, 201);
    let mut all = String::new();
    for i in 0..10 {
        let body = format!("[{i:03}]");
        let r = client
            .post(url(owner))
            .header("content-type", "application/octet-stream")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
        all.push_str(&body);
    }
    let head = client.head(url(follower)).send().await.unwrap();
    let old = header(&head, "stream-incarnation").unwrap();

    let r = client
        .post(format!("{}/incarnation/{old}/restore", url(follower)))
        .header("stream-restore-offset", Offset(25).to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let new = header(&r, "stream-incarnation").unwrap();
    assert_eq!(header(&r, "stream-previous-incarnation"), Some(old.clone()));
    let kept = &all[..25];

    for i in [owner, follower] {
        let h = until_read(&client, &url(i), kept).await;
        assert_eq!(h["stream-incarnation"], new.as_str());
        assert_eq!(h["stream-previous-incarnation"], old.as_str());
    }
    until_local(&client, &bases[follower], &url(follower), kept).await;
    let edge = InProcessEdge::start(&[bases[follower].clone(), bases[owner].clone()]).await;
    let through_edge = format!("{}/v1/stream/rolled", edge.base);
    let h = until_read(&client, &through_edge, kept).await;
    assert_eq!(h["stream-previous-incarnation"], old.as_str());

    let r = client
        .post(url(follower))
        .header("content-type", "application/octet-stream")
        .body("[new]")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let want = format!("{kept}[new]");
    // A checkpoint taken after the rollback.
    let checkpoints =
        |text: &str| crate::common::metric_in(text, "ds_origin_region_checkpoints_total");
    let before = checkpoints(&crate::common::metrics_at(&client, &bases[owner]).await);
    for i in 0..4 {
        let r = client
            .put(format!("{}/v1/stream/filler-{i}", bases[owner]))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
    }
    crate::common::wait_until("a checkpoint after the rollback", || async {
        checkpoints(&crate::common::metrics_at(&client, &bases[owner]).await) > before
    })
    .await;

    // The owner's machine goes, its disk with it.
    drop(procs.remove(owner));
    std::fs::remove_dir_all(dir.path().join(["a", "b"][owner])).unwrap();
    let h = until_read(&client, &url(follower), &want).await;
    assert_eq!(h["stream-incarnation"], new.as_str());
    assert_eq!(h["stream-previous-incarnation"], old.as_str());
    assert_eq!(
        h["stream-inherited-offset"],
        Offset(25).to_string().as_str()
    );
    until_read(&client, &through_edge, &want).await;
}
