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

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode};

use super::fence::{self, EpochRule, Replayed, Settled};
use super::format::{self, EpochClaim, Kind, PutId, WalHeader};
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
    #[error("object storage did not let the claim finish within {0:?}")]
    Unreachable(Duration),
    #[error("object storage: {0}")]
    Store(#[from] object_store::Error),
}

/// What a claim found: the owner's WAL and the log records to replay.
pub struct Claimed {
    pub wal: ObjectWal,
    /// Each admitted data object's frames, in order ([`ObjectWal::claim`];
    /// empty from [`ObjectWal::claim_into`], which hands them on).
    pub frames: Vec<Bytes>,
    /// Data objects replayed.
    pub replayed: usize,
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
    stopping: Arc<AtomicBool>,
    metrics: Arc<Metrics>,
}

/// Longest wait between two tries of a put.
const RETRY_MAX: Duration = Duration::from_secs(1);
/// Epoch claims lost to other claimants before a claim gives up.
const CLAIM_TRIES: u32 = 32;
/// A claim that has not finished by then (object storage unreachable)
/// fails the start.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(60);
/// Objects read at once during a replay.
const REPLAY_READS: usize = 16;

impl ObjectWal {
    /// Claims `config.partition` (see `fence`): blocks until this origin is
    /// the owner, with the records of every acknowledged commit.
    pub fn claim(
        store: Arc<dyn ObjectStore>,
        config: &RegionConfig,
        metrics: Arc<Metrics>,
    ) -> Result<Claimed, WalError> {
        let mut frames = Vec::new();
        let mut claimed = Self::claim_into(store, config, metrics, &mut |f| {
            frames.push(f);
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
        replay: &mut (dyn FnMut(Bytes) -> std::io::Result<()> + Send),
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
        let (epoch, next, replayed, fences) =
            claimed.map_err(|_| WalError::Unreachable(CLAIM_TIMEOUT))??;
        tracing::info!(
            partition = config.partition,
            epoch,
            replayed_objects = replayed,
            fences,
            first_number = next,
            "claimed the partition"
        );
        Ok(Claimed {
            wal: ObjectWal {
                store,
                runtime,
                partition: config.partition,
                epoch,
                next,
                stopping,
                metrics,
            },
            frames: Vec::new(),
            replayed,
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

    /// Set to make a put that waits for the store give up ([`WalError::Stopped`]).
    pub fn stopper(&self) -> Arc<AtomicBool> {
        Arc::clone(&self.stopping)
    }

    /// Starts writing one group commit's records at the next number and
    /// returns that number; `settled` hears the outcome, then `wake` runs
    /// (to wake the writer). At most [`fence::WINDOW`] may be in flight:
    /// the caller waits for one to settle before starting more. Commits
    /// are acknowledged in number order, and none after one that failed.
    pub fn start(
        &mut self,
        frames: &[u8],
        settled: std::sync::mpsc::Sender<Settlement>,
        wake: impl FnOnce() + Send + 'static,
    ) -> u64 {
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
            let outcome = put_settled(&*store, &key, body, header, &stopping, Some(&metrics)).await;
            metrics.object_wal_puts.fetch_add(1, Ordering::Relaxed);
            metrics.object_wal_bytes.fetch_add(bytes, Ordering::Relaxed);
            metrics
                .object_wal_put_micros
                .fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
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
            let _ = settled.send(Settlement { number, result });
            wake();
        });
        number
    }

    /// Writes one group commit and waits for it to settle (one in flight).
    pub fn append(&mut self, frames: &[u8]) -> Result<u64, WalError> {
        let (tx, rx) = std::sync::mpsc::channel();
        let number = self.start(frames, tx, || {});
        let settlement = rx.recv().expect("every put settles");
        debug_assert_eq!(settlement.number, number);
        settlement.result.map(|()| number)
    }
}

/// The outcome of one started commit.
#[derive(Debug)]
pub struct Settlement {
    pub number: u64,
    /// `Ok`: the object at `number` is this owner's.
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

/// The claim: an epoch, the fences, the replay. Returns the epoch, the
/// first data number, the data objects replayed and the fences put.
async fn claim(
    store: Arc<dyn ObjectStore>,
    config: RegionConfig,
    stopping: Arc<AtomicBool>,
    replay: &mut (dyn FnMut(Bytes) -> std::io::Result<()> + Send),
) -> Result<(u64, u64, usize, usize), WalError> {
    let p = config.partition;
    let epoch = claim_epoch(&*store, &config, &stopping).await?;
    // The partition's WAL starts at 0 (checkpoints in the bucket will move it).
    let start = 0;
    let found = list_numbers(&*store, &keys::partition_wal(p)).await?;
    let found: Vec<u64> = found.into_iter().filter(|&n| n >= start).collect();
    // A newer claim already listed: fencing now would only stop it
    // (safety does not rest on this look; the replay's check does).
    let newest = list_numbers(&*store, &keys::partition_epochs(p)).await?;
    if let Some(&by) = newest.last().filter(|&&e| e > epoch) {
        return Err(WalError::Fenced {
            partition: p,
            ours: epoch,
            by,
        });
    }
    let plan = fence::plan_claim(start, &found);
    let put_id: PutId = rand::random();
    let header = WalHeader {
        kind: Kind::Fence,
        epoch,
        put_id,
    };
    let body = format::encode_wal(&header, &[]);
    for &n in &plan.fences {
        let key = keys::partition_wal_object(p, n);
        match put_settled(&*store, &key, body.clone(), header, &stopping, None).await? {
            Settled::Ours | Settled::Older { .. } => {}
            Settled::Newer { epoch: by } => {
                return Err(WalError::Fenced {
                    partition: p,
                    ours: epoch,
                    by,
                })
            }
        }
    }
    // Every number below `replay_below` is taken now: what is read is final.
    let reads = futures::stream::iter(start..plan.replay_below)
        .map(|n| {
            let store = Arc::clone(&store);
            async move {
                let key = keys::partition_wal_object(p, n);
                let bytes = store.get(&key).await?.bytes().await?;
                format::decode_wal(&bytes).map_err(|source| WalError::Corrupt {
                    key: key.to_string(),
                    source,
                })
            }
        })
        .buffered(REPLAY_READS);
    futures::pin_mut!(reads);
    let mut rule = EpochRule::default();
    let mut replayed = 0;
    while let Some(object) = reads.next().await {
        let object = object?;
        if rule.replays(&object.header) {
            replay(object.frames).map_err(WalError::Local)?;
            replayed += 1;
        }
    }
    match rule.replayed(epoch) {
        Replayed::Owner => Ok((epoch, plan.first_data, replayed, plan.fences.len())),
        Replayed::Superseded { by } => Err(WalError::Fenced {
            partition: p,
            ours: epoch,
            by,
        }),
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

/// Creates `key` with `body`; when the key is taken (or the outcome of a
/// try is unknown and a later try finds it taken), reads it back and asks
/// `read_back` whether it is this put. Passing failures are tried again
/// until the put settles or `stopping` is set. Returns whether the put is
/// the object at `key` (created now, or found by `read_back`).
async fn create_or_read(
    store: &dyn ObjectStore,
    key: &Path,
    body: Bytes,
    stopping: &AtomicBool,
    metrics: Option<&Metrics>,
    mut read_back: impl FnMut(Bytes) -> Result<bool, WalError>,
) -> Result<bool, WalError> {
    let mut wait = Duration::from_millis(10);
    loop {
        if stopping.load(Ordering::Acquire) {
            return Err(WalError::Stopped);
        }
        let outcome = match store
            .put_opts(key, body.clone().into(), PutMode::Create.into())
            .await
        {
            Ok(_) => return Ok(true),
            // Taken (or, as object_store maps S3's 409, a conditional put
            // racing ours): whose is it?
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => match store.get(key).await {
                Ok(found) => match found.bytes().await {
                    Ok(bytes) => return read_back(bytes),
                    Err(e) => e,
                },
                // A racing put that had not landed: try ours again.
                Err(e @ object_store::Error::NotFound { .. }) => e,
                Err(e) => e,
            },
            Err(e @ object_store::Error::NotImplemented { .. }) => return Err(e.into()),
            Err(e) => e,
        };
        tracing::warn!(key = %key, error = %outcome, "a WAL put did not settle; trying again");
        if let Some(m) = metrics {
            m.object_wal_retries.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RETRY_MAX);
    }
}

/// The numbers of the numbered keys under `prefix`, sorted.
async fn list_numbers(store: &dyn ObjectStore, prefix: &Path) -> Result<Vec<u64>, WalError> {
    let mut numbers = Vec::new();
    let mut listing = store.list(Some(prefix));
    while let Some(meta) = listing.next().await {
        if let Some(n) = keys::numbered(&meta?.location) {
            numbers.push(n);
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}
