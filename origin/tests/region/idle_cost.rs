//! What an idle region of six partitions with one WAL per origin asks of
//! its bucket, counted by a proxy in front of SeaweedFS: owners are read
//! from the heartbeats (each partition looked up by its owner alone each
//! renewal), and the replicas of the partitions in one origin's log read
//! it together (one GET of its next number a round, not one per partition
//! and not sixteen ahead). Before, the same region made 6 HEADs a renewal
//! per origin and 16 GETs a round per followed partition.

use std::time::Duration;

use super::origins::{region_args, wait_serving};
use super::partitions::{args, base, settled};
use crate::common::counting_proxy::CountingProxy;
use crate::common::process::spawn_with_env;
use crate::common::seaweed::Seaweed;

const ORIGINS: u64 = 3;
/// The window counted, in rounds of the replicas (250 ms) and renewals
/// (500 ms in `args`).
const WINDOW: Duration = Duration::from_secs(4);
const ROUNDS: u64 = 16;
const RENEWALS: u64 = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_regions_requests_do_not_grow_with_its_partitions() {
    let weed = Seaweed::start();
    let proxy = CountingProxy::start(&weed.endpoint).await;
    let env: Vec<(String, String)> = weed
        .env()
        .into_iter()
        .map(|(k, v)| match k.as_str() {
            "AWS_ENDPOINT_URL" => (k, proxy.url()),
            _ => (k, v),
        })
        .collect();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let url = Seaweed::url("idle");
    let mut more = args();
    more.extend(["--region-wal", "origin"]);
    let procs: Vec<_> = ["a", "b", "c"]
        .iter()
        .map(|n| {
            let data = dir.path().join(n);
            spawn_with_env(&[], &region_args(&data, &url, n, &more), &env)
        })
        .collect();
    let bases: Vec<String> = procs.iter().map(base).collect();
    for b in &bases {
        wait_serving(&client, b).await;
    }
    settled(&client, &bases, 2).await;
    // The replicas laid out and the first checkpoints built: what is
    // counted from here is the region at rest.
    tokio::time::sleep(Duration::from_secs(3)).await;
    proxy.take();
    tokio::time::sleep(WINDOW).await;
    let counts = proxy.take();
    eprintln!("an idle region's requests in {WINDOW:?}: {counts:#?}");
    let count = |k: &str| counts.get(k).copied().unwrap_or(0);
    // The heartbeats: a put, a listing and three reads per origin and
    // renewal, at most (a renewal may land on either side of the window).
    assert!(count("PUT region/nodes") <= ORIGINS * (RENEWALS + 1));
    // Each partition's next tenure looked up by its owner alone each
    // renewal (six a renewal in all), not by every origin (eighteen). A
    // checkpoint build or a dead-log round in the window reads tenures
    // too (a listing and a read per partition): not counted here.
    let heads = count("HEAD region/partitions/*/tenures");
    assert!(
        heads <= 6 * (RENEWALS + 1),
        "{heads} looks at the partitions' next tenures"
    );
    // Each origin follows two other origins' logs: one read of each a
    // round, shared by its replicas of that log's partitions (four per
    // origin here; one read each a round would be 4 × ROUNDS). On a busy
    // machine (the whole test binary at once) a replica's round may start
    // late and miss its log's shared read now and then: 105 alone, 110
    // seen with every test running, against 192 unshared.
    let log_reads = count("GET region/logs");
    assert!(
        log_reads <= ORIGINS * 2 * (ROUNDS + 4),
        "{log_reads} reads of the logs"
    );
    assert!(log_reads > 0, "the replicas do not follow the logs");
}
