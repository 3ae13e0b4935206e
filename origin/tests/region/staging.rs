//! Staged snapshot parts move with their partition (`http::staging_bucket`):
//! parts staged on an owner that is then killed with its disk deleted are
//! there on the next owner, which takes more and publishes them all; the
//! bucket keeps none once published.

use std::time::{Duration, Instant};

use futures::TryStreamExt;

use super::origins::{start_with, wait_serving};
use super::takeover::the_owner;
use crate::common::process::Proc;
use crate::common::region_roles::serving;
use crate::common::seaweed::Seaweed;

const FLAGS: [&str; 4] = ["--lease", "2s", "--lease-renew", "500ms"];
const STREAM: &str = "/v1/stream/staged";
const AT: &str = "0000000000000064";

async fn staged_objects(weed: &Seaweed) -> usize {
    let store = weed.store("staging");
    let prefix = object_store::path::Path::from("region/partitions/0000/staging");
    let listed: Vec<_> = store.list(Some(&prefix)).try_collect().await.unwrap();
    listed.len()
}

async fn stage(client: &reqwest::Client, base: &str, part: u32, body: &'static str) {
    let r = client
        .put(format!("{base}{STREAM}/snapshot/{AT}/part/{part}"))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "part {part}: {:?}", r.text().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn staged_parts_survive_the_owner_and_its_disk() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let mut origins: Vec<Proc> = ["a", "b"]
        .iter()
        .map(|n| start_with(&weed, &dir.path().join(n), "staging", n, &FLAGS))
        .collect();
    let bases: Vec<String> = origins
        .iter()
        .map(|p| format!("http://{}", p.addr))
        .collect();
    for b in &bases {
        wait_serving(&client, b).await;
    }
    let owner = the_owner(&client, &bases).await;
    let other = bases[1 - owner].clone();
    let r = client
        .put(format!("{other}{STREAM}"))
        .header("content-type", "application/octet-stream")
        .body(vec![b'x'; 100])
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // Through the follower: the owner stages them, in the bucket too.
    stage(&client, &other, 0, "first-").await;
    stage(&client, &other, 1, "second-").await;
    assert_eq!(staged_objects(&weed).await, 2);

    origins[owner].kill();
    std::fs::remove_dir_all(dir.path().join(["a", "b"][owner])).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while serving(&client, &other).await != Some(true) {
        assert!(Instant::now() < deadline, "no takeover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The next owner has them, takes one more and publishes all three.
    stage(&client, &other, 2, "third").await;
    assert_eq!(staged_objects(&weed).await, 3);
    let r = client
        .put(format!("{other}{STREAM}/snapshot/{AT}"))
        .header("stream-snapshot-parts", "3")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "{:?}", r.text().await);
    let r = client
        .get(format!("{other}{STREAM}/snapshot"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.unwrap(), "first-second-third");
    assert_eq!(
        staged_objects(&weed).await,
        0,
        "published: gone from the bucket"
    );
    // A publish of parts never staged anywhere is still refused.
    let r = client
        .put(format!("{other}{STREAM}/snapshot/0000000000000000"))
        .header("stream-snapshot-parts", "1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
}

/// Parts no owner meets again (their client gave up during a takeover) go
/// by age: older than the staging TTL and of no upload the owner holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_no_owner_meets_again_are_swept_by_age() {
    use origin::http::staging_bucket::StagingBucket;
    let weed = Seaweed::start();
    let objects = origin::objects::instrumented::Objects::new(weed.store("staging"));
    let ttl = Duration::from_secs(3600);
    let bucket = StagingBucket::new(objects, 0, ttl);
    for (name, part) in [("aa", 0), ("aa", 1), ("bb", 0)] {
        bucket
            .put_part(name, part, bytes::Bytes::from_static(b"part"))
            .await
            .unwrap();
    }
    assert_eq!(staged_objects(&weed).await, 3);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let held: std::collections::HashSet<String> = ["bb".to_owned()].into();
    // Younger than the TTL: kept.
    bucket.sweep(now, &held).await;
    assert_eq!(staged_objects(&weed).await, 3);
    // Past it: the upload no one holds goes, the held one stays.
    bucket.sweep(now + 2 * 3_600_000, &held).await;
    assert_eq!(staged_objects(&weed).await, 1);
    assert_eq!(bucket.parts("bb").await.unwrap().len(), 1);
    assert!(bucket.parts("aa").await.unwrap().is_empty());
}
