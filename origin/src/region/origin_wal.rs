//! One WAL per origin (decision 0028): the I/O shell around `tenure`'s
//! rules. An origin writes one log per process start, each object one
//! group commit of every partition it serves, so puts per second do not
//! grow with the partition count. A partition's history is its chain of
//! tenures; [`OriginWal::claim`] reads it (fencing an open tenure: a
//! takeover) and makes the next tenure in this origin's log,
//! [`OriginWal::release`] ends this origin's tenure for a hand-off.
//!
//! Built and tested against SeaweedFS on its own; the store's writer, the
//! replicas and the checkpoints still use a WAL per partition
//! (`object_wal`).
//!
//! - `format`: the log object, the tenure record, a checkpoint's manifest;
//! - `writer`: the task that gathers appends into puts and answers them;
//! - `read`: reading a partition's history, fences and settled puts;
//! - `checkpoint`: partition checkpoints, and the log deleted below them;
//! - `collect_dead`: other origins' logs deleted below them (dead logs);
//! - `shared_reads`: log objects read once for all of an origin's replicas.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use object_store::ObjectStore;
use tokio::sync::{mpsc, oneshot};

use crate::objects::keys;
use crate::region::bucket::create_or_read;
use crate::region::object_wal::{Replay, WalError, CLAIM_TRIES};

mod checkpoint;
mod collect_dead;
pub(crate) mod format;
pub(crate) mod read;
mod shared_reads;
mod writer;

pub use checkpoint::{build, newest_stand, BuildJob, Built, Imager};
pub use collect_dead::{collect_dead, CollectedDead};
pub use format::{LogId, StandManifest, TenureRecord};
pub use read::{read_history, AtOpen, End, History};
pub use shared_reads::SharedReads;
pub use writer::WriterConfig;

use writer::{Counters, Item, Request, Writer};

/// The tenure a claim in progress is counted under in `made` until its
/// own exists: newer than any checkpoint, so the deletion bound keeps its
/// first number.
const IN_PROGRESS: u64 = u64::MAX;

/// This origin's log, and the partitions it serves through it.
pub struct OriginWal {
    store: Arc<dyn ObjectStore>,
    log: LogId,
    node: String,
    url: String,
    requests: mpsc::Sender<Request>,
    stopping: Arc<AtomicBool>,
    counters: Arc<Counters>,
    /// The tenures this log holds, as made: (partition, tenure, first
    /// number). Its deletion bound looks at each.
    made: parking_lot::Mutex<Vec<(u32, u64, u64)>>,
}

/// This origin's log as its partitions' stores share it.
#[derive(Clone)]
pub struct SharedLog(pub Arc<OriginWal>);

impl std::fmt::Debug for SharedLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SharedLog({})", hex::encode(self.0.log))
    }
}

/// What a claim found and made.
#[derive(Debug)]
pub struct Claimed {
    /// The partition's tenure this origin made.
    pub tenure: u64,
    /// Its first number in this origin's log.
    pub from: u64,
    /// What the reading of the history before it found.
    pub history: History,
}

impl OriginWal {
    /// Starts a new log (a random name) and its writer on the current
    /// runtime; it serves no partition until one is claimed.
    pub fn open(
        store: Arc<dyn ObjectStore>,
        node: &str,
        url: &str,
        config: WriterConfig,
    ) -> OriginWal {
        Self::open_counted(store, node, url, config, None)
    }

