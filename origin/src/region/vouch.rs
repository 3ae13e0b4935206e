//! An owner's word on answers no put of its own vouches for.
//!
//! A commit with log records is acknowledged only after its put landed and
//! a look after the landing found no newer epoch (`object_wal`); the fence
//! makes that safe. But an owner also answers from its state alone: a
//! producer's out-of-order append (`409`), a duplicate (`204`), a stream it
//! does not hold (`404`), a `consistency=leader` read. An owner paused past
//! its lease (a long GC pause, a frozen VM) wakes with that state behind
//! the new owner's and, until its heartbeat loop learns of the takeover,
//! would answer from it: a producer told "expected 10" after the new owner
//! acknowledged 10, a leader read without the appends acknowledged before
//! it was sent. No append is lost so, but the answers are not the region's.
//!
//! So such an answer waits for a *round*: a look in the bucket, begun after
//! the request arrived, for the epoch after this owner's (`epochs/{e+1}`,
//! one HEAD; epochs are taken in order, so it answers for every later
//! one). None there: no other owner had acknowledged anything when the
//! request was already here, so this owner's state holds every
//! acknowledgement made before the request was sent. One there: a claim
//! began; this store is *superseded*, answers `503` + `Retry-After`, and
//! stops (its partition is claimed again or followed). Safety rests on the
//! create-only epoch objects and the bucket's read-after-write, not on
//! clocks or leases.
//!
//! Requests arriving together share rounds: [`Rounds`] (pure) says which
//! round a request needs (the first to begin after it joined) and when a
//! runner (one task per store at most) should begin another, so a burst of
//! refusals or leader reads costs one or two HEADs, not one each. Waiters
//! bound the wait themselves (the store's object timeout: `503`).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use object_store::path::Path;
use object_store::ObjectStore;

use super::bucket::exists;
use crate::metrics::Metrics;

/// Why an answer could not be vouched for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unvouched {
    /// An epoch after this owner's exists: another origin claims the
    /// partition, so this owner's state may be behind.
    Superseded,
    /// The store is stopping (or its runtime went): no round will finish.
    Gone,
}

/// What a request that joins finds.
#[derive(Debug, PartialEq, Eq)]
pub enum Join {
    /// Decided already (superseded or gone): no round needed.
    Ended(Unvouched),
    /// Wait for `round` to finish; start a runner first when told.
    Wait { round: u64, start_runner: bool },
}

/// The rounds' bookkeeping (no I/O): begun, finished, wanted.
#[derive(Debug, Default)]
pub struct Rounds {
    /// Rounds begun (the newest one's number).
    begun: u64,
    /// Rounds finished (each finishes before the next begins).
    finished: u64,
    /// The highest round a waiter needs.
    wanted: u64,
    /// A runner is at work (or about to be).
    running: bool,
    ended: Option<Unvouched>,
}

impl Rounds {
    /// A request joins: it needs the first round to begin after now.
    pub fn join(&mut self) -> Join {
        if let Some(end) = self.ended {
            return Join::Ended(end);
        }
        let round = self.begun + 1;
        self.wanted = self.wanted.max(round);
        let start_runner = !self.running;
        self.running = true;
        Join::Wait {
            round,
            start_runner,
        }
    }

    /// The runner asks for the next round to begin: its number, or None
    /// when no waiter needs one more (the runner then stops).
    pub fn begin(&mut self) -> Option<u64> {
        if self.ended.is_some() || self.begun >= self.wanted {
            self.running = false;
            return None;
        }
        self.begun += 1;
        Some(self.begun)
    }

    /// The round begun last finished: a newer epoch was found or not.
    pub fn finish(&mut self, newer: bool) {
        self.finished = self.begun;
        if newer {
            self.ended = Some(Unvouched::Superseded);
        }
    }

    /// The runner stopped without finishing (the store stops).
    pub fn abandon(&mut self) {
        self.running = false;
        self.ended.get_or_insert(Unvouched::Gone);
    }

    /// The answer for a waiter of `round`, once there is one.
    pub fn answer(&self, round: u64) -> Option<Result<(), Unvouched>> {
        match self.ended {
            Some(end) => Some(Err(end)),
            None if self.finished >= round => Some(Ok(())),
            None => None,
        }
    }
}

/// One store's rounds and what a round needs: the bucket, the partition
/// and epoch, where the runner runs (the WAL's own runtime).
pub struct Vouch {
    rounds: parking_lot::Mutex<Rounds>,
    /// Bumped as each round finishes (or the runner gives up).
    changed: tokio::sync::watch::Sender<u64>,
    store: Arc<dyn ObjectStore>,
    superseded_by: Path,
    stopping: Arc<AtomicBool>,
    runtime: tokio::runtime::Handle,
    metrics: Arc<Metrics>,
}

/// Where a [`Vouch`] looks and runs.
pub struct VouchFor {
    pub store: Arc<dyn ObjectStore>,
    /// The object whose existence says a newer owner claimed the
    /// partition: the epoch after this owner's (`epochs/{e+1}`), or with
    /// one WAL per origin the tenure after its own (`tenures/{k+1}`); both
    /// are made in order, so the next one answers for every later one.
    pub superseded_by: Path,
    pub stopping: Arc<AtomicBool>,
    pub runtime: tokio::runtime::Handle,
    /// Each round is timed as object request `vouch` (outcome `ok`,
    /// `superseded` or `error`).
    pub metrics: Arc<Metrics>,
}

