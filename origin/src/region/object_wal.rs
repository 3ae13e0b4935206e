//! The I/O shell around `fence`: a partition's WAL in object storage.
//!
//! [`ObjectWal::claim_into`] makes this origin the partition's owner (a new
//! epoch, the fences, the replay, handed on commit by commit) and
//! [`ObjectWal::start`] begins one group commit's put, reporting once it is
//! settled: in the bucket (ours), or fenced. The writer keeps up to
//! `fence::WINDOW` of them in flight and answers them in order
//! (`store::writer::object_commit`). A put that fails for a passing reason
//! (a timeout, a 5xx, a connection refused) is tried again with the same
//! bytes and put id until it settles, so an outage delays acknowledgements
//! and never makes one. [`ObjectWal::claim`] and [`ObjectWal::append`] are
//! the same one step at a time, for tests and tools.
//!
//! The claim blocks the calling thread. Everything runs on a small runtime
//! of its own, so a caller inside another runtime (the origin's startup)
//! never blocks that runtime's I/O.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use object_store::path::Path;
use object_store::ObjectStore;

use super::bucket::{
    again, create_or_read, list_numbers, newer_epoch, newest_checkpoint, newest_checkpoint_number,
    read_image, read_wal,
};
use super::fence::{self, EpochRule, Replayed, Settled};
use super::format::{self, EpochClaim, Kind, WalHeader};
use super::vouch::{Unvouched, Vouch, VouchFor};
use crate::metrics::Metrics;
use crate::objects::keys;

/// Who this origin is in its region.
#[derive(Clone, Debug)]
pub struct RegionConfig {
    /// A name unique among the region's origins (`--node-id`).
    pub node: String,
    /// Where the others reach it (`--advertise-url`).
    pub url: String,
    /// The partition this store owns.
    pub partition: u32,
    /// The region's partition count (`--region-partitions`), fixed for
    /// the bucket's life.
    pub partitions: u32,
    /// When its owner writes checkpoints into the bucket.
    pub checkpoint: super::checkpoint::CheckpointConfig,
    /// The most bytes a fork across partitions copies from its source
    /// (`--region-fork-copy-max`): a larger prefix is refused with `409
    /// FORK_ACROSS_PARTITIONS` and nothing is made (`region::across`).
    pub fork_copy_max: u64,
    /// How old a pin or copy of a fork across partitions must be before
    /// its owner asks whether its other end exists (`--region-pin-grace`):
    /// longer than any fork's making takes.
    pub pin_grace: Duration,
    /// Forks across partitions one origin makes at once
    /// (`--region-fork-copies`); one more answers 503 + `Retry-After`. Each
    /// holds one piece of its source (one read's answer) in memory.
    pub fork_copies: usize,
    /// The partition's invalidation feed's name, the same for every owner
    /// (its events are then logged: `store::invalidations`); None: a name
    /// of this store's own, events not logged.
    pub feed: Option<String>,
    /// One WAL per origin (`--region-wal origin`, decision 0028) rather
    /// than one per partition.
    pub one_wal: bool,
    /// `--region-wal auto`: the layout is the bucket's, read before the
    /// origin joins (`one_wal` is ignored).
    pub wal_auto: bool,
    /// With one WAL per origin, the log this origin's partitions share (set
    /// by the claim); None: each partition writes a WAL of its own.
    pub origin_wal: Option<super::origin_wal::SharedLog>,
    /// This store is a follower's replica of the partition (decision
    /// 0018): its local log was laid out from the bucket without a claim,
    /// it takes the owner's commits as they land (`Store::replicate`), and
    /// it writes nothing to the bucket (no claim, no seals, no GC).
    pub replica: bool,
    /// Whether a follower keeps a replica of the partitions it follows and
    /// answers `consistency=local` catch-up reads from it
    /// (`--region-replicas`); false: every request is forwarded.
    pub replicas: bool,
    /// How often a replica looks for the owner's new commits
    /// (`--region-replica-interval`): its lag behind the owner is about
    /// this plus a read.
    pub replica_interval: Duration,
    /// Bytes of log objects a follower keeps for its replicas' rounds to
    /// share (one WAL per origin: `origin_wal::SharedReads`); past it the
    /// least used go first, and a round reads them from the bucket again.
    pub replica_shared_bytes: u64,
    /// Streams a follower remembers having forwarded a write of
    /// (`--region-replica-written`), whose reads it forwards until its
    /// replica has caught up (read your writes through one origin); past
    /// it the oldest is forgotten first.
    pub replica_written: usize,
    /// How long a follower waits for its replica to reach a read's
    /// `min_next_offset` (`--region-replica-floor-wait`, decision 0025);
    /// past it the read is forwarded to the owner, which has the write.
    pub replica_floor_wait: Duration,
    /// Reads with a floor waiting for a replica at once
    /// (`--region-replica-floor-waiting`); past it one is forwarded to the
    /// owner at once.
    pub replica_floor_waiting: usize,
    /// Requests this origin forwards to owners at once
    /// (`--region-forwards`), each holding a connection to the owner until
    /// its answer ends; one more answers 503 + `Retry-After`.
    pub forwards: usize,
}

