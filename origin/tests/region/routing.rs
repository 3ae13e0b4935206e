//! An edge whose first origin is a follower: the follower's forwarded
//! answers name the owner (`ds-region-owner`), and the edge sends to the
//! owner from then on, one hop fewer; the header never reaches clients.

use std::time::Duration;

use super::origins::{start, wait_owner, wait_serving};
use crate::common::seaweed::Seaweed;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_moves_to_the_owner_a_follower_names() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let a = start(&weed, &dir.path().join("a"), "routing", "a");
    let owner = format!("http://{}", a.addr);
    wait_owner(&client, &owner).await;
    let b = start(&weed, &dir.path().join("b"), "routing", "b");
    let follower = format!("http://{}", b.addr);
    wait_serving(&client, &follower).await;
    while super::origins::serving(&client, &follower).await != Some(false) {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let edge = super::origins::InProcessEdge::start(&[follower.clone(), owner.clone()]).await;
    let edge_base = edge.base.clone();
    let stream = format!("{edge_base}/v1/stream/routed");
    let created = client
        .put(&stream)
        .header("content-type", "application/octet-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    assert!(
        !created.headers().contains_key("ds-region-owner"),
        "the owner's URL is the edge's business only"
    );
    let forwarded_after_create = forwarded(&client, &follower).await;
    assert!(
        forwarded_after_create >= 1,
        "the create went through the follower"
    );
    for seq in 0..50 {
        let r = client
            .post(&stream)
            .header("content-type", "application/octet-stream")
            .header("producer-id", "w")
            .header("producer-epoch", "0")
            .header("producer-seq", seq.to_string())
            .body(format!("[{seq}]"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    let text = client
        .get(format!("{stream}?offset=-1"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(text, (0..50).map(|s| format!("[{s}]")).collect::<String>());
    // The 50 appends and the read went straight to the owner.
    let forwarded_after = forwarded(&client, &follower).await;
    assert!(
        forwarded_after - forwarded_after_create <= 1,
        "the edge kept going through the follower: {forwarded_after_create} then {forwarded_after}"
    );
    drop(edge);
}

async fn forwarded(client: &reqwest::Client, base: &str) -> i64 {
    let text = crate::common::metrics_at(client, base).await;
    crate::common::metric_in(&text, "ds_origin_region_forwarded_total").unwrap()
}
