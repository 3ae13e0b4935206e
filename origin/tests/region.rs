//! A region's WAL in object storage, against SeaweedFS, whose create-only
//! puts are atomic (the fencing rests on them): claims replay exactly what
//! was acknowledged and fence the old owner, racing claims leave one owner,
//! a put whose answer was lost is settled by reading it back, and the
//! origin in object durability loses nothing when its machine and disk go.

#[path = "region/chaos.rs"]
mod chaos;
#[path = "region/checkpoints.rs"]
mod checkpoints;
#[path = "region/clients.rs"]
mod clients;
mod common;
#[path = "region/feed.rs"]
mod feed;
#[path = "region/forks_across.rs"]
mod forks_across;
#[path = "region/forwards.rs"]
mod forwards;
#[path = "region/idle_cost.rs"]
mod idle_cost;
#[path = "region/key_store.rs"]
mod key_store;
#[path = "region/listing.rs"]
mod listing;
#[path = "region/network.rs"]
mod network;
#[path = "region/origin_wal.rs"]
mod origin_wal;
#[path = "region/origin_wal_checkpoints.rs"]
mod origin_wal_checkpoints;
#[path = "region/origins.rs"]
mod origins;
#[path = "region/outage.rs"]
mod outage;
#[path = "region/partitions.rs"]
mod partitions;
#[path = "region/read_your_writes.rs"]
mod read_your_writes;
#[path = "region/readiness.rs"]
mod readiness;
#[path = "region/receiver.rs"]
mod receiver;
#[path = "region/replicas.rs"]
mod replicas;
#[path = "region/restore.rs"]
mod restore;
#[path = "region/routing.rs"]
mod routing;
#[path = "region/staging.rs"]
mod staging;
#[path = "region/takeover.rs"]
mod takeover;

use std::sync::Arc;

use bytes::Bytes;
use common::seaweed::Seaweed;
use origin::metrics::Metrics;
use origin::region::{ObjectWal, RegionConfig, WalError};

fn node(name: &str) -> RegionConfig {
    RegionConfig {
        node: name.into(),
        url: format!("http://{name}.invalid"),
        partition: 0,
        partitions: 1,
        checkpoint: Default::default(),
        fork_copy_max: 1 << 20,
        pin_grace: std::time::Duration::from_secs(60),
        fork_copies: 8,
        feed: None,
        one_wal: false,
        wal_auto: false,
        origin_wal: None,
        replica: false,
        replicas: true,
        replica_interval: std::time::Duration::from_millis(250),
        replica_shared_bytes: 64 << 20,
        replica_written: 1024,
        replica_floor_wait: std::time::Duration::from_millis(500),
        forwards: 16_384,
        replica_floor_waiting: 4_096,
    }
}

fn claim(
    store: &Arc<dyn object_store::ObjectStore>,
    name: &str,
) -> Result<origin::region::Claimed, WalError> {
    ObjectWal::claim(Arc::clone(store), &node(name), Arc::new(Metrics::default()))
}

fn frames(claimed: &origin::region::Claimed) -> Vec<Bytes> {
    claimed.frames.clone()
}

/// object_store's own harness against the server: conditional puts
/// (create, and compare-and-swap with its race of five workers). (Its
/// listing cases are left out: SeaweedFS lists a prefix by folders, which
/// nothing here relies on.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seaweedfs_passes_object_stores_conditional_put_harness() {
    let weed = Seaweed::start();
    let store = weed.store("harness");
    object_store::integration::put_opts(&*store, true).await;
}

#[test]
fn a_claim_replays_what_was_acknowledged_and_fences_the_old_owner() {
    let weed = Seaweed::start();
    let store = weed.store("fencing");
    let mut a = claim(&store, "a").unwrap();
    assert!(a.frames.is_empty());
    assert_eq!(a.fences as u64, origin::region::fence::WINDOW);
    let n1 = a.wal.append(b"a1").unwrap();
    let n2 = a.wal.append(b"a2").unwrap();
    assert_eq!(n2, n1 + 1);

    let mut b = claim(&store, "b").unwrap();
    assert!(b.wal.epoch() > a.wal.epoch());
    assert_eq!(
        frames(&b),
        [Bytes::from_static(b"a1"), Bytes::from_static(b"a2")]
    );
    // The old owner's next commit meets the new owner's fence.
    match a.wal.append(b"a3") {
        Err(WalError::Fenced { by, .. }) => assert_eq!(by, b.wal.epoch()),
        other => panic!("the old owner wrote past the fence: {other:?}"),
    }
    b.wal.append(b"b1").unwrap();
    // And it stays fenced.
    assert!(matches!(a.wal.append(b"a4"), Err(WalError::Fenced { .. })));

    let c = claim(&store, "c").unwrap();
    assert_eq!(
        frames(&c),
        [
            Bytes::from_static(b"a1"),
            Bytes::from_static(b"a2"),
            Bytes::from_static(b"b1")
        ]
    );
}

