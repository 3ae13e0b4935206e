//! A region of several partitions (`--region-partitions 6`) on SeaweedFS:
//! the partitions spread over the live origins (none holds more than
//! `⌈P/N⌉ + 1`); when one dies with its disk its partitions move to the
//! others; an origin that joins takes its share by cooperative hand-off;
//! writers going to every partition all along lose, duplicate and reorder
//! nothing. Forks within a partition work (across partitions:
//! `forks_across`); an origin started with another count refuses to start.

use std::time::{Duration, Instant};

use super::origins::{start_with, wait_serving, InProcessEdge};
use crate::common::process::Proc;
use crate::common::seaweed::Seaweed;

const PARTITIONS: u32 = 6;
const STREAMS: usize = 12;

pub fn args() -> Vec<&'static str> {
    vec![
        "--region-partitions",
        "6",
        "--lease",
        "2s",
        "--lease-renew",
        "500ms",
    ]
}

pub fn base(p: &Proc) -> String {
    format!("http://{}", p.addr)
}

use crate::common::region_roles::roles;

/// Waits until every partition is served by exactly one of `bases` and
/// followed by the rest, each serving at most `most`; returns each one's
/// count of served partitions.
pub async fn settled(client: &reqwest::Client, bases: &[String], most: i64) -> Vec<i64> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let mut served = Vec::new();
        let mut whole = true;
        for b in bases {
            match roles(client, b).await {
                Some((s, f)) if s + f == i64::from(PARTITIONS) => served.push(s),
                _ => whole = false,
            }
        }
        if whole
            && served.iter().sum::<i64>() == i64::from(PARTITIONS)
            && served.iter().all(|s| *s <= most)
        {
            return served;
        }
        assert!(
            Instant::now() < deadline,
            "the partitions did not settle: {served:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn stream(i: usize) -> String {
    format!("/v1/stream/p{i}")
}

