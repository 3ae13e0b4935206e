//! The requests a follower forwards to the owner at once are bounded
//! (`--region-forwards`): each holds a connection to the owner until its
//! answer ends, so past the bound a new one answers 503 + `Retry-After`
//! at once, and room comes back as answers end.

use std::time::Duration;

use super::origins::{append, create, read_all, start, start_with, wait_owner, wait_serving};
use crate::common::seaweed::Seaweed;
use crate::common::{metric_in, metrics_at};

async fn metric(client: &reqwest::Client, base: &str, name: &str) -> i64 {
    metric_in(&metrics_at(client, base).await, name).unwrap_or(-1)
}

async fn wait_metric(client: &reqwest::Client, base: &str, name: &str, want: i64) {
    for _ in 0..400 {
        if metric(client, base, name).await == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{name} at {base} never became {want}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_forwards_a_follower_refuses_until_an_answer_ends() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let a = start(&weed, &dir.path().join("a"), "forwards", "a");
    let owner = format!("http://{}", a.addr);
    wait_owner(&client, &owner).await;
    let b = start_with(
        &weed,
        &dir.path().join("b"),
        "forwards",
        "b",
        &["--region-forwards", "2"],
    );
    let follower = format!("http://{}", b.addr);
    wait_serving(&client, &follower).await;
    while super::origins::serving(&client, &follower).await != Some(false) {
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let stream = "/v1/stream/forwards";
    assert_eq!(create(&client, &format!("{owner}{stream}")).await, 201);

    // Two long-polls through the follower fill its room.
    let wait = format!("{follower}{stream}?offset=now&live=long-poll&timeout_ms=30000");
    let parked: Vec<_> = (0..2)
        .map(|_| tokio::spawn(client.get(&wait).send()))
        .collect();
    wait_metric(&client, &follower, "ds_origin_region_forwards_in_flight", 2).await;

    // A third request that needs the owner is refused at once.
    let refused = client
        .post(format!("{follower}{stream}"))
        .header("content-type", "application/octet-stream")
        .body("refused")
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    let body: serde_json::Value = refused.json().await.unwrap();
    assert_eq!(body["error"]["code"], "UNAVAILABLE", "{body}");
    assert_eq!(
        metric(
            &client,
            &follower,
            "ds_origin_region_forwards_refused_total"
        )
        .await,
        1
    );

    // An append through the owner answers both long-polls; their room
    // comes back, and the follower forwards again.
    let status = append(&client, &format!("{owner}{stream}"), 0, "woken".into()).await;
    assert!(status.is_success(), "{status}");
    for p in parked {
        let answered = p.await.unwrap().unwrap();
        assert_eq!(answered.status(), 200);
        assert_eq!(answered.text().await.unwrap(), "woken");
    }
    wait_metric(&client, &follower, "ds_origin_region_forwards_in_flight", 0).await;
    let status = append(&client, &format!("{follower}{stream}"), 1, " again".into()).await;
    assert!(status.is_success(), "{status}");
    let text = read_all(&client, &format!("{owner}{stream}")).await;
    assert_eq!(text, "woken again", "the refused append changed nothing");
}
