//! The fencing rules, checked on their own and by a model: owners that
//! claim, fence, replay and write with a full window in flight, every step
//! interleaved at random against a create-only map (what a conditional
//! put gives), with puts of fenced owners still landing afterwards.

use super::*;
use proptest::prelude::*;
use std::collections::{BTreeMap, VecDeque};

fn header(kind: Kind, epoch: u64, id: u8) -> WalHeader {
    WalHeader {
        kind,
        epoch,
        put_id: [id; 16],
    }
}

#[test]
fn a_claim_fences_holes_and_the_window() {
    let plan = plan_claim(0, &[0, 1, 3, 4]);
    let mut want = vec![2];
    want.extend(5..5 + WINDOW);
    assert_eq!(plan.fences, want);
    assert_eq!(plan.first_data, 5 + WINDOW);
    assert_eq!(plan.replay_below, 5 + WINDOW);
    let empty = plan_claim(10, &[]);
    assert_eq!(empty.fences, (10..10 + WINDOW).collect::<Vec<_>>());
    assert_eq!(empty.first_data, 10 + WINDOW);
}

#[test]
fn settling_tells_ours_from_newer_and_older() {
    let ours = header(Kind::Data, 5, 1);
    assert_eq!(settle(5, [1; 16], &ours), Settled::Ours);
    assert_eq!(
        settle(5, [1; 16], &header(Kind::Fence, 6, 2)),
        Settled::Newer { epoch: 6 }
    );
    assert_eq!(
        settle(5, [1; 16], &header(Kind::Data, 4, 2)),
        Settled::Older { epoch: 4 }
    );
    // The same put id under another epoch is not ours.
    assert_eq!(
        settle(5, [1; 16], &header(Kind::Data, 6, 1)),
        Settled::Newer { epoch: 6 }
    );
}

#[test]
fn the_epoch_rule_drops_what_lands_after_a_newer_fence() {
    let mut rule = EpochRule::default();
    assert!(rule.replays(&header(Kind::Data, 1, 0)));
    assert!(!rule.replays(&header(Kind::Fence, 2, 0)));
    assert!(!rule.replays(&header(Kind::Data, 1, 0)));
    assert!(rule.replays(&header(Kind::Data, 2, 0)));
    assert!(rule.replays(&header(Kind::Data, 3, 0)));
    assert_eq!(next_epoch(&[]), 1);
    assert_eq!(next_epoch(&[3, 1, 2]), 4);
}

/// An object in the model's bucket: its header and, for data, a tag that
/// names the commit.
type Bucket = BTreeMap<u64, (WalHeader, Option<u64>)>;

enum Phase {
    Idle,
    /// Holds an epoch, has not listed yet (others may claim and fence
    /// meanwhile: epochs are not in the order claims list).
    Claimed,
    Fencing {
        plan: ClaimPlan,
        at: usize,
    },
    Replaying {
        plan: ClaimPlan,
    },
    Serving {
        next: u64,
        /// Number, tag, and whether the put landed (Some(true)) or found
        /// the number taken (Some(false)).
        in_flight: VecDeque<(u64, u64, Option<bool>)>,
    },
    Stopped,
}

struct Owner {
    epoch: u64,
    phase: Phase,
    replayed: Vec<u64>,
    acked: Vec<u64>,
}

impl Owner {
    fn put_id(&self) -> PutId {
        [self.epoch as u8; 16]
    }
}