impl Vouch {
    pub fn new(f: VouchFor) -> Arc<Vouch> {
        Arc::new(Vouch {
            rounds: parking_lot::Mutex::new(Rounds::default()),
            changed: tokio::sync::watch::Sender::new(0),
            store: f.store,
            superseded_by: f.superseded_by,
            stopping: f.stopping,
            runtime: f.runtime,
            metrics: f.metrics,
        })
    }

    /// Waits until a round begun after this call found no newer epoch.
    pub async fn confirm(self: &Arc<Self>) -> Result<(), Unvouched> {
        let mut changed = self.changed.subscribe();
        // The lock is let go before a runner starts: on a runtime that shut
        // down, the spawn drops the runner at once, and its guard locks.
        let joined = self.rounds.lock().join();
        let round = match joined {
            Join::Ended(end) => return Err(end),
            Join::Wait {
                round,
                start_runner,
            } => {
                if start_runner {
                    self.start_runner();
                }
                round
            }
        };
        loop {
            if let Some(answer) = self.rounds.lock().answer(round) {
                return answer;
            }
            if changed.changed().await.is_err() {
                return Err(Unvouched::Gone);
            }
        }
    }

    /// Runs rounds on the WAL's runtime while waiters need them. Dropped
    /// unfinished (the runtime shut down), it abandons the rounds, so no
    /// waiter waits on a runner that is gone.
    fn start_runner(self: &Arc<Self>) {
        let mut guard = Abandon(Some(Arc::clone(self)));
        let me = Arc::clone(self);
        self.runtime.spawn(async move {
            loop {
                let Some(_round) = me.rounds.lock().begin() else {
                    break;
                };
                let started = std::time::Instant::now();
                let newer = exists(&*me.store, &me.superseded_by, &me.stopping).await;
                let outcome = match newer {
                    Ok(false) => "ok",
                    Ok(true) => "superseded",
                    Err(_) => "error",
                };
                me.metrics
                    .timings
                    .object_request("vouch", outcome, started.elapsed());
                match newer {
                    Ok(newer) => me.rounds.lock().finish(newer),
                    // Stopping: the store goes.
                    Err(_) => me.rounds.lock().abandon(),
                }
                me.changed.send_modify(|n| *n += 1);
            }
            // Finished: nothing to abandon.
            guard.0.take();
        });
    }
}

/// Abandons the rounds when the runner's task is dropped unfinished.
struct Abandon(Option<Arc<Vouch>>);

impl Drop for Abandon {
    fn drop(&mut self) {
        if let Some(vouch) = self.0.take() {
            vouch.rounds.lock().abandon();
            vouch.changed.send_modify(|n| *n += 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waiter_needs_a_round_begun_after_it_joined() {
        let mut r = Rounds::default();
        assert_eq!(
            r.join(),
            Join::Wait {
                round: 1,
                start_runner: true
            }
        );
        assert_eq!(r.begin(), Some(1));
        // Joined while round 1 runs: round 1 began before it, so not its.
        assert_eq!(
            r.join(),
            Join::Wait {
                round: 2,
                start_runner: false
            }
        );
        r.finish(false);
        assert_eq!(r.answer(1), Some(Ok(())));
        assert_eq!(r.answer(2), None);
        assert_eq!(r.begin(), Some(2));
        r.finish(false);
        assert_eq!(r.answer(2), Some(Ok(())));
        // Nobody waits: the runner stops, and the next waiter starts one.
        assert_eq!(r.begin(), None);
        assert_eq!(
            r.join(),
            Join::Wait {
                round: 3,
                start_runner: true
            }
        );
    }

    #[test]
    fn waiters_arriving_together_share_one_round() {
        let mut r = Rounds::default();
        let rounds: Vec<Join> = (0..100).map(|_| r.join()).collect();
        let starters = rounds
            .iter()
            .filter(|j| {
                matches!(
                    j,
                    Join::Wait {
                        start_runner: true,
                        ..
                    }
                )
            })
            .count();
        assert_eq!(starters, 1);
        assert!(rounds
            .iter()
            .all(|j| matches!(j, Join::Wait { round: 1, .. })));
        assert_eq!(r.begin(), Some(1));
        r.finish(false);
        assert_eq!(r.begin(), None);
        assert_eq!(r.answer(1), Some(Ok(())));
    }

    #[test]
    fn a_newer_epoch_ends_every_wait_and_every_later_one() {
        let mut r = Rounds::default();
        r.join();
        assert_eq!(r.begin(), Some(1));
        let late = r.join();
        assert_eq!(
            late,
            Join::Wait {
                round: 2,
                start_runner: false
            }
        );
        r.finish(true);
        assert_eq!(r.answer(1), Some(Err(Unvouched::Superseded)));
        assert_eq!(r.answer(2), Some(Err(Unvouched::Superseded)));
        assert_eq!(r.begin(), None);
        assert_eq!(r.join(), Join::Ended(Unvouched::Superseded));
    }

    #[test]
    fn an_abandoned_runner_ends_the_waits_as_gone() {
        let mut r = Rounds::default();
        r.join();
        assert_eq!(r.begin(), Some(1));
        r.abandon();
        assert_eq!(r.answer(1), Some(Err(Unvouched::Gone)));
        assert_eq!(r.join(), Join::Ended(Unvouched::Gone));
        // A superseded store stays superseded.
        let mut s = Rounds::default();
        s.join();
        s.begin();
        s.finish(true);
        s.abandon();
        assert_eq!(s.answer(1), Some(Err(Unvouched::Superseded)));
    }
}