    /// [`OriginWal::open`], its puts counted and timed in `metrics`
    /// (`ds_origin_object_wal_*`, object request `wal_put`).
    pub fn open_counted(
        store: Arc<dyn ObjectStore>,
        node: &str,
        url: &str,
        config: WriterConfig,
        metrics: Option<Arc<crate::metrics::Metrics>>,
    ) -> OriginWal {
        let config = config.checked();
        let (requests, received) = mpsc::channel(config.queue);
        let log: LogId = rand::random();
        let stopping = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let writer = Writer {
            store: Arc::clone(&store),
            log,
            config,
            stopping: Arc::clone(&stopping),
            counters: Arc::clone(&counters),
            metrics,
        };
        tokio::spawn(writer.run(received));
        tracing::info!(log = %hex::encode(log), node, "opened this origin's log");
        OriginWal {
            store,
            log,
            node: node.into(),
            url: url.into(),
            requests,
            stopping,
            counters,
            made: parking_lot::Mutex::new(Vec::new()),
        }
    }

    pub fn log(&self) -> LogId {
        self.log
    }

    /// Every number of this log below it was answered as landed: a
    /// checkpoint of a partition it serves may stand there.
    pub fn acknowledged(&self) -> u64 {
        self.counters.acknowledged.load(Ordering::Acquire)
    }

    /// Deletes this log's objects below where no reader needs them
    /// (`tenure::deletion_bound`): the bound, and how many went.
    pub async fn collect(&self) -> Result<(u64, u64), WalError> {
        let made = self.made.lock().clone();
        checkpoint::collect_log(
            &*self.store,
            &self.log,
            &made,
            self.acknowledged(),
            &self.stopping,
        )
        .await
    }

