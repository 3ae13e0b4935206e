//! One WAL per origin (decision 0028) against SeaweedFS: one put carries
//! several partitions' commits; a hand-off moves one partition between
//! live origins without a fence; a takeover of one partition fences the
//! silent origin's whole log; racing claims make one tenure; a put whose
//! answer was lost counts once. After each, a reader of every partition's
//! history finds exactly the acknowledged commits, in order.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use origin::region::origin_wal::{read_history, AtOpen, End, OriginWal, WriterConfig};
use origin::region::{Replay, WalError};

use crate::common::seaweed::Seaweed;

pub(crate) fn open(
    store: &Arc<dyn object_store::ObjectStore>,
    node: &str,
    delay: Duration,
) -> OriginWal {
    let config = WriterConfig {
        commit_delay: delay,
        ..WriterConfig::default()
    };
    OriginWal::open(
        Arc::clone(store),
        node,
        &format!("http://{node}.invalid"),
        config,
    )
}

pub(crate) fn collector(
    frames: &mut Vec<Bytes>,
) -> impl FnMut(Replay) -> std::io::Result<()> + Send + '_ {
    move |r| {
        match r {
            Replay::Begin => frames.clear(),
            Replay::Frames(f) => frames.push(f),
        }
        Ok(())
    }
}

/// Claims `p` for `wal`; the frames its history held.
pub(crate) async fn claim(wal: &OriginWal, p: u32) -> Result<Vec<Bytes>, WalError> {
    let mut frames = Vec::new();
    wal.claim(p, &mut collector(&mut frames)).await?;
    Ok(frames)
}

/// Claims `p` for `wal`; the tenure it made and the frames before it.
async fn claim_tenure(wal: &OriginWal, p: u32) -> Result<(u64, Vec<Bytes>), WalError> {
    let mut frames = Vec::new();
    let claimed = wal.claim(p, &mut collector(&mut frames)).await?;
    Ok((claimed.tenure, frames))
}

/// Reads `p`'s history without taking it over.
pub(crate) async fn history(
    store: &Arc<dyn object_store::ObjectStore>,
    p: u32,
) -> (Vec<Bytes>, Option<End>) {
    let mut frames = Vec::new();
    let stopping = std::sync::atomic::AtomicBool::new(false);
    let found = read_history(
        &**store,
        p,
        AtOpen::Stop,
        &stopping,
        &mut collector(&mut frames),
    )
    .await
    .unwrap();
    (frames, found.end)
}

