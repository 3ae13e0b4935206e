//! Where the store's writer puts its commits with object durability: a
//! partition's own WAL (`object_wal`, decisions 0012 and 0015) or, with
//! one WAL per origin (decision 0028), its partition's part of this
//! origin's log ([`PartitionLog`]). The writer's pipeline
//! (`store::writer::object_commit`) is the same for both: puts and checks
//! started in commit order, settled through one channel, answered in order.

use std::sync::atomic::AtomicBool;
use std::sync::mpsc::Sender;
use std::sync::Arc;

use bytes::Bytes;

use super::object_wal::{ObjectWal, Settlement, Ticket, WalError};
use super::origin_wal::OriginWal;
use super::vouch::{Unvouched, Vouch, VouchFor};
use crate::metrics::Metrics;
use crate::objects::keys;

/// What wakes the writer once a settlement was sent.
pub type Wake = Box<dyn FnOnce() + Send>;

/// A partition's commits on their way to the bucket.
pub trait CommitLog: Send {
    /// Starts the put of one group commit; `settled` hears its outcome
    /// (under the returned ticket), then `wake` runs. Commits started one
    /// after the other land in that order.
    fn start(&mut self, frames: &[u8], settled: Sender<Settlement>, wake: Wake) -> Ticket;
    /// Starts a round of [`Vouch`] for a batch that answers without log
    /// records.
    fn start_check(&mut self, settled: Sender<Settlement>, wake: Wake) -> Ticket;
    /// The writer answered the put of `ticket` (and all before it).
    fn note_acknowledged(&self, ticket: Ticket);
}

impl CommitLog for ObjectWal {
    fn start(&mut self, frames: &[u8], settled: Sender<Settlement>, wake: Wake) -> Ticket {
        ObjectWal::start(self, frames, settled, wake)
    }

    fn start_check(&mut self, settled: Sender<Settlement>, wake: Wake) -> Ticket {
        ObjectWal::start_check(self, settled, wake)
    }

    fn note_acknowledged(&self, ticket: Ticket) {
        if let Ticket::Put(n) = ticket {
            ObjectWal::note_acknowledged(self, n);
        }
    }
}

/// One partition's commits in this origin's log, under the tenure its
/// claim made.
pub struct PartitionLog {
    wal: Arc<OriginWal>,
    partition: u32,
    tenure: u64,
    runtime: tokio::runtime::Handle,
    vouch: Arc<Vouch>,
    puts: u64,
    checks: u64,
}

impl PartitionLog {
    /// The partition's log under `tenure`; its waits run on `runtime`.
    pub fn new(
        wal: Arc<OriginWal>,
        partition: u32,
        tenure: u64,
        runtime: tokio::runtime::Handle,
        stopping: Arc<AtomicBool>,
        metrics: Arc<Metrics>,
    ) -> PartitionLog {
        let vouch = Vouch::new(VouchFor {
            store: Arc::clone(wal.store()),
            superseded_by: keys::partition_tenure(partition, tenure + 1),
            stopping,
            runtime: runtime.clone(),
            metrics,
        });
        PartitionLog {
            wal,
            partition,
            tenure,
            runtime,
            vouch,
            puts: 0,
            checks: 0,
        }
    }

    /// What answers without a put of their own wait for.
    pub fn vouch(&self) -> Arc<Vouch> {
        Arc::clone(&self.vouch)
    }

    /// A stopped log ends every tenure in it: to the store, the partition
    /// was taken over.
    fn fenced(&self) -> WalError {
        WalError::Fenced {
            partition: self.partition,
            ours: self.tenure,
            by: self.tenure + 1,
        }
    }
}

impl CommitLog for PartitionLog {
    fn start(&mut self, frames: &[u8], settled: Sender<Settlement>, wake: Wake) -> Ticket {
        self.puts += 1;
        let ticket = Ticket::Put(self.puts);
        // In the log's queue before the next commit's: order kept.
        let answer = self
            .wal
            .enqueue(self.partition, Bytes::copy_from_slice(frames));
        let fenced = self.fenced();
        self.runtime.spawn(async move {
            let result = match answer.await {
                Ok(Ok(_number)) => Ok(()),
                Ok(Err(WalError::LogFenced { .. } | WalError::NotServing { .. })) => Err(fenced),
                Ok(Err(e)) => Err(e),
                Err(_) => Err(WalError::Stopped),
            };
            let _ = settled.send(Settlement { ticket, result });
            wake();
        });
        ticket
    }

    fn start_check(&mut self, settled: Sender<Settlement>, wake: Wake) -> Ticket {
        self.checks += 1;
        let ticket = Ticket::Check(self.checks);
        let vouch = Arc::clone(&self.vouch);
        let fenced = self.fenced();
        self.runtime.spawn(async move {
            let result = match vouch.confirm().await {
                Ok(()) => Ok(()),
                Err(Unvouched::Superseded) => Err(fenced),
                Err(Unvouched::Gone) => Err(WalError::Stopped),
            };
            let _ = settled.send(Settlement { ticket, result });
            wake();
        });
        ticket
    }

    /// The log keeps its own acknowledged number (`OriginWal::acknowledged`).
    fn note_acknowledged(&self, _ticket: Ticket) {}
}
