//! Replicas of followed partitions (decision 0018): a follower answers
//! `consistency=local` catch-up reads from its own copy of the owner's WAL
//! objects, so they go on while the owner is paused; a client writing and
//! reading through one follower reads its writes; a stream deleted and
//! made again shows only its new bytes there; leader reads and tails are
//! still the owner's.

use std::time::{Duration, Instant};

use super::origins::create;
use super::takeover::two_origins_with;
use crate::common::seaweed::Seaweed;

/// Leases long enough that a paused owner keeps its partition for the test.
const LONG_LEASE: [&str; 4] = ["--lease", "60s", "--lease-renew", "250ms"];

async fn metric(client: &reqwest::Client, base: &str, name: &str) -> i64 {
    let text = crate::common::metrics_at(client, base).await;
    crate::common::metric_in(&text, name).unwrap_or(0)
}

async fn post(client: &reqwest::Client, url: &str, body: String) -> u16 {
    client
        .post(url)
        .header("content-type", "application/octet-stream")
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// A catch-up read of `url` from the start: status and body.
async fn read(client: &reqwest::Client, url: &str, query: &str) -> (u16, String) {
    let resp = client
        .get(format!("{url}?offset=-1{query}"))
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .unwrap();
    (resp.status().as_u16(), resp.text().await.unwrap())
}

/// Until a read of `url` through the follower `base` is answered from its
/// replica with `want` (it lags its owner by about a round).
pub(super) async fn until_local(client: &reqwest::Client, base: &str, url: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let before = metric(client, base, "ds_origin_region_local_reads_total").await;
        let (status, body) = read(client, url, "").await;
        let after = metric(client, base, "ds_origin_region_local_reads_total").await;
        if status == 200 && body == want && after > before {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the replica at {base} never answered {url} with {want:?} (last {status} {body:?})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_answers_catch_up_reads_from_its_replica_while_the_owner_is_paused() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let (procs, bases, owner) =
        two_origins_with(&weed, &client, dir.path(), "replica-paused", &LONG_LEASE).await;
    let follower = 1 - owner;
    let on_owner = format!("{}/v1/stream/kept", bases[owner]);
    let on_follower = format!("{}/v1/stream/kept", bases[follower]);
    assert_eq!(create(&client, &on_owner).await, 201);
    let mut acknowledged = String::new();
    for i in 0..20 {
        let body = format!("[{i:02}]");
        assert_eq!(post(&client, &on_owner, body.clone()).await, 204);
        acknowledged.push_str(&body);
    }
    until_local(&client, &bases[follower], &on_follower, &acknowledged).await;

    // A leader read and a HEAD are the owner's, forwarded.
    let forwarded = metric(
        &client,
        &bases[follower],
        "ds_origin_region_forwarded_total",
    )
    .await;
    let (status, body) = read(&client, &on_follower, "&consistency=leader").await;
    assert_eq!((status, body.as_str()), (200, acknowledged.as_str()));
    let head = client.head(&on_follower).send().await.unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        metric(
            &client,
            &bases[follower],
            "ds_origin_region_forwarded_total"
        )
        .await,
        forwarded + 2
    );

    // The owner stops answering: catch-up reads go on from the replica,
    // from the start and from an offset an answer gave.
    procs[owner].signal("STOP");
    let local = metric(
        &client,
        &bases[follower],
        "ds_origin_region_local_reads_total",
    )
    .await;
    let first = client
        .get(format!("{on_follower}?offset=-1&max_bytes=12"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let next = first.headers()["stream-next-offset"]
        .to_str()
        .unwrap()
        .to_owned();
    let head = first.text().await.unwrap();
    let rest = client
        .get(format!("{on_follower}?offset={next}"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .unwrap();
    assert_eq!(rest.status(), 200);
    assert_eq!(
        rest.headers()["stream-up-to-date"].to_str().unwrap(),
        "true"
    );
    assert_eq!(
        format!("{head}{}", rest.text().await.unwrap()),
        acknowledged
    );
    assert_eq!(
        metric(
            &client,
            &bases[follower],
            "ds_origin_region_local_reads_total"
        )
        .await,
        local + 2
    );
    procs[owner].signal("CONT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reads_its_own_writes_through_one_follower() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let (_procs, bases, owner) =
        two_origins_with(&weed, &client, dir.path(), "replica-ryw", &LONG_LEASE).await;
    let follower = &bases[1 - owner];
    let url = format!("{follower}/v1/stream/mine");
    assert_eq!(create(&client, &url).await, 201);
    let mut written = String::new();
    for i in 0..40 {
        let body = format!("[{i:02}]");
        assert_eq!(post(&client, &url, body.clone()).await, 204);
        written.push_str(&body);
        // Read back at once, through the same follower: every write is there.
        let (status, got) = read(&client, &url, "").await;
        assert_eq!(
            (status, got.as_str()),
            (200, written.as_str()),
            "after write {i}"
        );
    }
    // Once the replica has them, the reads are its own.
    until_local(&client, follower, &url, &written).await;

    // Deleted and made again through the follower: never the old bytes.
    let deleted = client.delete(&url).send().await.unwrap();
    assert_eq!(deleted.status(), 204);
    assert_eq!(create(&client, &url).await, 201);
    assert_eq!(post(&client, &url, "new".into()).await, 204);
    for _ in 0..20 {
        let (status, got) = read(&client, &url, "").await;
        assert_eq!((status, got.as_str()), (200, "new"));
    }
    until_local(&client, follower, &url, "new").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_follows_creates_deletes_and_checkpoints_of_its_owner() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    // Checkpoints every few objects: the replica's start moves under it.
    let flags = [
        "--lease",
        "60s",
        "--lease-renew",
        "250ms",
        "--region-checkpoint-objects",
        "4",
        "--region-checkpoint-interval",
        "100ms",
    ];
    let (_procs, bases, owner) =
        two_origins_with(&weed, &client, dir.path(), "replica-moves", &flags).await;
    let follower = &bases[1 - owner];
    let on_owner = |s: &str| format!("{}/v1/stream/{s}", bases[owner]);
    let on_follower = |s: &str| format!("{follower}/v1/stream/{s}");
    for round in 0..3 {
        for s in ["x", "y"] {
            assert_eq!(create(&client, &on_owner(s)).await, 201);
            for i in 0..10 {
                assert_eq!(
                    post(&client, &on_owner(s), format!("{s}{round}.{i};")).await,
                    204
                );
            }
        }
        let want = |s: &str| {
            (0..10)
                .map(|i| format!("{s}{round}.{i};"))
                .collect::<String>()
        };
        until_local(&client, follower, &on_follower("x"), &want("x")).await;
        until_local(&client, follower, &on_follower("y"), &want("y")).await;
        // Deleted on the owner: the replica stops answering for it.
        for s in ["x", "y"] {
            assert_eq!(
                client.delete(on_owner(s)).send().await.unwrap().status(),
                204
            );
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while read(&client, &on_follower("x"), "").await.0 != 404 {
            assert!(
                Instant::now() < deadline,
                "the replica kept a deleted stream"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    // A stream past a chunk: the owner seals its first 4 MiB into the
    // bucket, and the replica reads them from there (its local copy goes).
    let mib: Vec<u8> = (0..1 << 20).map(|i| b'a' + (i % 26) as u8).collect();
    assert_eq!(create(&client, &on_owner("big")).await, 201);
    let mut whole = String::new();
    for _ in 0..6 {
        let r = client
            .post(on_owner("big"))
            .header("content-type", "application/octet-stream")
            .body(mib.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
        whole.push_str(std::str::from_utf8(&mib).unwrap());
    }
    until_local(&client, follower, &on_follower("big"), &whole).await;
    let incarnation = client.head(on_owner("big")).send().await.unwrap().headers()
        ["stream-incarnation"]
        .to_str()
        .unwrap()
        .to_owned();
    let chunk = format!(
        "{}/incarnation/{incarnation}/chunk/0000000000000000",
        on_follower("big")
    );
    let local = metric(&client, follower, "ds_origin_region_local_reads_total").await;
    let r = client.get(&chunk).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.bytes().await.unwrap(), mib.repeat(4));
    assert_eq!(
        metric(&client, follower, "ds_origin_region_local_reads_total").await,
        local + 1,
        "the chunk came from the replica"
    );
    // A snapshot published on the owner: its cacheable URL is answered
    // by the replica once it holds it, with the owner's bytes.
    let snapshot = client
        .put(format!("{}/snapshot/{:016x}", on_owner("big"), 4 << 20))
        .header("content-type", "text/plain")
        .body("state at 4 MiB")
        .send()
        .await
        .unwrap();
    assert_eq!(snapshot.status(), 204);
    let cacheable = format!(
        "{}/incarnation/{incarnation}/snapshot/{:016x}",
        on_follower("big"),
        4 << 20
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let local = metric(&client, follower, "ds_origin_region_local_reads_total").await;
        let r = client.get(&cacheable).send().await.unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.text().await.unwrap(), "state at 4 MiB");
        if metric(&client, follower, "ds_origin_region_local_reads_total").await > local {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replica never answered the snapshot"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // The owner's seal reached the replica: once its copy is dropped, its
    // reads of the chunk come from the bucket (through its chunk cache).
    let cold = |text: &str| {
        [
            "ds_origin_chunk_cache_hits_total",
            "ds_origin_chunk_cache_misses_total",
        ]
        .iter()
        .map(|m| crate::common::metric_in(text, m).unwrap_or(0))
        .sum::<i64>()
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let before = cold(&crate::common::metrics_at(&client, follower).await);
        until_local(&client, follower, &on_follower("big"), &whole).await;
        let text = crate::common::metrics_at(&client, follower).await;
        if cold(&text) > before {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replica never read the sealed chunk from the bucket: {}",
            text.lines()
                .filter(|l| l.contains("chunk"))
                .collect::<Vec<_>>()
                .join("; ")
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    let text = crate::common::metrics_at(&client, follower).await;
    let objects =
        crate::common::metric_in(&text, "ds_origin_region_replica_objects_total").unwrap();
    let checkpoints = crate::common::metric_in(
        &crate::common::metrics_at(&client, &bases[owner]).await,
        "ds_origin_region_checkpoints_total",
    )
    .unwrap();
    eprintln!("replica: {objects} objects applied; owner: {checkpoints} checkpoints");
    assert!(
        checkpoints >= 2,
        "the owner wrote {checkpoints} checkpoints"
    );
    assert_eq!(
        crate::common::metric_in(&text, "ds_origin_region_replicas"),
        Some(1)
    );
}