/// Why a WAL operation did not succeed.
#[derive(Debug, thiserror::Error)]
pub enum WalError {
    /// A newer owner holds the partition: nothing more may be acknowledged.
    #[error("partition {partition} was taken over by epoch {by} (this owner had {ours})")]
    Fenced { partition: u32, ours: u64, by: u64 },
    /// The store is stopping; the commit is not acknowledged.
    #[error("stopping")]
    Stopped,
    /// Something in the bucket is not what the protocol writes.
    #[error("object {key} is not a WAL object of this protocol: {source}")]
    Corrupt {
        key: String,
        source: format::FormatError,
    },
    /// Claims kept losing to other claimants.
    #[error("could not claim an epoch after {0} tries")]
    Contended(u32),
    /// Laying the replay out on the local disk failed.
    #[error("laying out the replay locally: {0}")]
    Local(std::io::Error),
    /// A newer checkpoint moved the partition's start while this read it
    /// (what was read may be gone, or a fence where it was): read again.
    #[error("a newer checkpoint moved the partition's start")]
    Moved,
    /// This origin's log met a fence at `number` (a takeover of one of
    /// its partitions; decision 0028): nothing more is acknowledged, for
    /// any partition the log serves.
    #[error("this origin's log was fenced at number {number}: another origin took over")]
    LogFenced { number: u64 },
    /// The partition has no tenure in this origin's log (never claimed,
    /// released, or claimed already).
    #[error("partition {partition} is not served by this origin's log")]
    NotServing { partition: u32 },
    /// Another origin made the partition's next tenure first.
    #[error("another origin made tenure {tenure} of partition {partition} first")]
    Taken { partition: u32, tenure: u64 },
    #[error("object storage did not let the claim finish within {0:?}")]
    Unreachable(Duration),
    #[error("object storage: {0}")]
    Store(#[from] object_store::Error),
}

/// What a claim hands on as it replays, in order.
pub enum Replay {
    /// (Again) from the start: what was handed on before is void (a newer
    /// checkpoint moved the partition's start meanwhile).
    Begin,
    /// One commit's frames (or one part of a checkpoint's image).
    Frames(Bytes),
}

/// What a claim found: the owner's WAL and the log records to replay.
pub struct Claimed {
    pub wal: ObjectWal,
    /// Each admitted data object's frames, in order ([`ObjectWal::claim`];
    /// empty from [`ObjectWal::claim_into`], which hands them on).
    pub frames: Vec<Bytes>,
    /// Data objects replayed (image parts included).
    pub replayed: usize,
    /// The checkpoint the replay started from, if any.
    pub base: Option<u64>,
    /// Fences the claim put (holes and the window).
    pub fences: usize,
}

/// A partition's WAL as its owner writes it.
pub struct ObjectWal {
    store: Arc<dyn ObjectStore>,
    runtime: OwnRuntime,
    partition: u32,
    epoch: u64,
    next: u64,
    /// Every number below it is acknowledged (or was replayed by the
    /// claim): a checkpoint may be built up to it (`region::checkpoint`).
    acknowledged: Arc<AtomicU64>,
    stopping: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
    /// Answers without a put of their own wait for its rounds.
    vouch: Arc<Vouch>,
    /// Checks started (each one's ticket).
    checks: u64,
}

/// Longest wait between two tries of a put.
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(1);
/// Epoch claims lost to other claimants before a claim gives up.
pub(crate) const CLAIM_TRIES: u32 = 32;
/// A claim that has not finished by then (object storage unreachable)
/// fails the start.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(60);
/// Objects read at once during a replay.
pub(crate) const REPLAY_READS: usize = 16;

impl ObjectWal {
    /// Claims `config.partition` (see `fence`): blocks until this origin is
    /// the owner, with the records of every acknowledged commit.
    pub fn claim(
        store: Arc<dyn ObjectStore>,
        config: &RegionConfig,
        metrics: Arc<Metrics>,
    ) -> Result<Claimed, WalError> {
        let mut frames = Vec::new();
        let mut claimed = Self::claim_into(store, config, metrics, &mut |r| {
            match r {
                Replay::Begin => frames.clear(),
                Replay::Frames(f) => frames.push(f),
            }
            Ok(())
        })?;
        claimed.frames = frames;
        Ok(claimed)
    }