pub(crate) fn b(s: &str) -> Bytes {
    Bytes::from(s.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_put_carries_every_partitions_commits_and_a_takeover_reads_each_back() {
    let weed = Seaweed::start();
    let store = weed.store("origin-wal-batch");
    // A commit delay far longer than it takes to hand the writer one
    // append per partition: each round is one put.
    let a = open(&store, "a", Duration::from_millis(300));
    for p in 0..8 {
        assert!(claim(&a, p).await.unwrap().is_empty());
    }
    const ROUNDS: usize = 5;
    for round in 0..ROUNDS {
        let appends = (0..8u32).map(|p| a.append(p, b(&format!("{p}:{round};"))));
        let numbers: Vec<u64> = futures::future::try_join_all(appends).await.unwrap();
        assert!(
            numbers.windows(2).all(|w| w[0] == w[1]),
            "round {round}: {numbers:?}"
        );
    }
    let (puts, appends) = a.counts();
    assert_eq!(appends, 8 * ROUNDS as u64);
    assert_eq!(puts, ROUNDS as u64, "one put per round of 8 partitions");

    // Another origin takes over partition 3: A's whole log is fenced.
    let c = open(&store, "c", Duration::ZERO);
    // Each put held one section of each partition: one commit a round.
    let want = |p: u32| -> Vec<Bytes> { (0..ROUNDS).map(|r| b(&format!("{p}:{r};"))).collect() };
    assert_eq!(claim(&c, 3).await.unwrap(), want(3));
    for p in [0, 7] {
        assert!(
            matches!(
                a.append(p, b("late")).await,
                Err(WalError::LogFenced { .. })
            ),
            "the fenced log acknowledged partition {p}'s append"
        );
    }
    for p in (0..8).filter(|&p| p != 3) {
        assert_eq!(claim(&c, p).await.unwrap(), want(p), "partition {p}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hand_off_moves_one_partition_without_a_fence_and_the_log_goes_on() {
    let weed = Seaweed::start();
    let store = weed.store("origin-wal-hand-off");
    let a = open(&store, "a", Duration::ZERO);
    let c = open(&store, "c", Duration::ZERO);
    claim(&a, 0).await.unwrap();
    claim(&a, 1).await.unwrap();
    a.append(0, b("a1")).await.unwrap();
    a.append(1, b("b1")).await.unwrap();
    let released = a.release(0).await.unwrap();
    assert!(matches!(
        a.append(0, b("after")).await,
        Err(WalError::NotServing { partition: 0 })
    ));

    let mut frames = Vec::new();
    let claimed = c.claim(0, &mut collector(&mut frames)).await.unwrap();
    assert_eq!(frames, [b("a1")]);
    assert_eq!(claimed.history.fences, 0, "a hand-off needs no fence");
    assert_eq!(claimed.history.end, Some(End::Ended(released)));
    assert_eq!(claimed.tenure, 1);
    // A's log serves partition 1 on.
    a.append(1, b("b2")).await.unwrap();
    c.append(0, b("c1")).await.unwrap();
    let (zero, end) = history(&store, 0).await;
    assert_eq!(zero, [b("a1"), b("c1")]);
    assert!(
        matches!(end, Some(End::Open(_))),
        "C's tenure is live: {end:?}"
    );
    assert_eq!(history(&store, 1).await.0, [b("b1"), b("b2")]);

    // A takes partition 0 back over C: a new tenure past its release.
    assert_eq!(claim(&a, 0).await.unwrap(), [b("a1"), b("c1")]);
    assert!(matches!(
        c.append(0, b("zombie")).await,
        Err(WalError::LogFenced { .. })
    ));
    a.append(0, b("a2")).await.unwrap();
    assert_eq!(history(&store, 0).await.0, [b("a1"), b("c1"), b("a2")]);
    assert_eq!(history(&store, 1).await.0, [b("b1"), b("b2")]);
}

/// Two origins claim one partition of a silent origin at once: exactly
/// one makes the tenure, and a reader finds the silent origin's commits
/// and the winner's, each once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_claims_make_one_tenure() {
    let weed = Seaweed::start();
    for trial in 0..5 {
        let store = weed.store(&format!("origin-wal-race-{trial}"));
        let silent = open(&store, "silent", Duration::ZERO);
        claim(&silent, 0).await.unwrap();
        silent.append(0, b("before")).await.unwrap();
        let (x, y) = (
            open(&store, "x", Duration::ZERO),
            open(&store, "y", Duration::ZERO),
        );
        let (cx, cy) = tokio::join!(claim_tenure(&x, 0), claim_tenure(&y, 0));
        // Both at once: one makes the tenure and the other finds it made.
        // (One that finished before the other even listed is taken over
        // by it, which is a takeover, not a race: the later tenure wins.)
        let mut made = Vec::new();
        for (wal, claimed) in [(&x, cx), (&y, cy)] {
            match claimed {
                Ok((tenure, frames)) => {
                    assert_eq!(frames, [b("before")], "trial {trial}");
                    made.push((tenure, wal));
                }
                Err(WalError::Taken { .. }) => {}
                Err(e) => panic!("trial {trial}: {e}"),
            }
        }
        made.sort_by_key(|m| m.0);
        let (_, owner) = made.pop().expect("one claim made its tenure");
        owner.append(0, b("won")).await.unwrap();
        let other = if std::ptr::eq(owner, &x) { &y } else { &x };
        assert!(matches!(
            other.append(0, b("lost")).await,
            Err(WalError::NotServing { .. } | WalError::LogFenced { .. })
        ));
        assert!(matches!(
            silent.append(0, b("zombie")).await,
            Err(WalError::LogFenced { .. })
        ));
        assert_eq!(
            history(&store, 0).await.0,
            [b("before"), b("won")],
            "trial {trial}"
        );
    }
}

/// Puts whose answers were lost (they landed): each is settled by reading
/// it back, acknowledged at its number, and read once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_whose_answer_was_lost_counts_once() {
    let weed = Seaweed::start();
    let inner = weed.store("origin-wal-lost");
    let lossy = Arc::new(origin::objects::faults::Faults::new(Arc::clone(&inner)));
    let store: Arc<dyn object_store::ObjectStore> = lossy.clone();
    let a = open(&store, "a", Duration::ZERO);
    claim(&a, 0).await.unwrap();
    let first = a.append(0, b("one")).await.unwrap();
    lossy.lose_next(2);
    let second = a.append(0, b("two")).await.unwrap();
    let third = a.append(0, b("three")).await.unwrap();
    assert_eq!(lossy.lost(), 2);
    assert_eq!((second, third), (first + 1, first + 2));
    assert_eq!(history(&inner, 0).await.0, [b("one"), b("two"), b("three")]);
}

/// Four partitions written as fast as they are answered while another
/// origin takes one of them over: every partition's history then holds
/// exactly what its writer was told was acknowledged, in order (nothing
/// lost, nothing the fenced writer was refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_takeover_under_load_keeps_exactly_the_acknowledged_appends() {
    let weed = Seaweed::start();
    let store = weed.store("origin-wal-load");
    let a = Arc::new(open(&store, "a", Duration::from_millis(2)));
    for p in 0..4 {
        claim(&a, p).await.unwrap();
    }
    let (started, mut twenty) = tokio::sync::watch::channel(0usize);
    let writers: Vec<_> = (0..4u32)
        .map(|p| {
            let (a, started) = (Arc::clone(&a), started.clone());
            tokio::spawn(async move {
                let mut acknowledged = Vec::new();
                for i in 0.. {
                    let record = b(&format!("{p}:{i};"));
                    match a.append(p, record.clone()).await {
                        Ok(_) => acknowledged.push(record),
                        Err(WalError::LogFenced { .. }) => break,
                        Err(e) => panic!("partition {p}: {e}"),
                    }
                    if p == 0 {
                        started.send_replace(acknowledged.len());
                    }
                }
                acknowledged
            })
        })
        .collect();
    twenty.wait_for(|&n| n >= 20).await.unwrap();
    let c = open(&store, "c", Duration::ZERO);
    let mut taken = vec![claim(&c, 2).await.unwrap()];
    let mut acknowledged = Vec::new();
    for w in writers {
        acknowledged.push(w.await.unwrap());
    }
    for p in [0, 1, 3] {
        taken.push(claim(&c, p).await.unwrap());
    }
    for (p, frames) in [2, 0, 1, 3].into_iter().zip(taken) {
        let read: Vec<u8> = frames.concat();
        let told: Vec<u8> = acknowledged[p as usize].concat();
        assert_eq!(
            String::from_utf8(read).unwrap(),
            String::from_utf8(told).unwrap(),
            "partition {p}"
        );
        assert!(acknowledged[p as usize].len() >= 20 || p != 0);
    }
}
