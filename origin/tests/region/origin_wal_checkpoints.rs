//! Partition checkpoints in one WAL per origin (decision 0028) against
//! SeaweedFS: a claim reads the newest checkpoint's image and only the log
//! objects after it; a log is deleted only below what every partition with
//! a tenure in it no longer needs; a second checkpoint replaces the first;
//! a reading that meets a number deleted under it reads again; another
//! origin's log (dead or alive) is deleted only below every partition's
//! checkpoint, and its fences stay.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use object_store::{ObjectStore, ObjectStoreExt};
use origin::region::origin_wal::{
    build, collect_dead, newest_stand, read_history, AtOpen, BuildJob, Built, CollectedDead,
    Imager, OriginWal,
};
use origin::region::{Replay, WalError};

use crate::common::seaweed::Seaweed;
use crate::origin_wal::{b, claim, collector, history, open};

/// An image that is the history's frames themselves, one part each.
#[derive(Default)]
struct KeepFrames(VecDeque<Bytes>);

impl Imager for KeepFrames {
    fn take(&mut self, replay: Replay) -> std::io::Result<()> {
        match replay {
            Replay::Begin => self.0.clear(),
            Replay::Frames(f) => self.0.push_back(f),
        }
        Ok(())
    }

    fn next_part(&mut self) -> std::io::Result<Option<Bytes>> {
        Ok(self.0.pop_front())
    }
}

/// Builds a checkpoint of `p`, tenure `tenure` of `wal`'s log.
async fn checkpoint(
    store: &Arc<dyn ObjectStore>,
    wal: &OriginWal,
    p: u32,
    tenure: u64,
) -> Result<Built, WalError> {
    let stopping = AtomicBool::new(false);
    let job = BuildJob {
        store: &**store,
        partition: p,
        tenure,
        acknowledged: wal.acknowledged(),
        min_objects: 1,
        stopping: &stopping,
    };
    build(&job, &mut KeepFrames::default()).await
}

/// Appends round `r` to partitions `ps`, all in one put.
async fn round(wal: &OriginWal, ps: &[u32], r: usize) {
    let appends = ps.iter().map(|&p| wal.append(p, b(&format!("{p}:{r};"))));
    futures::future::try_join_all(appends).await.unwrap();
}

fn rounds(p: u32, rs: std::ops::Range<usize>) -> Vec<Bytes> {
    rs.map(|r| b(&format!("{p}:{r};"))).collect()
}

async fn log_numbers(store: &Arc<dyn ObjectStore>, wal: &OriginWal) -> Vec<u64> {
    numbers_of(store, wal.log()).await
}

async fn numbers_of(store: &Arc<dyn ObjectStore>, log: [u8; 16]) -> Vec<u64> {
    use futures::StreamExt;
    let prefix = object_store::path::Path::from(format!("region/logs/{}", hex(log)));
    let mut found: Vec<u64> = store
        .list(Some(&prefix))
        .map(|m| {
            m.unwrap()
                .location
                .filename()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        })
        .collect()
        .await;
    found.sort_unstable();
    found
}