    /// [`ObjectWal::claim`], handing each replayed commit's frames to
    /// `replay` in order as they are read (a failure there fails the claim).
    pub fn claim_into(
        store: Arc<dyn ObjectStore>,
        config: &RegionConfig,
        metrics: Arc<Metrics>,
        replay: &mut (dyn FnMut(Replay) -> std::io::Result<()> + Send),
    ) -> Result<Claimed, WalError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("object-wal")
            .enable_all()
            .build()
            .map_err(|e| {
                WalError::Store(object_store::Error::Generic {
                    store: "runtime",
                    source: Box::new(e),
                })
            })?;
        // Dropped on every way out, a failed claim's inside the caller's
        // runtime included.
        let runtime = OwnRuntime(Some(runtime));
        let stopping = Arc::new(AtomicBool::new(false));
        let work = {
            let (store, config, stopping) =
                (Arc::clone(&store), config.clone(), Arc::clone(&stopping));
            async move {
                tokio::time::timeout(CLAIM_TIMEOUT, claim(store, config, stopping, replay)).await
            }
        };
        // On a thread of its own: the caller may be inside a runtime.
        let claimed = std::thread::scope(|s| {
            s.spawn(|| runtime.get().block_on(work))
                .join()
                .expect("the claim does not panic")
        });
        let Claim {
            epoch,
            next,
            replayed,
            fences,
            base,
        } = claimed.map_err(|_| WalError::Unreachable(CLAIM_TIMEOUT))??;
        tracing::info!(
            partition = config.partition,
            epoch,
            checkpoint = base,
            replayed_objects = replayed,
            fences,
            first_number = next,
            "claimed the partition"
        );
        let vouch = Vouch::new(VouchFor {
            store: Arc::clone(&store),
            superseded_by: keys::partition_epoch(config.partition, epoch + 1),
            stopping: Arc::clone(&stopping),
            runtime: runtime.get().handle().clone(),
            metrics: Arc::clone(&metrics),
        });
        Ok(Claimed {
            wal: ObjectWal {
                store,
                runtime,
                partition: config.partition,
                epoch,
                next,
                acknowledged: Arc::new(AtomicU64::new(next)),
                stopping,
                metrics,
                vouch,
                checks: 0,
            },
            frames: Vec::new(),
            replayed,
            base,
            fences,
        })
    }

    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The number the next commit goes to.
    pub fn next_number(&self) -> u64 {
        self.next
    }

    /// Every number below what this holds is acknowledged (the writer
    /// raises it as it answers, in order).
    pub fn acknowledged(&self) -> Arc<AtomicU64> {
        Arc::clone(&self.acknowledged)
    }