/// Appends `[i:seq]` to stream `i` as its producer's `seq`, through the
/// origins in turn until one acknowledges (503s while partitions move).
async fn append(client: &reqwest::Client, bases: &[String], i: usize, seq: u64) -> String {
    let body = format!("[{i}:{seq:04}]");
    let started = Instant::now();
    for attempt in 0usize.. {
        let b = &bases[(i + attempt) % bases.len()];
        let sent = client
            .post(format!("{b}{}", stream(i)))
            .header("content-type", "application/octet-stream")
            .header("producer-id", "w")
            .header("producer-epoch", "0")
            .header("producer-seq", seq.to_string())
            .body(body.clone())
            .timeout(Duration::from_secs(15))
            .send()
            .await;
        match sent {
            Ok(r) if r.status() == 200 || r.status() == 204 => return body,
            Ok(r) if r.status() == 503 => {}
            Ok(r) => {
                let status = r.status();
                let text = r.text().await.unwrap_or_default();
                panic!("append {seq} to {i} through {b}: {status} {text}");
            }
            Err(_) => {}
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "append {seq} to {i} never landed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    unreachable!()
}

/// Creates stream `i` through the origins in turn until one answers
/// `201`: a snapshot of settled roles does not stop the spread from
/// moving a partition right after it (a hand-off answers 503 +
/// `Retry-After` for a moment, which a client retries).
async fn create(client: &reqwest::Client, bases: &[String], i: usize) {
    let started = Instant::now();
    for attempt in 0usize.. {
        let b = &bases[(i + attempt) % bases.len()];
        let r = client
            .put(format!("{b}{}", stream(i)))
            .header("content-type", "application/octet-stream")
            .send()
            .await
            .unwrap();
        let status = r.status();
        // 200 on a retry: an earlier try created it and its answer was lost.
        if status == 201 || (attempt > 0 && status == 200) {
            return;
        }
        let body = r.text().await.unwrap_or_default();
        assert_eq!(status, 503, "create {i} through {b}: {body}");
        assert!(
            body.contains("\"code\""),
            "create {i}: 503 without a code: {body}"
        );
        eprintln!("create {i} through {b}: 503 {body}");
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "create {i} kept answering 503"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn read(client: &reqwest::Client, url: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let resp = client
            .get(format!("{url}?offset=-1&consistency=leader"))
            .send()
            .await
            .unwrap();
        if resp.status() == 200 {
            return resp.text().await.unwrap();
        }
        assert_eq!(resp.status(), 503, "reading {url}");
        assert!(Instant::now() < deadline, "{url} kept answering 503");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Appends a round to every stream, `rounds` times, keeping what was
/// acknowledged.
async fn write_rounds(
    client: &reqwest::Client,
    bases: &[String],
    acknowledged: &mut [String],
    next: &mut u64,
    rounds: u64,
) {
    for _ in 0..rounds {
        for (i, acked) in acknowledged.iter_mut().enumerate() {
            acked.push_str(&append(client, bases, i, *next).await);
        }
        *next += 1;
    }
}

async fn read_everywhere(client: &reqwest::Client, bases: &[String], acknowledged: &[String]) {
    for b in bases {
        for (i, acked) in acknowledged.iter().enumerate() {
            assert_eq!(
                &read(client, &format!("{b}{}", stream(i))).await,
                acked,
                "{i} through {b}"
            );
        }
    }
}

/// With a WAL per partition (the layout of buckets made before decision
/// 0028).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partitions_spread_move_off_a_dead_origin_and_onto_a_new_one_losing_nothing() {
    spread_and_move(&["--region-wal", "partition"]).await;
}

/// The same with one WAL per origin (decision 0028): the dead origin's
/// partitions taken over by fencing its log, the new one's share handed
/// over by releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_wal_per_origin_partitions_spread_and_move_losing_nothing() {
    // Checkpoint looks every half second: the rounds deleting the dead
    // origin's log come every three.
    spread_and_move(&[
        "--region-wal",
        "origin",
        "--region-checkpoint-interval",
        "500ms",
    ])
    .await;
}

async fn spread_and_move(wal: &[&'static str]) {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let mut more = args();
    more.extend_from_slice(wal);
    let mut procs: Vec<Proc> = ["a", "b", "c"]
        .iter()
        .map(|n| start_with(&weed, &dir.path().join(n), "parts", n, &more))
        .collect();
    let mut bases: Vec<String> = procs.iter().map(base).collect();
    for b in &bases {
        wait_serving(&client, b).await;
    }
    // ⌈6/3⌉ = 2 each once settled (the bound asked is ⌈P/N⌉ + 1).
    let served = settled(&client, &bases, 3).await;
    eprintln!("three origins serve {served:?}");
    let streams: std::collections::BTreeSet<u32> = (0..STREAMS)
        .map(|i| shared::partition::of_stream(&stream(i), PARTITIONS))
        .collect();
    assert!(streams.len() >= 4, "the streams fall in {streams:?}");
    for i in 0..STREAMS {
        create(&client, &bases, i).await;
    }
    let mut acknowledged = vec![String::new(); STREAMS];
    let mut next = 0;
    write_rounds(&client, &bases, &mut acknowledged, &mut next, 3).await;
    read_everywhere(&client, &bases, &acknowledged).await;

    // An edge in front of all three reads what they do.
    let edge = InProcessEdge::start(&bases).await;
    for (i, acked) in acknowledged.iter().enumerate() {
        assert_eq!(
            &read(&client, &format!("{}{}", edge.base, stream(i))).await,
            acked
        );
    }

    // It tails every partition's invalidation feed, and counts the feed
    // live only with all of them.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = crate::common::metrics_at(&client, &edge.base).await;
        let m = |n| crate::common::metric_in(&text, n);
        if m("ds_edge_feed_partitions") == Some(i64::from(PARTITIONS))
            && m("ds_edge_feed_live") == Some(1)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the edge does not follow every partition's feed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The busiest origin's machine goes, its disk with it.
    let mut busiest = 0;
    for (i, b) in bases.iter().enumerate() {
        if roles(&client, b).await.unwrap().0 > roles(&client, &bases[busiest]).await.unwrap().0 {
            busiest = i;
        }
    }
    let dead = procs.remove(busiest);
    bases.remove(busiest);
    drop(dead);
    let killed = Instant::now();
    write_rounds(&client, &bases, &mut acknowledged, &mut next, 2).await;
    let served = settled(&client, &bases, 4).await;
    eprintln!(
        "after the kill, two serve {served:?} ({:?} after it)",
        killed.elapsed()
    );
    read_everywhere(&client, &bases, &acknowledged).await;
    if wal.contains(&"origin") {
        dead_log_deleted(&client, &bases).await;
    }

    // A new origin joins: the two hand it its share while writes go on.
    let d = start_with(&weed, &dir.path().join("d"), "parts", "d", &more);
    bases.push(base(&d));
    procs.push(d);
    let joined = Instant::now();
    let mut moved = false;
    while joined.elapsed() < Duration::from_secs(60) && !moved {
        write_rounds(&client, &bases, &mut acknowledged, &mut next, 1).await;
        moved = roles(&client, &bases[2]).await.is_some_and(|(s, _)| s >= 1);
    }
    assert!(moved, "the new origin got no partition");
    let served = settled(&client, &bases, 3).await;
    eprintln!(
        "with the new one, three serve {served:?} ({:?} after it joined)",
        joined.elapsed()
    );
    write_rounds(&client, &bases, &mut acknowledged, &mut next, 1).await;
    read_everywhere(&client, &bases, &acknowledged).await;
    let mut releases = 0;
    for b in &bases {
        let text = crate::common::metrics_at(&client, b).await;
        releases += crate::common::metric_in(&text, "ds_origin_region_releases_total").unwrap();
    }
    assert!(releases >= 1, "no partition was handed off");
    for (i, acked) in acknowledged.iter().enumerate() {
        assert_eq!(
            &read(&client, &format!("{}{}", edge.base, stream(i))).await,
            acked,
            "{i} through the edge"
        );
    }
}

/// Until partition 0's owner deleted the dead origin's log below what
/// every partition needs (once the new owners checkpointed).
async fn dead_log_deleted(client: &reqwest::Client, bases: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut deleted = 0;
        for b in bases {
            let text = crate::common::metrics_at(client, b).await;
            deleted +=
                crate::common::metric_in(&text, "ds_origin_region_dead_log_deleted_objects_total")
                    .unwrap();
        }
        if deleted > 0 {
            eprintln!("{deleted} objects of the dead origin's log deleted");
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the dead origin's log was not deleted"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Until `p` exits, which it must with a failure.
async fn refuses_to_start(p: &mut Proc, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = p.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "{what} kept running");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(!status.success(), "{what} exited cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_within_a_partition_work_and_the_count_is_pinned() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let more = args();
    let a = start_with(&weed, &dir.path().join("a"), "forks", "a", &more);
    let b = start_with(&weed, &dir.path().join("b"), "forks", "b", &more);
    let bases = vec![base(&a), base(&b)];
    for u in &bases {
        wait_serving(&client, u).await;
    }
    settled(&client, &bases, 4).await;
    let source = "/v1/stream/source";
    let home = shared::partition::of_stream(source, PARTITIONS);
    let (same, _): (Vec<String>, Vec<String>) = (0..200)
        .map(|i| format!("/v1/stream/fork{i}"))
        .partition(|f| shared::partition::of_stream(f, PARTITIONS) == home);
    let r = client
        .put(format!("{}{source}", bases[0]))
        .header("content-type", "text/plain")
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let fork = |path: String, through: String| {
        let client = client.clone();
        async move {
            client
                .put(format!("{through}{path}"))
                .header("content-type", "text/plain")
                .header("stream-forked-from", source)
                .send()
                .await
                .unwrap()
        }
    };
    // Within the source's partition, through either origin.
    let r = fork(same[0].clone(), bases[1].clone()).await;
    assert_eq!(r.status(), 201);
    assert_eq!(
        read(&client, &format!("{}{}", bases[0], same[0])).await,
        "hello"
    );
    // Another count on this bucket: the origin refuses to start.
    let mut wrong = start_with(
        &weed,
        &dir.path().join("c"),
        "forks",
        "c",
        &["--region-partitions", "3"],
    );
    refuses_to_start(&mut wrong, "an origin with another count").await;
    // The other WAL layout on this bucket (its owners would not see each
    // other's claims): refused too.
    let other = match super::origins::layout() {
        "origin" => "partition",
        _ => "origin",
    };
    let mut layout = start_with(
        &weed,
        &dir.path().join("e"),
        "forks",
        "e",
        &["--region-wal", other],
    );
    refuses_to_start(&mut layout, "an origin with the other WAL layout").await;

    // A bucket a newer version wrote (a higher format): refused as well.
    use object_store::ObjectStoreExt as _;
    let store = weed.store("gate");
    let pin = object_store::path::Path::from("region/partitions.json");
    store
        .put(&pin, br#"{"partitions":1,"format":3}"#.to_vec().into())
        .await
        .unwrap();
    let mut newer = start_with(&weed, &dir.path().join("d"), "gate", "d", &[]);
    refuses_to_start(&mut newer, "an origin on a newer format").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_origins_under_one_name_are_reported() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let more = args();
    let one = start_with(&weed, &dir.path().join("1"), "twins", "twin", &more);
    let two = start_with(&weed, &dir.path().join("2"), "twins", "twin", &more);
    let bases = [base(&one), base(&two)];
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut seen = 0;
        for b in &bases {
            let text = crate::common::metrics_at(&client, b).await;
            seen += crate::common::metric_in(&text, "ds_origin_region_node_id_conflicts_total")
                .unwrap_or(0);
        }
        if seen > 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "neither origin noticed the other under its name"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `make()` until it answers `want` (the key store reaches the other
/// partitions' owners within a look or two).
async fn until_status(want: u16, what: &str, make: impl Fn() -> reqwest::RequestBuilder) {
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let status = make().send().await.unwrap().status().as_u16();
        if status == want {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {status}, not {want}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Two origins of a region of two partitions with access control (no
/// open account, the admin token `admin-secret`) under `prefix`, once
/// each serves one partition.
pub async fn keyed_pair(
    weed: &Seaweed,
    dir: &std::path::Path,
    prefix: &str,
    client: &reqwest::Client,
) -> (Proc, Proc, Vec<String>) {
    let flags = [
        "--region-partitions",
        "2",
        "--lease",
        "2s",
        "--lease-renew",
        "500ms",
        "--open-accounts",
        "",
        "--admin-token",
        "admin-secret",
    ];
    let a = start_with(weed, &dir.join("a"), prefix, "a", &flags);
    let b = start_with(weed, &dir.join("b"), prefix, "b", &flags);
    let bases = vec![base(&a), base(&b)];
    for u in &bases {
        wait_serving(client, u).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while roles(client, &bases[0]).await != Some((1, 1))
        || roles(client, &bases[1]).await != Some((1, 1))
    {
        assert!(
            Instant::now() < deadline,
            "the two partitions did not spread"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    (a, b, bases)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_made_and_revoked_on_partition_zero_hold_in_every_partition() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let (_a, _b, bases) = keyed_pair(&weed, dir.path(), "keys2", &client).await;
    let made = super::origins::make_key(&client, &bases[0], r#"{"account":"default"}"#).await;
    let key = made["key"].as_str().expect("a key").to_owned();
    let id = made["id"].as_str().expect("an id").to_owned();
    let stream = (0..100)
        .map(|i| format!("/v1/stream/guarded{i}"))
        .find(|s| shared::partition::of_stream(s, 2) == 1)
        .unwrap();
    // The key works in partition 1, whose owner did not make it.
    until_status(201, "create with the new key", || {
        client
            .put(format!("{}{stream}", bases[0]))
            .bearer_auth(&key)
            .header("content-type", "application/octet-stream")
    })
    .await;
    let r = client
        .post(format!("{}{stream}", bases[1]))
        .header("content-type", "application/octet-stream")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "credentials are required");
    // Revoked on partition 0's owner: it stops working in partition 1 too.
    let revoked = client
        .delete(format!("{}/_admin/keys/{id}", bases[1]))
        .bearer_auth("admin-secret")
        .send()
        .await
        .unwrap();
    assert!(
        revoked.status().is_success(),
        "revoke: {}",
        revoked.status()
    );
    until_status(401, "append with the revoked key", || {
        client
            .post(format!("{}{stream}", bases[1]))
            .bearer_auth(&key)
            .header("content-type", "application/octet-stream")
            .body("y")
    })
    .await;
}

/// `--region-wal auto` (the default) takes the bucket's layout: one WAL
/// per origin for a new region, a WAL per partition for a region made
/// with one, so an origin started without the flag joins either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_layout_is_the_buckets() {
    use object_store::ObjectStoreExt as _;
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let pin = object_store::path::Path::from("region/partitions.json");
    let format = |prefix: &'static str| {
        let store = weed.store(prefix);
        let pin = pin.clone();
        async move {
            let bytes = store.get(&pin).await.unwrap().bytes().await.unwrap();
            serde_json::from_slice::<serde_json::Value>(&bytes).unwrap()["format"].clone()
        }
    };
    let mut more = args();
    more.extend(["--region-wal", "auto"]);
    // A new region: one WAL per origin.
    let new = start_with(&weed, &dir.path().join("new"), "auto-new", "a", &more);
    wait_serving(&client, &base(&new)).await;
    settled_alone(&client, &base(&new)).await;
    assert_eq!(format("auto-new").await, 2);
    // A region made with a WAL per partition: an origin started with the
    // default joins it and serves.
    let mut old_args = args();
    old_args.extend(["--region-wal", "partition"]);
    let first = start_with(&weed, &dir.path().join("old"), "auto-old", "b", &old_args);
    wait_serving(&client, &base(&first)).await;
    settled_alone(&client, &base(&first)).await;
    drop(first);
    let next = start_with(&weed, &dir.path().join("next"), "auto-old", "c", &more);
    wait_serving(&client, &base(&next)).await;
    settled_alone(&client, &base(&next)).await;
    assert_eq!(format("auto-old").await, 1);
}

/// Until the one origin at `base` serves every partition.
async fn settled_alone(client: &reqwest::Client, base: &str) {
    settled(client, &[base.to_owned()], i64::from(PARTITIONS)).await;
}