/// Two origins claim one partition at the same moment, then both try to
/// write: exactly one writes; the other acknowledges nothing; a later
/// reader replays exactly the winner's commit.
#[test]
fn racing_claims_leave_exactly_one_owner() {
    let weed = Seaweed::start();
    const TRIALS: usize = 10;
    for trial in 0..TRIALS {
        let store = weed.store(&format!("race-{trial}"));
        // Something to replay, from an owner that is about to be fenced.
        let mut first = claim(&store, "first").unwrap();
        first.wal.append(b"before").unwrap();
        // Both claim at once; both write only once both claims ended (a
        // racer that claimed and wrote before the other even listed would
        // be a plain takeover, not a race).
        let claiming = std::sync::Barrier::new(2);
        let writing = std::sync::Barrier::new(2);
        let outcomes: Vec<Result<Vec<u8>, WalError>> = std::thread::scope(|s| {
            let racers: Vec<_> = ["x", "y"]
                .into_iter()
                .map(|name| {
                    let store = Arc::clone(&store);
                    let (claiming, writing) = (&claiming, &writing);
                    s.spawn(move || {
                        claiming.wait();
                        let claimed = claim(&store, name);
                        writing.wait();
                        let mut claimed = claimed?;
                        assert_eq!(frames(&claimed), [Bytes::from_static(b"before")]);
                        let body = format!("by {name}").into_bytes();
                        claimed.wal.append(&body)?;
                        Ok(body)
                    })
                })
                .collect();
            racers.into_iter().map(|r| r.join().unwrap()).collect()
        });
        let written: Vec<&Vec<u8>> = outcomes.iter().filter_map(|o| o.as_ref().ok()).collect();
        for o in &outcomes {
            if let Err(e) = o {
                assert!(matches!(e, WalError::Fenced { .. }), "trial {trial}: {e}");
            }
        }
        assert_eq!(written.len(), 1, "trial {trial}: {outcomes:?}");
        assert!(matches!(
            first.wal.append(b"zombie"),
            Err(WalError::Fenced { .. })
        ));
        let reader = claim(&store, "reader").unwrap();
        let mut want = vec![Bytes::from_static(b"before")];
        want.extend(written.iter().map(|w| Bytes::from((*w).clone())));
        assert_eq!(frames(&reader), want, "trial {trial}");
    }
}

/// A put that landed but whose answer was lost (a timeout): the retry
/// finds the object, reads it back, recognises its own put id, and the
/// commit counts once, at its number.
#[test]
fn a_put_whose_answer_was_lost_is_settled_by_reading_it_back() {
    let weed = Seaweed::start();
    let inner = weed.store("lost-answers");
    let lossy = Arc::new(origin::objects::faults::Faults::new(Arc::clone(&inner)));
    let store: Arc<dyn object_store::ObjectStore> = lossy.clone();
    let mut a = claim(&store, "a").unwrap();
    let before = a.wal.next_number();
    lossy.lose_next(2);
    assert_eq!(a.wal.append(b"once").unwrap(), before);
    assert_eq!(
        lossy.lost(),
        2,
        "the first try's answer and the retry's were lost"
    );
    assert_eq!(a.wal.next_number(), before + 1);
    a.wal.append(b"twice").unwrap();
    let b = claim(&inner, "b").unwrap();
    assert_eq!(
        frames(&b),
        [Bytes::from_static(b"once"), Bytes::from_static(b"twice")]
    );
    // The same lost answer with another owner's object there is a fence,
    // never taken for ours.
    lossy.lose_next(1);
    assert!(matches!(
        a.wal.append(b"late"),
        Err(WalError::Fenced { .. })
    ));
}