    /// The writer answered the commit at `number` (and all before it).
    pub fn note_acknowledged(&self, number: u64) {
        self.acknowledged.fetch_max(number + 1, Ordering::Release);
    }

    /// What answers without a put of their own wait for (`vouch`).
    pub fn vouch(&self) -> Arc<Vouch> {
        Arc::clone(&self.vouch)
    }

    /// Starts a round of [`Vouch`] for a batch that answers without log
    /// records (refusals, duplicates); `settled` hears whether it may be
    /// answered (`Fenced` when a newer epoch exists), then `wake` runs.
    pub fn start_check(
        &mut self,
        settled: std::sync::mpsc::Sender<Settlement>,
        wake: impl FnOnce() + Send + 'static,
    ) -> Ticket {
        self.checks += 1;
        let ticket = Ticket::Check(self.checks);
        let (vouch, partition, epoch) = (Arc::clone(&self.vouch), self.partition, self.epoch);
        self.runtime.get().spawn(async move {
            let result = match vouch.confirm().await {
                Ok(()) => Ok(()),
                Err(Unvouched::Superseded) => Err(WalError::Fenced {
                    partition,
                    ours: epoch,
                    by: epoch + 1,
                }),
                Err(Unvouched::Gone) => Err(WalError::Stopped),
            };
            let _ = settled.send(Settlement { ticket, result });
            wake();
        });
        ticket
    }

    /// Set to make a put that waits for the store give up ([`WalError::Stopped`]).
    pub fn stopper(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stopping)
    }

    /// Starts writing one group commit's records at the next number and
    /// returns its ticket; `settled` hears the outcome, then `wake` runs
    /// (to wake the writer). At most [`fence::WINDOW`] may be in flight:
    /// the caller waits for one to settle before starting more. Commits
    /// are acknowledged in number order, and none after one that failed.
    pub fn start(
        &mut self,
        frames: &[u8],
        settled: std::sync::mpsc::Sender<Settlement>,
        wake: impl FnOnce() + Send + 'static,
    ) -> Ticket {
        let number = self.next;
        self.next += 1;
        let header = WalHeader {
            kind: Kind::Data,
            epoch: self.epoch,
            put_id: rand::random(),
        };
        let body = format::encode_wal(&header, frames);
        let bytes = frames.len() as u64;
        let (store, stopping, metrics) = (
            Arc::clone(&self.store),
            Arc::clone(&self.stopping),
            Arc::clone(&self.metrics),
        );
        let partition = self.partition;
        self.runtime.get().spawn(async move {
            let key = keys::partition_wal_object(partition, number);
            let started = Instant::now();
            let mut outcome =
                put_settled(&*store, &key, body, header, &stopping, Some(&metrics)).await;
            if let Ok(Settled::Ours) = outcome {
                outcome = still_ours(&*store, partition, header.epoch, number, &stopping).await;
            }
            metrics.object_wal_puts.fetch_add(1, Ordering::Relaxed);
            metrics.object_wal_bytes.fetch_add(bytes, Ordering::Relaxed);
            let outcome_name = match &outcome {
                Ok(Settled::Ours) => "ok",
                Ok(_) => "fenced",
                Err(_) => "error",
            };
            metrics
                .timings
                .object_request("wal_put", outcome_name, started.elapsed());
            let result = match outcome {
                Ok(Settled::Ours) => Ok(()),
                // An older owner's object at a number of ours: a claim with
                // an older epoch that listed after ours closed it; stop
                // rather than acknowledge past a number we do not hold.
                Ok(Settled::Newer { epoch: by } | Settled::Older { epoch: by }) => {
                    metrics.object_wal_fenced.store(1, Ordering::Relaxed);
                    Err(WalError::Fenced {
                        partition,
                        ours: header.epoch,
                        by,
                    })
                }
                Err(e) => Err(e),
            };
            let _ = settled.send(Settlement {
                ticket: Ticket::Put(number),
                result,
            });
            wake();
        });
        Ticket::Put(number)
    }

    /// Writes one group commit and waits for it to settle (one in flight).
    pub fn append(&mut self, frames: &[u8]) -> Result<u64, WalError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let ticket = self.start(frames, tx, || {});
        let settlement = rx.recv().expect("every put settles");
        debug_assert_eq!(settlement.ticket, ticket);
        let Ticket::Put(number) = ticket else {
            unreachable!("a put's ticket")
        };
        settlement.result.map(|()| number)
    }
}

