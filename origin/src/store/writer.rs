//! The writer loop: the one thread that changes streams.
//!
//! It takes every command waiting in its queue as one batch, decides each with
//! the pure core, encodes the effects into one buffer, writes and syncs that
//! buffer to the WAL once (group commit: every append of a batch shares one
//! `fdatasync`), and only then publishes the new tails and answers. Commands
//! that arrive while it syncs form the next batch, so the batch grows with
//! the load. A batch is written only into log room prepared beforehand, so
//! a full disk refuses writes (`503`) rather than failing one (see `room`);
//! a failed write or sync of the log still aborts the process: after a
//! failed fsync the page cache cannot be trusted, and recovery from the log
//! is the only safe way on. Everything else the writer writes (streams'
//! own files) is a copy of bytes already in the log: a failure there is
//! logged and tried again later, and the log keeps the bytes meanwhile.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::RwLock;
use shared::invalidation::Change;
use tokio::sync::{mpsc, oneshot};

use super::engine::LogPos;
use super::engine::{Applied, Engine};
use super::error::StoreError;
use super::janitor::Garbage;
use super::publisher::Publisher;
use super::record::{self, Record};
use super::sealer::SealJob;
use super::view::{End, StreamView};
use super::wal::Wal;
use super::{FastMap, StoreConfig};
use crate::clock::Clock;
use crate::core::config::StreamConfig;
use crate::core::producer::Receipt;
use crate::core::snapshot::SnapshotMeta;
use crate::core::stream::{AppendDecision, AppendRequest};
use crate::metrics::Metrics;

mod checkpointing;
mod cleaning;
mod creating;
mod deleting;
mod restoring;
pub use restoring::Restored;
mod expiry;
mod room;
pub use expiry::EXPIRE_PER_TICK;
mod gathering;
mod memory;
mod object_commit;
mod replicating;
mod sealing;
mod stream_meta;
mod turns;
pub use turns::{Turn, Turns};

/// Streams by path, as readers see them: only durable state.
pub type Registry = Arc<RwLock<FastMap<Arc<str>, Arc<StreamView>>>>;

