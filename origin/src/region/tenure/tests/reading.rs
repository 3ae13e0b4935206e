//! How the model reads: a tenure walked in a log, a partition's history
//! from a checkpoint through its tenures, and the end-of-run check of
//! every history against what was acknowledged.

use super::*;
use std::collections::{BTreeMap, BTreeSet};

/// Walks on in `log` to the walk's end or to a missing number: the frames
/// counted and where it stopped.
pub(super) fn walk_all(log: &Log, p: usize, walk: &mut Walk) -> (Vec<u64>, Result<Step, u64>) {
    let mut frames = Vec::new();
    loop {
        let n = match walk.next() {
            Ok(n) => n,
            Err(end) => return (frames, Err(end)),
        };
        let step = walk.read(found(log, n, p));
        if step != Step::Count {
            return (frames, Ok(step));
        }
        frames.extend(frames_of(&log[&n], p));
    }
}

pub(super) fn found(log: &Log, n: u64, p: usize) -> Found {
    match log.get(&n) {
        None => Found::Missing,
        Some(o) => Found::Object {
            epoch: o.epoch,
            releases: o.releases == Some(p),
        },
    }
}

pub(super) fn frames_of(o: &Obj, p: usize) -> impl Iterator<Item = u64> + '_ {
    o.frames.iter().filter(move |f| f.0 == p).map(|f| f.1)
}

/// The end tenure `j` of `p` has, if a successor names it.
pub(super) fn below(world: &World, p: usize, j: usize) -> Option<u64> {
    world.tenures[p].get(j + 1).map(|t| {
        t.previous_end
            .expect("a later tenure names its predecessor's end")
    })
}

/// A reader's history of `p` from `start` (a checkpoint, or the first
/// tenure with nothing before it) through every tenure, in `logs`: the
/// frames and the history's length where each tenure starts (tenures
/// before the start have none). None
/// when a closed tenure has a missing number (deleted under the reader).
fn read_history(
    world: &World,
    logs: &[Log],
    p: usize,
    start: Option<(At, Vec<u64>)>,
) -> Option<(Vec<u64>, BTreeMap<usize, usize>)> {
    let ((from_tenure, at), mut history) = start.unwrap_or(((0, 0), Vec::new()));
    let mut starts = BTreeMap::new();
    let tenures = &world.tenures[p];
    for (j, tenure) in tenures.iter().enumerate().skip(from_tenure) {
        starts.insert(j, history.len());
        let end = below(world, p, j);
        let mut walk = if j == from_tenure {
            Walk::resume(tenure, at.max(tenure.from), end)
        } else {
            Walk::new(tenure, end)
        };
        let (frames, stop) = walk_all(&logs[tenure.log as usize], p, &mut walk);
        history.extend(frames);
        // A closed tenure ends where its successor says, or has a number
        // deleted under this reader.
        if stop.is_ok() && j + 1 < tenures.len() {
            return None;
        }
    }
    Some((history, starts))
}
/// Reads every partition from its newest checkpoint, and through every
/// tenure from the archive, and checks both against what was
/// acknowledged; returns the frames read.
pub(super) fn check(world: &World) -> usize {
    let mut total = 0;
    for p in 0..PARTITIONS {
        let (history, starts) = read_history(world, &world.archive, p, None).unwrap_or_else(|| {
            panic!("partition {p}: a tenure ends where its successor does not say")
        });
        let (from_checkpoint, _) = read_history(world, &world.logs, p, world.newest(p))
            .unwrap_or_else(|| {
                panic!("partition {p}: a reader from the newest checkpoint meets a deleted number")
            });
        assert_eq!(
            from_checkpoint, history,
            "partition {p}: a reader from the newest checkpoint reads another history"
        );
        for (held, _) in world.checkpoints[p].values() {
            assert!(
                history.starts_with(held),
                "partition {p}: a checkpoint holds another history"
            );
        }
        let unique: BTreeSet<u64> = history.iter().copied().collect();
        assert_eq!(unique.len(), history.len(), "partition {p}: a frame twice");
        assert!(
            unique.is_subset(&world.sent[p]),
            "partition {p}: a frame never sent"
        );
        for ((q, k), acked) in &world.acked {
            if *q != p {
                continue;
            }
            let from = *starts.get(k).unwrap_or_else(|| {
                panic!("partition {p}: tenure {k} acknowledged frames but is not in the chain")
            });
            let mut rest = history[from..].iter();
            for tag in acked {
                assert!(
                    rest.any(|h| h == tag),
                    "partition {p}: acknowledged frame {tag} of tenure {k} lost or out of order"
                );
            }
        }
        for (q, k, replayed) in &world.made {
            if *q == p {
                if let Some(&start) = starts.get(k) {
                    assert_eq!(
                        &history[..start],
                        &replayed[..],
                        "partition {p}: the maker of tenure {k} replayed another history"
                    );
                }
            }
        }
        total += history.len();
    }
    total
}