    /// Puts made, and appends they answered.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.counters.puts.load(Ordering::Relaxed),
            self.counters.appends.load(Ordering::Relaxed),
        )
    }

    /// Appends one commit of `partition`'s frames; answers the number of
    /// the object holding them once it landed as this log's own and every
    /// number before it did.
    pub async fn append(&self, partition: u32, frames: Bytes) -> Result<u64, WalError> {
        self.ask(|reply| {
            Request::Put(Item::Frames {
                partition,
                frames,
                reply,
            })
        })
        .await
    }

    /// [`OriginWal::append`] for a caller outside the runtime (the
    /// store's writer thread): the append takes its place in the writer's
    /// queue before this returns, so appends enqueued one after the other
    /// are put in that order; the answer comes on the receiver. Waits
    /// while the queue is full. Must not be called from async code.
    pub fn enqueue(
        &self,
        partition: u32,
        frames: Bytes,
    ) -> oneshot::Receiver<Result<u64, WalError>> {
        let (reply, answer) = oneshot::channel();
        let request = Request::Put(Item::Frames {
            partition,
            frames,
            reply,
        });
        if let Err(mpsc::error::SendError(Request::Put(item))) =
            self.requests.blocking_send(request)
        {
            item.answer(Err(WalError::Stopped));
        }
        answer
    }

    /// Whether the log stopped (fenced, or a put that did not settle): it
    /// serves nothing more.
    pub fn is_stopped(&self) -> bool {
        self.counters.stopped.load(Ordering::Acquire) || self.stopping.load(Ordering::Acquire)
    }

    /// The bucket the log is in.
    pub fn store(&self) -> &Arc<dyn ObjectStore> {
        &self.store
    }

    /// Ends this origin's tenure of `partition` (a hand-off, rule 2):
    /// answers the release's number once it landed; the partition's
    /// appends are refused from when it was asked.
    pub async fn release(&self, partition: u32) -> Result<u64, WalError> {
        self.ask(|reply| Request::Put(Item::Release { partition, reply }))
            .await
    }

    /// Makes this origin the owner of `partition`: reads its history,
    /// fencing the newest tenure where it is open (a takeover of its
    /// log's every partition), hands its frames to `replay`, and makes the
    /// next tenure in this log (rule 4). [`WalError::Taken`]: another
    /// origin made that tenure first; nothing was served.
    pub async fn claim(
        &self,
        partition: u32,
        replay: &mut (dyn FnMut(Replay) -> std::io::Result<()> + Send),
    ) -> Result<Claimed, WalError> {
        // Reserved first: refused while this log serves or releases it.
        let from = self
            .ask(|reply| Request::Reserve { partition, reply })
            .await?;
        // Counted by this log's deletion from now on (as a tenure no
        // checkpoint covers): the log is not deleted from `from` on while
        // the claim reads, before its tenure exists.
        self.made.lock().push((partition, IN_PROGRESS, from));
        let claimed = self.claim_from(partition, from, replay).await;
        {
            let mut made = self.made.lock();
            made.retain(|&(p, t, _)| !(p == partition && t == IN_PROGRESS));
            if let Ok(c) = &claimed {
                made.push((partition, c.tenure, from));
            }
        }
        let claimed = claimed?;
        // A log stopped meanwhile (a takeover of another of its
        // partitions) serves nothing: the claim fails, its tenure ends at
        // the log's fence for whoever reads it next.
        self.ask(|reply| Request::Serve { partition, reply })
            .await?;
        tracing::info!(
            partition,
            tenure = claimed.tenure,
            from,
            replayed_objects = claimed.history.replayed,
            fences = claimed.history.fences,
            "made the partition's tenure in this origin's log"
        );
        Ok(claimed)
    }

    /// A claim's reading and its tenure, from number `from` of this log.
    async fn claim_from(
        &self,
        partition: u32,
        from: u64,
        replay: &mut (dyn FnMut(Replay) -> std::io::Result<()> + Send),
    ) -> Result<Claimed, WalError> {
        let history = self.read_settled(partition, replay).await?;
        let tenure = history.tenures.len() as u64;
        let previous_end = match history.end {
            None => None,
            Some(End::Ended(at)) => Some(at),
            Some(End::Open(_)) => unreachable!("a claim fences what is open"),
        };
        let record = TenureRecord {
            log: self.log,
            from,
            previous_end,
            put_id: rand::random(),
            node: self.node.clone(),
            url: self.url.clone(),
        };
        let key = keys::partition_tenure(partition, tenure);
        let made = create_or_read(
            &*self.store,
            &key,
            format::encode_tenure(&record),
            &self.stopping,
            None,
            |bytes| {
                format::decode_tenure(&bytes)
                    .map(|found| found.put_id == record.put_id)
                    .map_err(|source| WalError::Corrupt {
                        key: key.to_string(),
                        source,
                    })
            },
        )
        .await?;
        if !made {
            return Err(WalError::Taken { partition, tenure });
        }
        Ok(Claimed {
            tenure,
            from,
            history,
        })
    }

    /// Reads `partition`'s history for a claim, fencing its open tenure,
    /// until a reading's checkpoint is still the newest once it ended
    /// (rule 5): a number it took for missing was not deleted under it.
    async fn read_settled(
        &self,
        partition: u32,
        replay: &mut (dyn FnMut(Replay) -> std::io::Result<()> + Send),
    ) -> Result<History, WalError> {
        for _ in 0..CLAIM_TRIES {
            let history = match read_history(
                &*self.store,
                partition,
                AtOpen::Fence,
                &self.stopping,
                replay,
            )
            .await
            {
                Err(WalError::Moved) => continue,
                read => read?,
            };
            let newest = newest_stand(&*self.store, partition, &self.stopping).await?;
            if newest.map(|m| m.stand) == history.base {
                return Ok(history);
            }
        }
        Err(WalError::Contended(CLAIM_TRIES))
    }

    /// Stops the writer: waiting puts give up ([`WalError::Stopped`]).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Release);
    }

    async fn ask(
        &self,
        request: impl FnOnce(oneshot::Sender<Result<u64, WalError>>) -> Request,
    ) -> Result<u64, WalError> {
        let (reply, answer) = oneshot::channel();
        self.requests
            .send(request(reply))
            .await
            .map_err(|_| WalError::Stopped)?;
        answer.await.map_err(|_| WalError::Stopped)?
    }
}

impl Drop for OriginWal {
    fn drop(&mut self) {
        self.stop();
    }
}