pub struct Created {
    pub view: Arc<StreamView>,
    /// False when the stream already existed with the same configuration.
    pub created: bool,
    pub end: End,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AppendOutcome {
    /// Applied at `start`; it ends at the new tail.
    Applied {
        start: u64,
    },
    Duplicate {
        epoch: u64,
        highest_seq: u64,
        receipt: Option<Receipt>,
    },
    AlreadyClosed,
}

pub struct Appended {
    pub outcome: AppendOutcome,
    pub end: End,
    pub view: Arc<StreamView>,
}

pub enum Command {
    Create {
        path: String,
        config: StreamConfig,
        closed: bool,
        payload: Bytes,
        reply: oneshot::Sender<Result<Created, StoreError>>,
    },
    /// A fork (see `creating`).
    Fork {
        path: String,
        plan: super::ForkPlan,
        closed: bool,
        payload: Bytes,
        reply: oneshot::Sender<Result<Created, StoreError>>,
    },
    Append {
        /// The stream by its path, as the request found it.
        view: Arc<StreamView>,
        incarnation: Option<String>,
        req: AppendRequest,
        payload: Bytes,
        reply: oneshot::Sender<Result<Appended, StoreError>>,
    },
    Delete {
        path: String,
        incarnation: Option<String>,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Roll a stream back (see `restoring`).
    Restore {
        path: String,
        incarnation: String,
        to: u64,
        reply: oneshot::Sender<Result<Restored, StoreError>>,
    },
    /// Expire idle streams and checkpoint if due.
    Tick,
    /// Nothing: wakes the writer to answer the batches whose puts settled.
    Wake,
    /// Finish the current batch, checkpoint, and stop.
    Shutdown,
    /// Bytes `[0, through)` of stream `id` are sealed in object storage.
    Sealed { id: u64, through: u64 },
    /// The promoter copied stream `id`'s bytes up to `through` into its
    /// file (`None`: it could not; they stay in the log).
    Promoted {
        id: u64,
        through: Option<u64>,
        written: u64,
    },
    /// Make `meta` (already in object storage) the latest snapshot.
    Snapshot {
        path: String,
        incarnation: Option<String>,
        meta: SnapshotMeta,
        expect_digest: Option<String>,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Make the stream public (or private).
    SetPublic {
        path: String,
        incarnation: String,
        public: bool,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// A replica takes its owner's commits (decision 0018): each item
    /// is one WAL object's frames, in number order.
    Replicate {
        objects: Vec<Bytes>,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
    /// Advance retention to the latest snapshot at `offset`.
    Retain {
        path: String,
        incarnation: Option<String>,
        offset: u64,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
}

/// What becomes visible once the batch is durable.
pub enum AfterCommit {
    Register(Arc<StreamView>),
    Unregister(Arc<StreamView>),
    Publish(Arc<StreamView>, End),
    /// The answer to an append (the hot path: no boxed closure); an
    /// applied one also publishes the stream's new tail, before answering.
    Appended(
        oneshot::Sender<Result<Appended, StoreError>>,
        Result<Appended, StoreError>,
    ),
    Reply(Box<dyn FnOnce() + Send>),
}

pub struct Writer {
    pub engine: Engine,
    pub wal: Wal,
    pub clock: Arc<dyn Clock>,
    pub config: StoreConfig,
    pub metrics: Arc<Metrics>,
    checkpoint_running: Arc<AtomicBool>,
    /// Prepared log room, as the current batch found it (see `room`).
    batch_room: u64,
    /// What the last checkpoint, which failed, was to write.
    checkpoint_failed: Arc<parking_lot::Mutex<Option<checkpointing::Failed>>>,
    /// A stream's file was written since the last checkpoint.
    promoted_since_checkpoint: bool,
    last_checkpoint: Instant,
    /// Streams holding a memory copy of their newest bytes, by id.
    in_memory: FastMap<u64, Arc<StreamView>>,
    /// Bytes of those copies, all streams together.
    memory_total: u64,
    /// Streams to promote into their own files after this batch.
    to_promote: Vec<Arc<StreamView>>,
    /// Where promotions go (see `promoter`).
    promoter: std::sync::mpsc::Sender<super::promoter::Job>,
    /// Streams handed to the promoter and not yet back.
    promoting: super::FastSet<u64>,
    /// Batches so far (from 1; see `warm::HOT_BATCHES`).
    batches: u64,
    /// Streams with `warm::HEAVY_EXTENTS` extents or more, promoted once
    /// all streams' extents pass `StoreConfig::max_log_extents`.
    heavy: super::FastSet<u64>,
    /// Streams changed since the last checkpoint (by id; gone ones were
    /// deleted): the next checkpoint writes only these.
    touched: super::FastSet<u64>,
    /// When idle streams may expire (see `expiry`).
    expiry: expiry::ExpiryQueue,
    /// The log segment being cleaned and the streams still to promote off it.
    cleaning: cleaning::Cleaning,
    publisher: Arc<Publisher>,
    /// Where complete chunks go to be sealed (none without object storage).
    pub seal_jobs: Option<mpsc::UnboundedSender<SealJob>>,
    /// Chunks found ready in this batch, handed over once it is durable.
    pending_seals: Vec<SealJob>,
    /// Per stream id: the end of the last chunk handed to the sealer.
    seal_requested: FastMap<u64, u64>,
    /// Bytes handed to the sealer and not yet sealed, all streams together.
    unsealed: u64,
    /// Seals logged in this batch: their local copies go once it is durable.
    pending_drops: Vec<(Arc<StreamView>, u64)>,
    /// Where objects that became garbage go (none without object storage).
    pub gc: Option<mpsc::UnboundedSender<(tokio::time::Instant, Garbage)>>,
    /// Garbage made in this batch, handed over once it is durable.
    pending_gc: Vec<Garbage>,
    /// Log bytes recovery replayed from segments that are still on disk; a
    /// checkpoint retires them (so a restart right after a crash does not
    /// replay them again).
    pub replayed_bytes: u64,
    /// The feed edges tail (see `store::invalidations`).
    pub invalidations: Option<Arc<super::invalidations::Invalidations>>,
    /// A region's feed events of this batch, logged at its end
    /// (`Record::Feed`): `invalidate` adds them, from `&self`.
    feed_frames: std::cell::RefCell<Vec<u8>>,
    /// Object durability: where every batch goes before it is answered.
    pub object_wal: Option<Box<dyn crate::region::commit_log::CommitLog>>,
    /// Set once the object WAL said this store may acknowledge no more.
    pub fenced: Arc<AtomicBool>,
    /// Batches waiting for their puts (see `object_commit`).
    pipeline: object_commit::Pipeline,
    /// A put failed: the writer stops.
    pipeline_failed: bool,
    /// How a settled put wakes the writer (object durability).
    pub wake: Option<super::writer_pool::CommandTx>,
}

impl Writer {
    pub fn new(
        engine: Engine,
        wal: Wal,
        clock: Arc<dyn Clock>,
        config: StoreConfig,
        metrics: Arc<Metrics>,
        publisher: Arc<Publisher>,
        promoter: std::sync::mpsc::Sender<super::promoter::Job>,
    ) -> Self {
        Writer {
            engine,
            wal,
            clock,
            config,
            metrics,
            checkpoint_running: Arc::new(AtomicBool::new(false)),
            batch_room: 0,
            checkpoint_failed: Arc::default(),
            promoted_since_checkpoint: false,
            last_checkpoint: Instant::now(),
            in_memory: FastMap::default(),
            memory_total: 0,
            to_promote: Vec::new(),
            promoter,
            promoting: super::FastSet::default(),
            batches: 1,
            heavy: super::FastSet::default(),
            touched: super::FastSet::default(),
            expiry: expiry::ExpiryQueue::default(),
            cleaning: cleaning::Cleaning::default(),
            publisher,
            seal_jobs: None,
            pending_seals: Vec::new(),
            seal_requested: FastMap::default(),
            unsealed: 0,
            pending_drops: Vec::new(),
            gc: None,
            pending_gc: Vec::new(),
            replayed_bytes: 0,
            invalidations: None,
            feed_frames: Default::default(),
            object_wal: None,
            fenced: Arc::default(),
            pipeline: object_commit::Pipeline::default(),
            pipeline_failed: false,
            wake: None,
        }
    }

    /// Takes over what recovery found: the streams its replay changed (the
    /// first checkpoint writes them), the sizes of the older segments, and
    /// every stream's expiry (counted from `now`, as a restart resets idle
    /// time).
    pub fn restored(
        &mut self,
        touched: super::FastSet<u64>,
        sizes: std::collections::BTreeMap<u64, u64>,
        now: u64,
    ) {
        // Replay kept the replayed bytes in memory; they are in the log.
        for &id in &touched {
            if let Some(entry) = self.engine.entry_by_id(id) {
                entry.view.drop_memory();
            }
        }
        self.touched = touched;
        self.cleaning.sizes = sizes;
        for entry in self.engine.entries.values() {
            self.expiry.schedule(&entry.core.config, entry.core.id, now);
            if entry.view.warm.lock().extents().len() >= super::warm::HEAVY_EXTENTS {
                self.heavy.insert(entry.core.id);
            }
        }
    }

    /// Makes the batch durable, then has it published and answered (with
    /// object durability, once its put settles: see `object_commit`).
    /// False when it cannot be made durable in object storage: then
    /// nothing of it is answered or published, and the writer stops.
    fn commit(
        &mut self,
        frames: &mut Vec<u8>,
        after: &mut Vec<AfterCommit>,
        commands: usize,
    ) -> bool {
        // The batch's feed events, in the commit of the changes they tell of.
        let feed = self.feed_frames.get_mut();
        if !feed.is_empty() {
            frames.extend_from_slice(feed);
            feed.clear();
        }
        if !frames.is_empty() {
            let started = Instant::now();
            if let Err(e) = self.wal.append_durably(frames) {
                tracing::error!(error = %e, "the write-ahead log could not be written or synced; stopping to recover from the log");
                std::process::abort();
            }
            self.metrics
                .wal_sync(frames.len() as u64, commands as u64, started.elapsed());
        }
        // The next batch is likely as large: room for it up front, rather
        // than growing (and copying) the list a few times per batch.
        let room = after.len();
        let durable = object_commit::Durable {
            after: std::mem::replace(after, Vec::with_capacity(room)),
            seals: std::mem::take(&mut self.pending_seals),
            drops: std::mem::take(&mut self.pending_drops),
            gc: std::mem::take(&mut self.pending_gc),
        };
        let ok = if self.object_wal.is_some() {
            self.commit_to_object_wal(frames, durable)
        } else {
            self.publish_durable(durable);
            true
        };
        frames.clear();
        ok
    }

    /// What a batch does once durable: seals handed over, sealed local
    /// copies dropped, garbage queued, answers and publications submitted.
    fn publish_durable(&mut self, durable: object_commit::Durable) {
        let object_commit::Durable {
            after,
            seals,
            drops,
            gc,
        } = durable;
        self.pending_seals.extend(seals);
        self.hand_over_seals();
        for (view, through) in drops {
            // Deleted since: its extents were unpinned with it, and its
            // file goes.
            if !self.engine.paths_by_id.contains_key(&view.id) {
                continue;
            }
            let (released, gone) = view.drop_sealed(through);
            self.metrics.dropped(released);
            self.engine.unpin(&gone);
            self.touched.insert(view.id);
        }
        if let Some(queue) = &self.gc {
            let now = tokio::time::Instant::now();
            for garbage in gc {
                let _ = queue.send((now, garbage));
            }
        }
        self.publisher.submit(after);
    }

    /// One command of a batch: one arm per command, each handing its work
    /// to the operation's own file (long by design: the command table).
    fn handle(
        &mut self,
        cmd: Command,
        now: u64,
        frames: &mut Vec<u8>,
        after: &mut Vec<AfterCommit>,
    ) {
        match cmd {
            Command::Create {
                path,
                config,
                closed,
                payload,
                reply,
            } => {
                self.expire_if_due(&path, now, frames, after);
                let result = self.create(path, config, closed, payload, now, frames, after);
                after.push(AfterCommit::Reply(Box::new(move || {
                    let _ = reply.send(result);
                })));
            }
            Command::Fork {
                path,
                plan,
                closed,
                payload,
                reply,
            } => {
                self.expire_if_due(&path, now, frames, after);
                let result = self.fork(path, plan, closed, payload, now, frames, after);
                after.push(AfterCommit::Reply(Box::new(move || {
                    let _ = reply.send(result);
                })));
            }
            Command::Append {
                view,
                incarnation,
                req,
                payload,
                reply,
            } => {
                let result = self.append(view, incarnation, req, payload, now, frames, after);
                after.push(AfterCommit::Appended(reply, result));
            }
            Command::Delete {
                path,
                incarnation,
                reply,
            } => {
                self.expire_if_due(&path, now, frames, after);
                let result = match self.engine.entries.get(path.as_str()) {
                    None => Err(StoreError::NotFound),
                    Some(e) if e.core.soft_deleted => Err(StoreError::SoftDeleted),
                    Some(e)
                        if incarnation
                            .as_ref()
                            .is_some_and(|i| **i != *e.core.incarnation) =>
                    {
                        Err(StoreError::mismatch(&e.view))
                    }
                    Some(_) => {
                        self.delete(&path, now, frames, after);
                        Ok(())
                    }
                };
                after.push(AfterCommit::Reply(Box::new(move || {
                    let _ = reply.send(result);
                })));
            }
            Command::Restore {
                path,
                incarnation,
                to,
                reply,
            } => {
                let result = self.restore(&path, incarnation, to, now, frames, after);
                after.push(AfterCommit::Reply(Box::new(move || {
                    let _ = reply.send(result);
                })));
            }
            Command::Shutdown => {}
            Command::Sealed { id, through } => self.sealed(id, through, frames),
            Command::Promoted {
                id,
                through,
                written,
            } => self.promoted(id, through, written),
            Command::Snapshot {
                path,
                incarnation,
                meta,
                expect_digest,
                reply,
            } => {
                self.expire_if_due(&path, now, frames, after);
                let result = self.snapshot(&path, incarnation, meta, expect_digest, frames);
                let view = self
                    .engine
                    .entries
                    .get(path.as_str())
                    .map(|e| Arc::clone(&e.view));
                let latest = self
                    .engine
                    .entries
                    .get(path.as_str())
                    .and_then(|e| e.core.snapshot.clone());
                if let (Ok(_), Some(view)) = (&result, view.clone()) {
                    after.push(AfterCommit::Reply(Box::new(move || {
                        view.set_snapshot(latest)
                    })));
                }
                // The replaced snapshot's URL now answers 404: edges that
                // kept it hear of it before the publish is answered.
                if let (Ok(true), Some(view)) = (&result, &view) {
                    let incarnation = view.incarnation.clone();
                    self.invalidate(after, path, incarnation, Change::SnapshotReplaced, None);
                }
                // Forks without a snapshot of their own start from this one.
                if let (Ok(_), Some(view)) = (&result, &view) {
                    self.snapshot_reaches_forks(view.id, after);
                }
                after.push(AfterCommit::Reply(Box::new(move || {
                    let _ = reply.send(result.map(|_| ()));
                })));
            }
            Command::SetPublic {
                path,
                incarnation,
                public,
                reply,
            } => {
                let result = self.set_public(&path, incarnation, public, frames);
                after.push(AfterCommit::Reply(Box::new(move || {
                    let result = result.map(|view| view.set_public(public));
                    let _ = reply.send(result);
                })));
            }
            Command::Retain {
                path,
                incarnation,
                offset,
                reply,
            } => {
                self.expire_if_due(&path, now, frames, after);
                let result = self.retain(&path, incarnation, offset, frames, after);
                after.push(AfterCommit::Reply(Box::new(move || {
                    let _ = reply.send(result);
                })));
            }
            Command::Replicate { objects, reply } => {
                let result = self.replicate(&objects, now, frames, after);
                after.push(AfterCommit::Reply(Box::new(move || {
                    let _ = reply.send(result);
                })));
            }
            Command::Tick => self.expire_due(now, frames, after),
            Command::Wake => {}
        }
    }

    /// Appends to the stream at `view`'s path. The answer carries the
    /// stream's view: `view` itself when it is still the stream there (no
    /// reference count bounced between the cores for it).
    #[allow(clippy::too_many_arguments)]
    fn append(
        &mut self,
        view: Arc<StreamView>,
        incarnation: Option<String>,
        req: AppendRequest,
        payload: Bytes,
        now: u64,
        frames: &mut Vec<u8>,
        after: &mut Vec<AfterCommit>,
    ) -> Result<Appended, StoreError> {
        let sealing_behind = self.sealing_behind();
        // One lookup: the stream is looked up once, not once per step (an
        // expired stream is deleted here, as `expire_if_due` would).
        let Some(entry) = self.engine.entries.get_mut(&*view.path) else {
            return Err(StoreError::NotFound);
        };
        if entry.core.soft_deleted {
            return Err(StoreError::SoftDeleted);
        }
        if entry.core.config.is_expired(entry.view.last_access(), now) {
            self.delete(&view.path, now, frames, after);
            return Err(StoreError::NotFound);
        }
        same_incarnation(&entry.view, incarnation)?;
        if sealing_behind {
            return Err(StoreError::SealingBehind);
        }
        entry.view.touch(now);
        let view = if Arc::ptr_eq(&view, &entry.view) {
            view
        } else {
            Arc::clone(&entry.view)
        };
        let decision = entry.core.decide_append(&req, now);
        let outcome = match decision {
            Err(refusal) => {
                return Err(StoreError::Refused {
                    refusal,
                    end: entry.end(),
                })
            }
            Ok(AppendDecision::Duplicate {
                epoch,
                highest_seq,
                receipt,
            }) => AppendOutcome::Duplicate {
                epoch,
                highest_seq,
                receipt,
            },
            Ok(AppendDecision::AlreadyClosed) => AppendOutcome::AlreadyClosed,
            Ok(AppendDecision::Apply(effect)) => {
                let id = entry.core.id;
                let record = Record::Append {
                    id,
                    effect,
                    payload,
                };
                let pos = record::encode(&record, frames);
                let at = LogPos {
                    segment: self.wal.segment(),
                    pos: self.wal.written + pos as u64,
                    batch: self.batches,
                };
                let Record::Append {
                    effect, payload, ..
                } = record
                else {
                    unreachable!("just built")
                };
                let applied = entry.apply(&effect, &payload, at);
                let tail = entry.end();
                let sealed = entry.core.sealed;
                self.note_applied(&view, id, &applied, tail, sealed);
                let start = effect.start;
                // Published with its answer (see `AfterCommit::Appended`).
                return Ok(Appended {
                    outcome: AppendOutcome::Applied { start },
                    end: tail,
                    view,
                });
            }
        };
        let tail = entry.end();
        Ok(Appended {
            outcome,
            end: tail,
            view,
        })
    }

    /// With object durability: commits go to `wal` in the bucket, whose
    /// settled puts wake the writer through `wake`; `fenced` is raised when
    /// a newer owner took the partition.
    pub(super) fn write_to_bucket(
        &mut self,
        wal: Box<dyn crate::region::commit_log::CommitLog>,
        wake: super::writer_pool::CommandTx,
        fenced: Arc<AtomicBool>,
    ) {
        self.object_wal = Some(wal);
        self.wake = Some(wake);
        self.fenced = fenced;
    }

    /// What an applied append leaves to do besides the table: its log
    /// extent pinned, a heavy stream noted, the stream touched for the next
    /// checkpoint, memory counted, complete chunks queued for sealing.
    fn note_applied(
        &mut self,
        view: &Arc<StreamView>,
        id: u64,
        applied: &Applied,
        tail: End,
        sealed: u64,
    ) {
        if let Some(e) = &applied.extent {
            self.engine.pin(e, id);
        }
        if applied.heavy {
            self.heavy.insert(id);
        }
        self.touched.insert(id);
        self.in_memory(view, applied);
        self.queue_seals_of(view, tail.next, tail.closed, sealed);
    }
}

/// 412 when a request names another incarnation than the stream's.
fn same_incarnation(current: &StreamView, named: Option<String>) -> Result<(), StoreError> {
    match named {
        Some(inc) if *inc != *current.incarnation => Err(StoreError::mismatch(current)),
        _ => Ok(()),
    }
}

/// A fresh incarnation token: the stream id and 64 random bits, so a stream
/// created again at the same path never reuses one.
fn new_incarnation(id: u64) -> String {
    format!("{id:x}-{:016x}", rand::random::<u64>())
}
