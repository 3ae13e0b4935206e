//! The model's collector (`collect_dead` in the shell, rule 6 of
//! `tenure`): it deletes in any log, dead or alive, so what it may delete
//! must not depend on the writer being gone.

use super::*;

/// A collector's work on one log (any log: it cannot tell a dead writer
/// from a slow one).
pub(super) enum Collecting {
    /// Listed: the log's objects lie below `listed`.
    Listed { log: usize, listed: u64 },
    /// Looked at the tenures and checkpoints: deletes its writer's objects
    /// below `bound`, one a step.
    Deleting { log: usize, bound: u64 },
}

/// One step of the collector (`collect_dead`): list a log, then look at
/// every tenure in it with its partition's newest checkpoint, then delete
/// the writer's objects below `deletion_bound` of the two.
pub(super) fn collect_step(c: &mut Option<Collecting>, world: &mut World, sub: usize) {
    let rules = world.rules();
    *c = match c.take() {
        // A round now and then: its fence stops the log's writer if alive.
        None if world.logs.is_empty() || !sub.is_multiple_of(4) => None,
        None => {
            let sub = sub / 4;
            let log = sub % world.logs.len();
            let listed = world.logs[log].keys().next_back().map_or(0, |n| n + 1);
            if rules.collect_fences_first && !world.fence(log, listed) {
                return; // the writer put there first: not this round
            }
            Some(Collecting::Listed { log, listed })
        }
        Some(Collecting::Listed { log, listed }) => {
            let mut in_log = Vec::new();
            for p in 0..PARTITIONS {
                let newest = world.newest(p).map(|((c, n), _)| Stand {
                    tenure: c as u64,
                    number: n,
                });
                for (j, tenure) in world.tenures[p].iter().enumerate() {
                    if tenure.log as usize == log {
                        in_log.push(InLog {
                            tenure: j as u64,
                            from: tenure.from,
                            newest,
                        });
                    }
                }
            }
            Some(Collecting::Deleting {
                log,
                bound: deletion_bound(listed, in_log),
            })
        }
        Some(Collecting::Deleting { log, bound }) => {
            let doomed: Vec<u64> = world.logs[log]
                .range(..bound)
                .filter(|(_, o)| o.epoch == EPOCH || !rules.collect_keeps_fences)
                .map(|(n, _)| *n)
                .collect();
            match doomed.get(sub % doomed.len().max(1)) {
                Some(n) => {
                    world.logs[log].remove(n);
                    world.collected += 1;
                    Some(Collecting::Deleting { log, bound })
                }
                None => None,
            }
        }
    };
}
