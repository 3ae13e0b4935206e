//! Read your writes through any origin (decision 0025): a client that
//! appends through the owner and reads at once through a follower, passing
//! the `Stream-Next-Offset` its append was answered with as
//! `min_next_offset`, always reads its write, whether the follower's
//! replica reached it within the wait or the read went on to the owner. A
//! malformed floor is refused, and one past the end answers at once.

use std::time::{Duration, Instant};

use super::origins::create;
use super::takeover::two_origins_with;
use crate::common::seaweed::Seaweed;

/// Leases long enough that the owner keeps its partition for the test;
/// short replica rounds so most floors are reached by the replica.
const FLAGS: [&str; 6] = [
    "--lease",
    "60s",
    "--lease-renew",
    "250ms",
    "--region-replica-interval",
    "50ms",
];

async fn metric(client: &reqwest::Client, base: &str, name: &str) -> i64 {
    let text = crate::common::metrics_at(client, base).await;
    crate::common::metric_in(&text, name).unwrap_or(0)
}

/// Appends `body` at `url`: the `Stream-Next-Offset` it was answered with.
async fn append(client: &reqwest::Client, url: &str, body: String) -> String {
    let resp = client
        .post(url)
        .header("content-type", "application/octet-stream")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    resp.headers()["stream-next-offset"]
        .to_str()
        .unwrap()
        .to_owned()
}

async fn get(client: &reqwest::Client, url: &str) -> reqwest::Response {
    client
        .get(url)
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_floor_reads_a_write_made_through_another_origin_at_once() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let (_procs, bases, owner) =
        two_origins_with(&weed, &client, dir.path(), "ryw-floor", &FLAGS).await;
    let follower = &bases[1 - owner];
    let on_owner = format!("{}/v1/stream/floor", bases[owner]);
    let on_follower = format!("{follower}/v1/stream/floor");
    assert_eq!(create(&client, &on_owner).await, 201);
    let local = metric(&client, follower, "ds_origin_region_local_reads_total").await;
    let mut written = String::new();
    for i in 0..200 {
        let body = format!("<{i:03}>");
        let floor = append(&client, &on_owner, body.clone()).await;
        written.push_str(&body);
        let resp = get(
            &client,
            &format!("{on_follower}?offset=-1&min_next_offset={floor}"),
        )
        .await;
        assert_eq!(resp.status(), 200, "after write {i}");
        assert_eq!(
            resp.headers()["stream-next-offset"].to_str().unwrap(),
            floor,
            "after write {i}"
        );
        assert_eq!(
            resp.headers()["stream-up-to-date"].to_str().unwrap(),
            "true"
        );
        assert_eq!(resp.text().await.unwrap(), written, "after write {i}");
    }
    // The replica answered some of them itself once it reached the floor
    // (the rest went on to the owner).
    let local = metric(&client, follower, "ds_origin_region_local_reads_total").await - local;
    let forwarded = metric(&client, follower, "ds_origin_region_floor_forwards_total").await;
    eprintln!("floored reads: {local} from the replica, {forwarded} forwarded past the wait");
    assert!(
        local > 0,
        "the replica never reached a floor within its wait"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_floor_is_refused_and_one_past_the_end_answers_at_once() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let (_procs, bases, owner) =
        two_origins_with(&weed, &client, dir.path(), "ryw-refusals", &FLAGS).await;
    let urls: Vec<String> = [owner, 1 - owner]
        .iter()
        .map(|&i| format!("{}/v1/stream/refused", bases[i]))
        .collect();
    assert_eq!(create(&client, &urls[0]).await, 201);
    let end = append(&client, &urls[0], "abc".into()).await;
    for url in &urls {
        for bad in ["-1", "now", "3", "zz00000000000003"] {
            let resp = get(&client, &format!("{url}?offset=-1&min_next_offset={bad}")).await;
            assert_eq!(resp.status(), 400, "{url} {bad}");
            let body: serde_json::Value = resp.json().await.unwrap();
            assert_eq!(body["error"]["code"], "INVALID_OFFSET", "{body}");
        }
    }
    // Past the end: the write it names is not in the stream. The owner
    // says so at once, the follower after its wait for the replica.
    let past = format!("{:016x}", 3 + 1000);
    for (url, within) in urls.iter().zip([1, 5]) {
        let began = Instant::now();
        let resp = get(&client, &format!("{url}?offset=-1&min_next_offset={past}")).await;
        assert!(
            began.elapsed() < Duration::from_secs(within),
            "{url} took {:?}",
            began.elapsed()
        );
        assert_eq!(resp.status(), 416, "{url}");
        assert_eq!(resp.headers()["stream-next-offset"].to_str().unwrap(), end);
        assert_eq!(
            resp.headers()["cache-control"].to_str().unwrap(),
            "no-store"
        );
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "RANGE_NOT_SATISFIABLE", "{body}");
        // A long-poll too.
        let resp = get(
            &client,
            &format!("{url}?offset={end}&live=long-poll&min_next_offset={past}"),
        )
        .await;
        assert_eq!(resp.status(), 416, "{url} long-poll");
    }
    // A floor the stream reached is no different from none.
    let resp = get(
        &client,
        &format!("{}?offset=-1&min_next_offset={end}", urls[0]),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "abc");
}

/// Past `--region-replica-floor-waiting` reads waiting at once, a floored
/// read is not held: it goes to the owner at once (here the bound is 0, so
/// every one does, though the replica lags and the wait is long).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_the_waiting_bound_a_floored_read_goes_to_the_owner_at_once() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let flags = [
        "--lease",
        "60s",
        "--lease-renew",
        "250ms",
        "--region-replica-interval",
        "10s",
        "--region-replica-floor-wait",
        "5s",
        "--region-replica-floor-waiting",
        "0",
    ];
    let (_procs, bases, owner) =
        two_origins_with(&weed, &client, dir.path(), "ryw-waiting", &flags).await;
    let follower = &bases[1 - owner];
    let on_owner = format!("{}/v1/stream/waiting", bases[owner]);
    assert_eq!(create(&client, &on_owner).await, 201);
    let floor = append(&client, &on_owner, "written".into()).await;
    let began = Instant::now();
    let resp = get(
        &client,
        &format!("{follower}/v1/stream/waiting?offset=-1&min_next_offset={floor}"),
    )
    .await;
    assert!(
        began.elapsed() < Duration::from_secs(3),
        "held {:?} though no read may wait",
        began.elapsed()
    );
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "written");
    assert_eq!(
        metric(&client, follower, "ds_origin_region_floor_forwards_total").await,
        1
    );
}
