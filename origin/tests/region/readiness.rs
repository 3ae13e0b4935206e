//! Readiness in a region: an origin answers `/readyz` 503 until it knows
//! every partition's owner (its claims and membership reads need the
//! bucket), and 200 from then on; `/healthz` says it lives all along.

use std::time::Duration;

use super::origins::start_with;
use crate::common::seaweed::Seaweed;

async fn status(client: &reqwest::Client, url: &str) -> u16 {
    client
        .get(url)
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .map(|r| r.status().as_u16())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_origin_is_ready_only_once_it_knows_every_partition() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    // The bucket hangs: the origin cannot claim nor read who owns what.
    weed.signal("STOP");
    let a = start_with(&weed, &dir.path().join("a"), "ready", "a", &[]);
    let base = format!("http://{}", a.addr);
    let mut live = false;
    for _ in 0..200 {
        if status(&client, &format!("{base}/healthz")).await == 200 {
            live = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(live, "the origin answers /healthz while it joins");
    let resp = client.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 503);
    assert_eq!(resp.headers()["retry-after"], "1");
    let body: serde_json::Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "NOT_READY");
    // Still not ready a while later: nothing was learned without the bucket.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(status(&client, &format!("{base}/readyz")).await, 503);

    weed.signal("CONT");
    let mut ready = false;
    for _ in 0..600 {
        if status(&client, &format!("{base}/readyz")).await == 200 {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        ready,
        "ready once the bucket answers and the partition is claimed"
    );
}
