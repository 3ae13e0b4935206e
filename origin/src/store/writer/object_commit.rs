//! Object durability's commits, pipelined: a batch's put starts and the
//! writer goes on to the next batch; a batch is answered and published
//! only once its put and every put before it settled as ours, in order.
//!
//! Up to `region::fence::WINDOW` puts are in flight, so with 50 ms puts the
//! writer still forms a batch every few milliseconds. A batch without log
//! records that answers requests (refusals, duplicates, a create that
//! finds its stream) waits its turn too: a duplicate must not be answered
//! before its original is durable. And it waits for a check of its own
//! (`region::vouch`): no put vouches that its answers, made from this
//! owner's state alone, are not behind a newer owner's. When a put or a
//! check fails (fenced, or stopped at shutdown) nothing of it or after it
//! is answered, and the writer stops: its state is ahead of what the
//! bucket holds, or behind a newer owner's.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{AfterCommit, Writer};
use crate::region::{Settlement, Ticket, WalError};
use crate::store::janitor::Garbage;
use crate::store::sealer::SealJob;
use crate::store::view::StreamView;

/// Checks in flight at most (batches that answer without log records, each
/// waiting for its round: `region::vouch`). Rounds are shared, so they
/// settle together; the bound only stops a long outage of the bucket from
/// queueing refusal batches without end: past it the writer waits, as for
/// puts past `fence::WINDOW`, and requests wait in its bounded queue.
pub const CHECKS_MAX: usize = 64;

/// What a batch does once it is durable.
#[derive(Default)]
pub struct Durable {
    pub after: Vec<AfterCommit>,
    pub seals: Vec<SealJob>,
    pub drops: Vec<(Arc<StreamView>, u64)>,
    pub gc: Vec<Garbage>,
}

impl Durable {
    /// Whether it answers a request (and so must be vouched for).
    fn answers(&self) -> bool {
        self.after
            .iter()
            .any(|a| matches!(a, AfterCommit::Appended(..) | AfterCommit::Reply(_)))
    }
}

/// One batch waiting for its put or check (or, with neither, for those
/// before it).
struct Pending {
    ticket: Option<Ticket>,
    settled: bool,
    durable: Durable,
}

/// The pipeline: batches in commit order and the puts' outcomes.
pub struct Pipeline {
    pending: VecDeque<Pending>,
    settlements: std::sync::mpsc::Receiver<Settlement>,
    settled: std::sync::mpsc::Sender<Settlement>,
    /// Puts and checks in flight (not yet settled).
    in_flight: usize,
    /// Puts among them (at most `fence::WINDOW`).
    puts: usize,
}

impl Default for Pipeline {
    fn default() -> Self {
        let (settled, settlements) = std::sync::mpsc::channel();
        Pipeline {
            pending: VecDeque::new(),
            settlements,
            settled,
            in_flight: 0,
            puts: 0,
        }
    }
}

impl Writer {
    /// Queues a batch behind the ones in flight, starting its put when it
    /// has log records, or its check when it answers without any. False
    /// once the pipeline failed.
    pub(super) fn commit_to_object_wal(&mut self, frames: &[u8], durable: Durable) -> bool {
        let answers = durable.answers();
        if frames.is_empty() && !answers && self.pipeline.pending.is_empty() {
            self.publish_durable(durable);
            return true;
        }
        let wake = self.wake.clone();
        let wake: crate::region::commit_log::Wake = Box::new(move || {
            if let Some(tx) = wake {
                // A full queue needs no wake: the writer is busy.
                let _ = tx.try_send(super::Command::Wake);
            }
        });
        let mut ticket = None;
        if !frames.is_empty() {
            while self.pipeline.puts as u64 >= crate::region::fence::WINDOW {
                if !self.settle_one(true) {
                    return false;
                }
            }
            let wal = self.object_wal.as_mut().expect("object durability");
            ticket = Some(wal.start(frames, self.pipeline.settled.clone(), wake));
            self.pipeline.puts += 1;
        } else if answers {
            while self.pipeline.in_flight - self.pipeline.puts >= CHECKS_MAX {
                if !self.settle_one(true) {
                    return false;
                }
            }
            let wal = self.object_wal.as_mut().expect("object durability");
            ticket = Some(wal.start_check(self.pipeline.settled.clone(), wake));
        }
        if ticket.is_some() {
            self.pipeline.in_flight += 1;
            self.count_checks();
        }
        self.pipeline.pending.push_back(Pending {
            ticket,
            settled: ticket.is_none(),
            durable,
        });
        self.settle_ready()
    }

    /// Takes in every settlement that arrived and publishes the batches
    /// now durable. False once a put failed.
    pub(super) fn settle_ready(&mut self) -> bool {
        while self.settle_one(false) {}
        !self.pipeline_failed
    }

    /// Waits for every put in flight (at shutdown). False if one failed.
    pub(super) fn settle_all(&mut self) -> bool {
        while self.pipeline.in_flight > 0 {
            if !self.settle_one(true) {
                return false;
            }
        }
        !self.pipeline_failed
    }

    /// Takes in one settlement (waiting for it when `wait`) and publishes
    /// what became durable. False when none came or a put failed.
    fn settle_one(&mut self, wait: bool) -> bool {
        if self.pipeline_failed {
            return false;
        }
        let settlement = if wait {
            match self.pipeline.settlements.recv() {
                Ok(s) => s,
                Err(_) => return false,
            }
        } else {
            match self.pipeline.settlements.try_recv() {
                Ok(s) => s,
                Err(_) => return false,
            }
        };
        self.pipeline.in_flight -= 1;
        if let Ticket::Put(_) = settlement.ticket {
            self.pipeline.puts -= 1;
        }
        self.count_checks();
        if let Err(e) = settlement.result {
            self.fail_pipeline(e);
            return false;
        }
        if let Some(p) = self
            .pipeline
            .pending
            .iter_mut()
            .find(|p| p.ticket == Some(settlement.ticket))
        {
            p.settled = true;
        }
        while self.pipeline.pending.front().is_some_and(|p| p.settled) {
            let p = self.pipeline.pending.pop_front().expect("front");
            if let (Some(ticket @ Ticket::Put(_)), Some(wal)) = (p.ticket, self.object_wal.as_ref())
            {
                wal.note_acknowledged(ticket);
            }
            self.publish_durable(p.durable);
        }
        true
    }

    fn count_checks(&self) {
        let checks = self.pipeline.in_flight - self.pipeline.puts;
        self.metrics
            .object_wal_checks
            .store(checks as i64, Ordering::Relaxed);
    }

    /// A put failed: nothing of it or after it is answered (each waiting
    /// request answers 503) or published.
    fn fail_pipeline(&mut self, e: WalError) {
        tracing::error!(error = %e, "this origin stops writing its partition");
        if matches!(e, WalError::Fenced { .. }) {
            self.fenced.store(true, Ordering::Release);
        }
        self.pipeline.pending.clear();
        self.pipeline_failed = true;
    }
}