/// Runs one schedule: each byte picks the next step among the owners.
fn run(schedule: &[u8], owners: usize) {
    let mut bucket = Bucket::new();
    let mut epochs = 0u64;
    let mut tags = 0u64;
    let mut all: Vec<Owner> = (0..owners)
        .map(|_| Owner {
            epoch: 0,
            phase: Phase::Idle,
            replayed: Vec::new(),
            acked: Vec::new(),
        })
        .collect();
    // Puts of stopped owners that may still land: (number, header, tag).
    let mut stray: Vec<(u64, WalHeader, u64)> = Vec::new();
    for (step, &choice) in schedule.iter().enumerate() {
        if choice as usize % (owners + 1) == owners {
            // A stray put lands.
            if !stray.is_empty() {
                let (n, h, tag) = stray.remove(step % stray.len());
                bucket.entry(n).or_insert((h, Some(tag)));
            }
            continue;
        }
        let o = &mut all[choice as usize % (owners + 1)];
        let sub = (choice as usize / (owners + 1)) + step;
        match std::mem::replace(&mut o.phase, Phase::Stopped) {
            Phase::Idle => {
                // A fresh epoch (create-only epoch objects make each unique).
                epochs += 1;
                o.epoch = epochs;
                o.phase = Phase::Claimed;
            }
            Phase::Claimed => {
                let found: Vec<u64> = bucket.keys().copied().collect();
                o.phase = Phase::Fencing {
                    plan: plan_claim(0, &found),
                    at: 0,
                };
            }
            Phase::Fencing { plan, at } => {
                let n = plan.fences[at];
                let mine = WalHeader {
                    kind: Kind::Fence,
                    epoch: o.epoch,
                    put_id: o.put_id(),
                };
                let found = bucket.entry(n).or_insert((mine, None)).0;
                o.phase = match settle(o.epoch, o.put_id(), &found) {
                    Settled::Newer { .. } => Phase::Stopped,
                    _ if at + 1 == plan.fences.len() => Phase::Replaying { plan },
                    _ => Phase::Fencing { plan, at: at + 1 },
                };
            }
            Phase::Replaying { plan } => {
                let mut rule = EpochRule::default();
                o.replayed = bucket
                    .range(..plan.replay_below)
                    .filter(|(_, (h, _))| rule.replays(h))
                    .map(|(_, (_, tag))| tag.expect("data has a tag"))
                    .collect();
                if rule.replayed(o.epoch) != Replayed::Owner {
                    o.replayed.clear();
                    continue;
                }
                o.phase = Phase::Serving {
                    next: plan.first_data,
                    in_flight: VecDeque::new(),
                };
            }
            Phase::Serving {
                mut next,
                mut in_flight,
            } => {
                let waiting: Vec<usize> = (0..in_flight.len())
                    .filter(|&i| in_flight[i].2.is_none())
                    .collect();
                match sub % 3 {
                    // Start a put (a new group commit).
                    0 if (in_flight.len() as u64) < WINDOW => {
                        tags += 1;
                        in_flight.push_back((next, tags, None));
                        next += 1;
                    }
                    // One put in flight reaches the bucket.
                    1 if !waiting.is_empty() => {
                        let i = waiting[sub % waiting.len()];
                        let (n, tag, _) = in_flight[i];
                        let mine = WalHeader {
                            kind: Kind::Data,
                            epoch: o.epoch,
                            put_id: o.put_id(),
                        };
                        let found = bucket.entry(n).or_insert((mine, Some(tag))).0;
                        let landed = settle(o.epoch, o.put_id(), &found) == Settled::Ours;
                        in_flight[i].2 = Some(landed);
                    }
                    // Acknowledge in order; a failed put stops the owner.
                    _ => {
                        while let Some(&(_, tag, Some(true))) = in_flight.front() {
                            o.acked.push(tag);
                            in_flight.pop_front();
                        }
                        if let Some(&(_, _, Some(false))) = in_flight.front() {
                            for (n, tag, landed) in in_flight.drain(..) {
                                if landed.is_none() {
                                    stray.push((
                                        n,
                                        WalHeader {
                                            kind: Kind::Data,
                                            epoch: o.epoch,
                                            put_id: o.put_id(),
                                        },
                                        tag,
                                    ));
                                }
                            }
                            o.phase = Phase::Stopped;
                            continue;
                        }
                    }
                }
                o.phase = Phase::Serving { next, in_flight };
            }
            Phase::Stopped => {}
        }
    }
    // Every stray put lands in the end, as late as can be.
    for (n, h, tag) in stray {
        bucket.entry(n).or_insert((h, Some(tag)));
    }
    let mut rule = EpochRule::default();
    let log: Vec<u64> = bucket
        .values()
        .filter(|(h, _)| rule.replays(h))
        .map(|(_, tag)| tag.expect("data has a tag"))
        .collect();
    let mut seen = std::collections::HashSet::new();
    assert!(
        log.iter().all(|t| seen.insert(*t)),
        "a commit twice: {log:?}"
    );
    for o in &all {
        // What it acknowledged follows at once, complete and in order:
        // readers of the owner saw the state every later reader sees.
        let mut served = o.replayed.clone();
        served.extend(&o.acked);
        assert!(
            log.len() >= served.len() && log[..served.len()] == served[..],
            "acknowledged commits lost or out of order: served {served:?}, log {log:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(20000))]

    #[test]
    fn no_acknowledged_commit_is_lost_duplicated_or_reordered(
        schedule in proptest::collection::vec(any::<u8>(), 0..400),
        owners in 2usize..4,
    ) {
        run(&schedule, owners);
    }
}