fn hex(log: [u8; 16]) -> String {
    log.iter().map(|b| format!("{b:02x}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_reads_from_the_newest_checkpoint_and_the_log_goes_only_below_every_partitions() {
    let weed = Seaweed::start();
    let store = weed.store("origin-wal-checkpoints");
    let a = open(&store, "a", Duration::from_millis(20));
    for p in [0, 1] {
        assert!(claim(&a, p).await.unwrap().is_empty());
    }
    for r in 0..6 {
        round(&a, &[0, 1], r).await;
    }
    // Partition 0 checkpointed: the log still holds everything partition
    // 1 needs (it has no checkpoint), so nothing goes.
    let Built::Published { stand, parts, .. } = checkpoint(&store, &a, 0, 0).await.unwrap() else {
        panic!("a checkpoint is due after six puts");
    };
    assert_eq!((stand.tenure, stand.number), (0, 6));
    assert_eq!(parts, 6, "one part per commit of partition 0");
    assert_eq!(a.collect().await.unwrap(), (0, 0));
    assert_eq!(log_numbers(&store, &a).await, (0..6).collect::<Vec<_>>());
    // Both checkpointed: the log goes below both stands.
    checkpoint(&store, &a, 1, 0).await.unwrap();
    assert_eq!(a.collect().await.unwrap(), (6, 6));
    assert!(log_numbers(&store, &a).await.is_empty());
    for r in 6..9 {
        round(&a, &[0, 1], r).await;
    }

    // A reader starts from the image and reads only what came after it.
    let (frames, _) = history(&store, 0).await;
    assert_eq!(frames, rounds(0, 0..9));
    let c = open(&store, "c", Duration::ZERO);
    let mut got = Vec::new();
    let taken = c.claim(0, &mut collector(&mut got)).await.unwrap();
    assert_eq!(got, rounds(0, 0..9), "a takeover from the checkpoint");
    assert_eq!(taken.history.base, Some(stand));
    assert_eq!(
        taken.history.replayed, 3,
        "only the log objects past the stand"
    );
    assert!(matches!(
        a.append(1, b("late")).await,
        Err(WalError::LogFenced { .. })
    ));
    assert_eq!(claim(&c, 1).await.unwrap(), rounds(1, 0..9));

    // C's checkpoint of its own tenure replaces A's, image and all.
    round(&c, &[0, 1], 9).await;
    let Built::Published {
        stand: second,
        deleted,
        ..
    } = checkpoint(&store, &c, 0, 1).await.unwrap()
    else {
        panic!("due after a put of its own");
    };
    assert_eq!(second.tenure, 1);
    assert_eq!(deleted, 1 + 6, "the first manifest and its six parts");
    let stopping = AtomicBool::new(false);
    let newest = newest_stand(&*store, 0, &stopping).await.unwrap().unwrap();
    assert_eq!(newest.stand, second);
    assert_eq!(history(&store, 0).await.0, rounds(0, 0..10));
    // Nothing more to build until more is acknowledged.
    assert_eq!(checkpoint(&store, &c, 0, 1).await.unwrap(), Built::NotYet);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reading_that_meets_a_number_deleted_under_it_reads_again() {
    let weed = Seaweed::start();
    let store = weed.store("origin-wal-moved");
    let a = open(&store, "a", Duration::from_millis(20));
    assert!(claim(&a, 0).await.unwrap().is_empty());
    for r in 0..3 {
        round(&a, &[0], r).await;
    }
    // Hand the partition to C: A's tenure is closed at its release.
    a.release(0).await.unwrap();
    let c = open(&store, "c", Duration::ZERO);
    assert_eq!(claim(&c, 0).await.unwrap(), rounds(0, 0..3));
    // A number of the closed tenure gone (as a collection below a newer
    // checkpoint would make it): the reading says so rather than read a
    // shorter history.
    store
        .delete(&object_store::path::Path::from(format!(
            "region/logs/{}/{:020}",
            hex(a.log()),
            1
        )))
        .await
        .unwrap();
    let stopping = AtomicBool::new(false);
    let read = read_history(&*store, 0, AtOpen::Stop, &stopping, &mut |_| Ok(())).await;
    assert!(matches!(read, Err(WalError::Moved)), "{read:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_origins_log_goes_below_every_partitions_checkpoint_and_its_fence_stays() {
    let weed = Seaweed::start();
    let store = weed.store("origin-wal-dead");
    let stopping = AtomicBool::new(false);
    let collect = |own: [u8; 16]| {
        let store = Arc::clone(&store);
        let stopping = &stopping;
        async move {
            collect_dead(&*store, Some(&own), 3, Duration::ZERO, stopping)
                .await
                .unwrap()
        }
    };
    // A serves partitions 0 and 1, B (alive throughout) partition 2.
    let a = open(&store, "a", Duration::from_millis(20));
    for p in [0, 1] {
        assert!(claim(&a, p).await.unwrap().is_empty());
    }
    for r in 0..4 {
        round(&a, &[0, 1], r).await;
    }
    let b = open(&store, "b", Duration::from_millis(20));
    assert!(claim(&b, 2).await.unwrap().is_empty());
    for r in 0..2 {
        round(&b, &[2], r).await;
    }
    // A dies; C takes partition 0 over, fencing A's log at number 4.
    let dead = a.log();
    drop(a);
    let c = open(&store, "c", Duration::from_millis(20));
    assert_eq!(claim(&c, 0).await.unwrap(), rounds(0, 0..4));
    assert_eq!(numbers_of(&store, dead).await, (0..5).collect::<Vec<_>>());
    // Partition 1's newest tenure is still in A's log, partition 2's in
    // B's: neither is touched.
    assert_eq!(
        collect(c.log()).await,
        CollectedDead {
            logs: 0,
            deleted: 0,
            fences: 0
        }
    );
    // Partition 1 taken over and both checkpointed in C's tenures: A's log
    // is fenced where it ends, its objects go, its fences stay; B's log,
    // which partition 2's newest tenure names, is left to B.
    assert_eq!(claim(&c, 1).await.unwrap(), rounds(1, 0..4));
    for p in [0, 1] {
        assert!(matches!(
            checkpoint(&store, &c, p, 1).await.unwrap(),
            Built::Published { .. }
        ));
    }
    assert_eq!(
        collect(c.log()).await,
        CollectedDead {
            logs: 1,
            deleted: 4,
            fences: 1
        }
    );
    assert_eq!(
        numbers_of(&store, dead).await,
        vec![4, 5],
        "the fences stay"
    );
    assert_eq!(log_numbers(&store, &b).await, vec![0, 1]);
    // B's own collection deletes below its partition's checkpoint, and its
    // writer goes on.
    checkpoint(&store, &b, 2, 0).await.unwrap();
    round(&b, &[2], 2).await;
    assert_eq!(b.collect().await.unwrap().1, 2);
    assert_eq!(log_numbers(&store, &b).await, vec![2]);
    round(&b, &[2], 3).await;
    // Every partition reads whole.
    round(&c, &[0, 1], 4).await;
    for p in [0, 1] {
        assert_eq!(history(&store, p).await.0, rounds(p, 0..5));
    }
    assert_eq!(history(&store, 2).await.0, rounds(2, 0..4));
    assert_eq!(claim(&c, 2).await.unwrap(), rounds(2, 0..4));
}