/// What one started put or check settles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ticket {
    /// The put of a commit at this WAL number.
    Put(u64),
    /// The n-th check of a batch without records (`start_check`).
    Check(u64),
}

/// The outcome of one started commit or check.
#[derive(Debug)]
pub struct Settlement {
    pub ticket: Ticket,
    /// `Ok`: the object at the put's number is this owner's; a check's
    /// batch may be answered.
    pub result: Result<(), WalError>,
}

/// The WAL's own runtime, which may be dropped anywhere (inside another
/// runtime too, as when a claim fails during the origin's start): it
/// shuts down in the background rather than block.
struct OwnRuntime(Option<tokio::runtime::Runtime>);

impl OwnRuntime {
    fn get(&self) -> &tokio::runtime::Runtime {
        self.0.as_ref().expect("taken only when dropped")
    }
}

impl Drop for OwnRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.0.take() {
            rt.shutdown_background();
        }
    }
}

/// What a claim did.
struct Claim {
    epoch: u64,
    /// The first data number.
    next: u64,
    replayed: usize,
    fences: usize,
    base: Option<u64>,
}

/// The claim: an epoch, then from the newest checkpoint the fences and
/// the replay, and a last look at the checkpoints (see `fence`); a newer
/// checkpoint found on the way starts it over from that one.
async fn claim(
    store: Arc<dyn ObjectStore>,
    config: RegionConfig,
    stopping: Arc<AtomicBool>,
    replay: &mut (dyn FnMut(Replay) -> std::io::Result<()> + Send),
) -> Result<Claim, WalError> {
    let p = config.partition;
    let epoch = claim_epoch(&*store, &config, &stopping).await?;
    let fenced = |by| WalError::Fenced {
        partition: p,
        ours: epoch,
        by,
    };
    let mut fences = 0;
    let (wal, epochs) = (keys::partition_wal(p), keys::partition_epochs(p));
    for _ in 0..CLAIM_TRIES {
        let base = again(&stopping, || newest_checkpoint(&*store, p)).await?;
        let start = base.as_ref().map_or(0, |b| b.number);
        let found = again(&stopping, || list_numbers(&*store, &wal)).await?;
        let found: Vec<u64> = found.into_iter().filter(|&n| n >= start).collect();
        // A newer claim already listed: fencing now would only stop it
        // (safety does not rest on this look; the replay's check does).
        let newest = again(&stopping, || list_numbers(&*store, &epochs)).await?;
        if let Some(&by) = newest.last().filter(|&&e| e > epoch) {
            return Err(fenced(by));
        }
        // A checkpoint since the listing: what it found missing may be
        // deleted, not free (only saves fences; the last look decides).
        let now_newest = again(&stopping, || newest_checkpoint_number(&*store, p)).await?;
        if now_newest != base.as_ref().map(|b| b.number) {
            continue;
        }
        let plan = fence::plan_claim(start, &found);
        let header = WalHeader {
            kind: Kind::Fence,
            epoch,
            put_id: rand::random(),
        };
        let body = format::encode_wal(&header, &[]);
        for &n in &plan.fences {
            let key = keys::partition_wal_object(p, n);
            match put_settled(&*store, &key, body.clone(), header, &stopping, None).await? {
                Settled::Ours | Settled::Older { .. } => {}
                Settled::Newer { epoch: by } => return Err(fenced(by)),
            }
        }
        fences += plan.fences.len();
        // Every number from `start` below `replay_below` is taken now:
        // what is read is final, unless a newer checkpoint deleted it.
        replay(Replay::Begin).map_err(WalError::Local)?;
        let mut rule = EpochRule::after(base.as_ref().map_or(0, |b| b.epoch));
        let mut replayed = 0;
        let read = async {
            if let Some(b) = &base {
                replayed += read_image(&*store, p, b, &mut *replay).await?;
            }
            replayed += read_wal(
                &*store,
                p,
                start..plan.replay_below,
                &mut rule,
                &mut *replay,
            )
            .await?;
            Ok::<_, WalError>(())
        };
        match read.await {
            Ok(()) => {}
            Err(WalError::Moved) => continue,
            // A passing failure of the bucket: read again from the start.
            Err(WalError::Store(e)) => {
                tracing::warn!(error = %e, "a claim's read of the bucket failed; reading again");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            Err(e) => return Err(e),
        }
        let now_newest = again(&stopping, || newest_checkpoint_number(&*store, p)).await?;
        if now_newest != base.as_ref().map(|b| b.number) {
            // What was read may be a fence on a deleted number.
            continue;
        }
        return match rule.replayed(epoch) {
            Replayed::Owner => Ok(Claim {
                epoch,
                next: plan.first_data,
                replayed,
                fences,
                base: base.map(|b| b.number),
            }),
            Replayed::Superseded { by } => Err(fenced(by)),
        };
    }
    Err(WalError::Contended(CLAIM_TRIES))
}

/// Whether the put that landed at `number` for the owner at `epoch` is its
/// own to acknowledge. A number below a checkpoint may have been deleted,
/// and a put can land on a deleted number as on a free one: the landing is
/// ours only if, looked at after it, no epoch after ours exists (a build
/// deletes only while its owner's epoch is the newest), or no checkpoint
/// above `number` does (none deleted it before it landed). See `fence`.
async fn still_ours(
    store: &dyn ObjectStore,
    p: u32,
    epoch: u64,
    number: u64,
    stopping: &AtomicBool,
) -> Result<Settled, WalError> {
    if !newer_epoch(store, p, epoch, stopping).await? {
        return Ok(Settled::Ours);
    }
    match again(stopping, || newest_checkpoint_number(store, p)).await? {
        Some(start) if start > number => Ok(Settled::Newer { epoch: epoch + 1 }),
        _ => Ok(Settled::Ours),
    }
}

/// A new epoch, by a create of the next epoch's claim object.
async fn claim_epoch(
    store: &dyn ObjectStore,
    config: &RegionConfig,
    stopping: &AtomicBool,
) -> Result<u64, WalError> {
    let prefix = keys::partition_epochs(config.partition);
    for _ in 0..CLAIM_TRIES {
        let claimed = list_numbers(store, &prefix).await?;
        let epoch = fence::next_epoch(&claimed);
        let claim = EpochClaim {
            epoch,
            put_id: rand::random(),
            node: config.node.clone(),
            url: config.url.clone(),
        };
        let key = keys::partition_epoch(config.partition, epoch);
        let body = format::encode_claim(&claim);
        let read_back = |bytes: Bytes| {
            format::decode_claim(&bytes)
                .map(|found| found.put_id == claim.put_id)
                .map_err(|source| WalError::Corrupt {
                    key: key.to_string(),
                    source,
                })
        };
        if create_or_read(store, &key, body, stopping, None, read_back).await? {
            return Ok(epoch);
        }
        // Another claimant took that epoch: take the next.
    }
    Err(WalError::Contended(CLAIM_TRIES))
}

/// Puts a WAL object by create and settles the outcome by reading back.
async fn put_settled(
    store: &dyn ObjectStore,
    key: &Path,
    body: Bytes,
    header: WalHeader,
    stopping: &AtomicBool,
    metrics: Option<&Metrics>,
) -> Result<Settled, WalError> {
    let mut settled = Settled::Ours;
    let read_back = |bytes: Bytes| {
        let found = format::decode_wal(&bytes).map_err(|source| WalError::Corrupt {
            key: key.to_string(),
            source,
        })?;
        settled = fence::settle(header.epoch, header.put_id, &found.header);
        Ok(settled == Settled::Ours)
    };
    create_or_read(store, key, body, stopping, metrics, read_back).await?;
    Ok(settled)
}
