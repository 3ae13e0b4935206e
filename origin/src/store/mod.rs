//! Durable storage of streams on local disk.
//!
//! One write-ahead log for all streams gives every append the same durability
//! and lets concurrent appends share one sync (group commit). The log is also
//! where a small stream's bytes stay; a stream that outgrows it gets a file
//! of its own. Checkpoints, written incrementally, let recovery replay only
//! the newest log. See `docs/decisions/0002-local-log.md` and
//! `docs/decisions/0008-stream-layout.md`.
//!
//! - [`writer`]: the single thread that changes streams (the I/O shell around
//!   the pure core); [`scheduling`]: how it asks to run promptly;
//!   [`publisher`]: how its durable batches reach the runtime.
//! - [`record`], [`checkpoint`]: the two persisted formats.
//! - [`recovery`]: startup from checkpoint and log.
//! - `lookup`: a stream by its path, or streams in path order;
//!   [`view`]: what readers see; [`warm`]: where a stream's unsealed bytes
//!   are (its own file, log extents, memory); [`segments`], [`files`]: the
//!   log segments and stream files they are read from, with bounded handles.
//! - [`invalidations`]: the feed of deletes, creates, retention and replaced snapshots for edges.
//! - [`sealer`]: copies complete chunks into object storage; [`cold`]: reads
//!   them back through a bounded cache once their local copy is dropped.

/// The maps every append looks up (streams by path, dirty streams by id):
/// foldhash, seeded per process like std's `RandomState` (so crafted paths
/// cannot aim at collisions), costs a tenth of SipHash per lookup.
pub type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

pub(crate) mod checkpoint;
pub(crate) mod chunk_cache;
mod claim;
pub(crate) mod end_watch;
pub(crate) mod engine;
pub(crate) mod error;
pub(crate) mod files;
pub(crate) mod image;
pub(crate) mod invalidations;
pub(crate) mod janitor;
pub(crate) mod layout;
mod lookup;
mod ownership;
pub(crate) mod promoter;
pub(crate) mod publisher;
pub mod record;
pub(crate) mod recovery;
pub(crate) mod saved;
pub(crate) mod scheduling;
pub(crate) mod sealer;
pub(crate) mod segments;
pub(crate) mod view;
pub(crate) mod wal;
pub(crate) mod warm;
pub mod writer;
pub mod writer_pool;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{mpsc, oneshot};

use crate::clock::Clock;
use crate::core::config::StreamConfig;
use crate::core::fork::ForkRequest;

/// A fork as the request handler resolved it against its source.
pub struct ForkPlan {
    pub request: ForkRequest,
    /// None when the source was not there (a second `PUT` of an existing
    /// fork still matches without it).
    pub resolved: Option<ResolvedFork>,
}

pub struct ResolvedFork {
    /// The source as the handler found it (the writer checks it is still
    /// the stream at its path).
    pub source: Arc<StreamView>,
    pub anchor: u64,
    /// Where the inherited prefix ends.
    pub at: u64,
    pub config: StreamConfig,
}
use crate::core::snapshot::SnapshotMeta;
use crate::core::stream::AppendRequest;
use crate::metrics::Metrics;
pub use error::StoreError;
pub use files::is_out_of_descriptors;
use publisher::Publisher;
pub use recovery::RecoveryReport;
pub use view::{End, ReadError, StreamView};
pub use writer::{AppendOutcome, Appended, Created};
use writer::{Command, Registry, Writer};

#[derive(Clone, Debug)]
pub struct StoreConfig {
    pub data: PathBuf,
    /// Commands waiting for the writer; senders wait when it is full.
    pub queue_commands: usize,
    /// A batch closes at this many commands...
    pub max_batch_commands: usize,
    /// ...or this many bytes of log.
    pub max_batch_bytes: usize,
    /// Checkpoint when the open WAL segment reaches this size...
    pub checkpoint_bytes: u64,
    /// ...or this much time passed with anything logged.
    pub checkpoint_interval: Duration,
    /// Hot-tail bytes buffered in memory for all streams together before
    /// they are all written to their files.
    pub buffered_bytes_limit: u64,
    pub durability: Durability,
    /// How long the writer waits to gather a batch when the last batch had
    /// at least `commit_siblings` commands (0: never wait).
    pub commit_delay: Duration,
    pub commit_siblings: usize,
    /// Threads this store's writer shares with other partitions' writers
    /// (one WAL per origin: `writer_pool`); none: a thread of its own.
    pub writers: Option<Arc<writer_pool::WriterPool>>,
    /// Object storage for sealed chunks and snapshots (`file:///…`,
    /// `s3://…`); [`StoreConfig::new`] picks the folder `objects` in the
    /// data directory. None: nothing is sealed (the log keeps everything).
    pub object_store: Option<String>,
    /// S3 settings that win over the environment (see `objects::open_with`).
    pub object_store_settings: Vec<(String, String)>,
    /// Bytes of sealed chunks cached in memory for reads.
    pub chunk_cache_bytes: u64,
    /// Complete chunks not yet sealed (object storage down or slow), in
    /// bytes, past which appends answer 503 until sealing catches up.
    pub max_unsealed_bytes: u64,
    /// Longest wait between two tries of a failed upload.
    pub seal_retry_max: Duration,
    /// How long garbage in object storage waits before it is deleted, so
    /// that reads which started before it became garbage finish.
    pub gc_grace: Duration,
    /// Streams' own files kept open at most (see `files`); 0 picks a
    /// quarter of the descriptor limit found at start (64 to 4,096).
    pub open_files: usize,
    /// Log segments older than the last checkpoint that small streams'
    /// bytes keep on disk, in bytes, before the oldest is cleaned (its
    /// streams promoted into their own files; see `writer::cleaning`).
    pub log_retain_bytes: u64,
    /// Log extents of all streams together (24 B each) past which streams
    /// with 16 or more are promoted into their own files (see `warm`).
    pub max_log_extents: u64,
    /// Forks in a chain at most (a fork of a fork of …): a read of the
    /// newest walks the chain, so past it a fork answers 400.
    pub max_fork_depth: usize,
    /// Who this origin is in its region (`Durability::Object`; defaults
    /// otherwise unused).
    pub region: crate::region::RegionConfig,
    /// How long a write waits for its commit to settle in object storage
    /// (`Durability::Object`) before it answers 503 + `Retry-After`; the
    /// commit may still land (an answer that is no acknowledgement).
    pub object_write_timeout: Duration,
    /// Object durability: a wait before every WAL put (benchmarks only:
    /// object storage farther away; see `objects::faults`).
    pub object_put_delay: Duration,
}

/// When an append is acknowledged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Durability {
    /// After its batch is synced to disk (`fdatasync`): survives power loss.
    Sync,
    /// After its batch is written to the OS: survives a crash of the process
    /// (the kernel keeps the page cache), not a crash of the machine. For
    /// comparisons with in-memory servers and for tests.
    Async,
    /// After its batch is an object in object storage, written by a
    /// create-only put (see `region`): survives the loss of the machine and
    /// its disk. The local log is a cache, rebuilt from the bucket at start.
    Object,
}

impl StoreConfig {
    pub fn new(data: PathBuf) -> Self {
        let absolute = std::path::absolute(&data).unwrap_or_else(|_| data.clone());
        let objects = format!("file://{}", absolute.join("objects").display());
        StoreConfig {
            data,
            queue_commands: 16 * 1024,
            max_batch_commands: 4096,
            max_batch_bytes: 32 * 1024 * 1024,
            checkpoint_bytes: 64 * 1024 * 1024,
            checkpoint_interval: Duration::from_secs(60),
            buffered_bytes_limit: 64 * 1024 * 1024,
            durability: Durability::Sync,
            commit_delay: Duration::from_millis(1),
            commit_siblings: 8,
            writers: None,
            object_store: Some(objects),
            object_store_settings: Vec::new(),
            chunk_cache_bytes: 256 * 1024 * 1024,
            max_unsealed_bytes: 1024 * 1024 * 1024,
            seal_retry_max: Duration::from_secs(5),
            gc_grace: Duration::from_secs(60),
            open_files: 0,
            log_retain_bytes: 1024 * 1024 * 1024,
            max_log_extents: 2_000_000,
            max_fork_depth: 32,
            region: crate::region::RegionConfig {
                node: "origin".into(),
                url: String::new(),
                partition: 0,
                partitions: 1,
                checkpoint: Default::default(),
                fork_copy_max: 256 * 1024 * 1024,
                pin_grace: Duration::from_secs(60),
                fork_copies: 8,
                replica: false,
                replicas: true,
                replica_interval: Duration::from_millis(250),
                replica_shared_bytes: 64 << 20,
                replica_written: 65_536,
                replica_floor_wait: Duration::from_millis(500),
                forwards: 16_384,
                replica_floor_waiting: 4_096,
                feed: None,
                one_wal: false,
                wal_auto: false,
                origin_wal: None,
            },
            object_write_timeout: Duration::from_secs(10),
            object_put_delay: Duration::ZERO,
        }
    }

    /// The cap on open stream files: as configured, or from the limit.
    pub fn open_files_cap(&self) -> usize {
        if self.open_files > 0 {
            return self.open_files;
        }
        // With the connection cap (half the limit), three quarters at most:
        // the rest is the log, checkpoints, the listener and reads in flight.
        (descriptor_limit() / 4).clamp(16, 4096) as usize
    }
}

/// The soft limit on open descriptors (RLIMIT_NOFILE).
pub use shell::descriptors::limit as descriptor_limit;

/// The handle request handlers use. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    tx: writer_pool::CommandTx,
    registry: Registry,
    /// Every stream in path order (see `publisher::Ordered`).
    ordered: publisher::Ordered,
    clock: Arc<dyn Clock>,
    writer: Arc<Mutex<Option<writer_pool::Ended>>>,
    objects: Option<crate::objects::instrumented::Objects>,
    data: PathBuf,
    publisher: Arc<Publisher>,
    invalidations: Arc<invalidations::Invalidations>,
    /// With object durability: how long a write waits, and what makes a
    /// waiting WAL put give up at shutdown.
    object_wal: Option<(Duration, Arc<std::sync::atomic::AtomicBool>)>,
    /// Set once a newer owner fenced this store's partition.
    fenced: Arc<std::sync::atomic::AtomicBool>,
    /// With object durability: the epoch this store claimed its partition at.
    epoch: Option<u64>,
    /// With object durability: every WAL number below it is acknowledged.
    acknowledged: Option<Arc<std::sync::atomic::AtomicU64>>,
    /// With object durability: what answers from state alone wait for.
    vouch: Option<Arc<crate::region::vouch::Vouch>>,
}

/// The data directory, made if missing: it holds every stream's bytes and
/// the keys, its owner's alone whatever mode it was made with. Staged
/// snapshot parts of an earlier run are dropped.
fn prepare_data(data: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(data)?;
    std::fs::set_permissions(data, std::fs::Permissions::from_mode(0o700))?;
    let _ = std::fs::remove_dir_all(data.join("staging"));
    Ok(())
}

/// Recovers the data directory's streams, with their files, log segments
/// and (with object storage) the chunk cache that reads sealed chunks back.
fn recover_disk(
    config: &StoreConfig,
    now: u64,
    objects: Option<&crate::objects::instrumented::Objects>,
    metrics: &Arc<Metrics>,
) -> std::io::Result<recovery::Recovered> {
    let chunk_cache = objects.map(|o| {
        Arc::new(chunk_cache::ChunkCache::new(
            o.clone(),
            config.chunk_cache_bytes,
            Arc::clone(metrics),
        ))
    });
    let files_cap = config.open_files_cap();
    tracing::info!(
        descriptor_limit = descriptor_limit(),
        open_stream_files = files_cap,
        "stream files open at most"
    );
    recovery::recover(&config.data, now, |segments| {
        Ok(view::Disk {
            files: files::StreamFiles::new(&config.data, files_cap),
            segments: segments::Segments::open_all(&config.data, segments)?,
            chunk_cache,
        })
    })
}

/// Starts the promoter's thread (small streams' bytes moved into files of
/// their own); where the writer sends it work.
fn start_promoter(
    writer: writer_pool::CommandTx,
) -> std::io::Result<std::sync::mpsc::Sender<promoter::Job>> {
    let (promotions, jobs) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("promoter".into())
        .spawn(move || promoter::run(jobs, writer))?;
    Ok(promotions)
}

/// The invalidation feed the recovered table goes on with: in a region,
/// the partition's, logged, from the events the log held.
fn feed_of(config: &StoreConfig, engine: &mut engine::Engine) -> invalidations::Invalidations {
    match &config.region.feed {
        Some(name) => invalidations::Invalidations::logged(
            name.clone(),
            engine.feed_next,
            std::mem::take(&mut engine.feed),
        ),
        None => invalidations::Invalidations::default(),
    }
}

/// The object store of `config`, its requests timed, if it has one.
fn open_objects(
    config: &StoreConfig,
    metrics: &Metrics,
) -> std::io::Result<Option<crate::objects::instrumented::Objects>> {
    let Some(url) = &config.object_store else {
        return Ok(None);
    };
    let settings: Vec<(&str, &str)> = config
        .object_store_settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let store = crate::objects::open_with(url, &settings).map_err(std::io::Error::other)?;
    Ok(Some(
        crate::objects::instrumented::Objects::new(store).timed(Arc::clone(&metrics.timings)),
    ))
}

/// A claim's log was laid out from checked objects: a frame recovery
/// cannot read is a bug or a version skew, never a torn write, and cutting
/// it would drop what the bucket acknowledged.
fn check_replayed(config: &StoreConfig, report: &RecoveryReport) -> std::io::Result<()> {
    if config.durability == Durability::Object && report.torn_bytes_dropped > 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "the log replayed from the bucket ends in {} bytes recovery could not read",
                report.torn_bytes_dropped
            ),
        ));
    }
    Ok(())
}

/// Removes, on a thread of its own, the files of streams the recovered
/// table no longer has.
fn sweep_files(data: &std::path::Path, engine: &engine::Engine) -> std::io::Result<()> {
    let live: FastSet<u64> = engine.paths_by_id.keys().copied().collect();
    let below = engine.next_id;
    let sweep_dir = data.to_path_buf();
    std::thread::Builder::new()
        .name("sweep-files".into())
        .spawn(
            move || match recovery::sweep_stream_files(&sweep_dir, &live, below) {
                Ok(0) => {}
                Ok(n) => tracing::info!(removed = n, "removed files of deleted streams"),
                Err(e) => {
                    tracing::warn!(error = %e, "could not sweep the files of deleted streams")
                }
            },
        )?;
    Ok(())
}

/// Every stream's view by path, as the registry and the publisher start.
fn views<C: FromIterator<(Arc<str>, Arc<StreamView>)>>(engine: &engine::Engine) -> C {
    engine
        .entries
        .iter()
        .map(|(p, e)| (p.clone(), Arc::clone(&e.view)))
        .collect()
}

/// Starts the janitor and `sealer`, and queues the chunks that were ready
/// but not sealed before the last stop.
fn start_sealing(writer: &mut Writer, sealer: sealer::Sealer, gc_grace: Duration) {
    let (gc, garbage) = mpsc::unbounded_channel();
    tokio::spawn(
        janitor::Janitor {
            objects: sealer.objects.clone(),
            grace: gc_grace,
        }
        .run(garbage),
    );
    writer.gc = Some(gc);
    let (jobs, queue) = mpsc::unbounded_channel();
    tokio::spawn(sealer.run(queue));
    writer.seal_jobs = Some(jobs);
    let paths: Vec<Arc<str>> = writer.engine.entries.keys().cloned().collect();
    for path in paths {
        writer.queue_seals(&path);
    }
    writer.hand_over_seals();
}

impl Store {
    /// Recovers the data directory and starts the writer thread. Must be
    /// called inside a Tokio runtime (the publisher runs as a task).
    pub fn open(
        config: StoreConfig,
        clock: Arc<dyn Clock>,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<(Store, RecoveryReport)> {
        prepare_data(&config.data)?;
        let objects = open_objects(&config, &metrics)?;
        metrics.describe_store(&config.data, config.max_unsealed_bytes);
        // Object durability: claim the partition and rebuild the local log
        // from the bucket before recovery reads it.
        // A replica's local log was laid out by its follower (no claim).
        let replica = config.region.replica;
        let object_wal = match config.durability {
            Durability::Object if !replica => {
                Some(claim::claim_partition(&config, Arc::clone(&metrics))?)
            }
            _ => None,
        };
        let now = clock.now_ms();
        let recovered = recover_disk(&config, now, objects.as_ref(), &metrics)?;
        let recovery::Recovered {
            mut engine,
            mut wal,
            report,
            touched,
            segment_sizes,
        } = recovered;
        check_replayed(&config, &report)?;
        sweep_files(&config.data, &engine)?;
        // With object durability the bucket is what survives: the local
        // log needs no sync.
        wal.sync = config.durability == Durability::Sync;
        wal.fill_limit = config.checkpoint_bytes;
        wal.begin();
        let registry: Registry = Arc::new(RwLock::new(views(&engine)));
        let (tx, rx) = mpsc::channel(config.queue_commands);
        // On a thread shared with other partitions' writers, if the
        // region gave a pool: every sender rings that thread.
        let place = config.writers.as_ref().map(|p| p.place()).transpose()?;
        let tx = writer_pool::CommandTx::new(tx, place.as_ref().map(|p| p.bell()));
        let object_write_timeout = config.object_write_timeout;
        let fenced = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ordered: publisher::Ordered = Arc::new(RwLock::new(views(&engine)));
        let publisher = Arc::new(Publisher::new(
            Arc::clone(&registry),
            Arc::clone(&ordered),
            config.data.clone(),
        ));
        tokio::spawn(Arc::clone(&publisher).run());
        let sealer_metrics = Arc::clone(&metrics);
        let seal_retry_max = config.seal_retry_max;
        let gc_grace = config.gc_grace;
        let data = config.data.clone();
        let invalidations = Arc::new(feed_of(&config, &mut engine));
        let promotions = start_promoter(tx.clone())?;
        let mut writer = Writer::new(
            engine,
            wal,
            Arc::clone(&clock),
            config,
            metrics,
            Arc::clone(&publisher),
            promotions,
        );
        writer.invalidations = Some(Arc::clone(&invalidations));
        let epoch = object_wal.as_ref().map(|c| c.epoch);
        let acknowledged = object_wal.as_ref().and_then(|c| c.acknowledged.clone());
        let vouch = object_wal.as_ref().map(|c| Arc::clone(&c.vouch));
        let object_wal = object_wal.map(|c| {
            writer.write_to_bucket(c.log, tx.clone(), Arc::clone(&fenced));
            (object_write_timeout, c.stopper)
        });
        writer.replayed_bytes = report.bytes_replayed;
        writer.restored(touched, segment_sizes, now);
        // A replica seals nothing and collects no garbage: its owner does.
        if let Some(objects) = objects.as_ref().filter(|_| !replica) {
            let sealer = sealer::Sealer {
                objects: objects.clone(),
                writer: tx.clone(),
                metrics: sealer_metrics,
                retry_max: seal_retry_max,
            };
            start_sealing(&mut writer, sealer, gc_grace);
        }
        let ending = match place {
            Some(place) => place.join(writer, rx),
            None => {
                let (ended, ending) = writer_pool::Ended::pair();
                std::thread::Builder::new()
                    .name("wal-writer".into())
                    .spawn(move || {
                        writer.run(rx);
                        drop(ended);
                    })?;
                ending
            }
        };
        Ok((
            Store {
                tx,
                registry,
                ordered,
                clock,
                writer: Arc::new(Mutex::new(Some(ending))),
                objects,
                data,
                publisher,
                invalidations,
                object_wal,
                fenced,
                epoch,
                acknowledged,
                vouch,
            },
            report,
        ))
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.clock
    }

    /// The feed of deletes, creates, retention changes and replaced snapshots edges tail.
    pub fn invalidations(&self) -> &Arc<invalidations::Invalidations> {
        &self.invalidations
    }

    /// Object storage (none when sealing is off).
    pub fn objects(&self) -> Option<&crate::objects::instrumented::Objects> {
        self.objects.as_ref()
    }

    /// Where snapshot parts wait for their publish (cleared at startup).
    /// The store's data directory.
    pub fn data_dir(&self) -> &std::path::Path {
        &self.data
    }

    pub fn staging_dir(&self) -> PathBuf {
        self.data.join("staging")
    }

    /// Makes `meta`, already in object storage, the stream's latest
    /// snapshot once the change is durable.
    pub async fn snapshot(
        &self,
        path: String,
        incarnation: Option<String>,
        meta: SnapshotMeta,
        expect_digest: Option<String>,
    ) -> Result<(), StoreError> {
        self.call(|reply| Command::Snapshot {
            path,
            incarnation,
            meta,
            expect_digest,
            reply,
        })
        .await
    }

    /// Makes the stream public (or private) once the change is durable.
    pub async fn set_public(
        &self,
        path: String,
        incarnation: String,
        public: bool,
    ) -> Result<(), StoreError> {
        self.call(|reply| Command::SetPublic {
            path,
            incarnation,
            public,
            reply,
        })
        .await
    }

    /// Advances the stream's retention to its latest snapshot at `offset`.
    pub async fn retain(
        &self,
        path: String,
        incarnation: Option<String>,
        offset: u64,
    ) -> Result<(), StoreError> {
        self.call(|reply| Command::Retain {
            path,
            incarnation,
            offset,
            reply,
        })
        .await
    }

    /// Tells `observer` of every stream created and appended to from now
    /// on, once visible (subscriptions).
    pub fn observe(&self, observer: Arc<dyn publisher::Observer>) {
        self.publisher.observe(observer);
    }

    /// The stream at `path`, unless it does not exist or has expired.
    /// Carries out durable batches that wait to be published, unless another
    /// thread is at it (see `publisher`); runtime workers call it as each
    /// request starts.
    pub fn help_publish(&self) {
        self.publisher.help();
    }

    async fn call<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, StoreError>>) -> Command,
    ) -> Result<T, StoreError> {
        let (reply, rx) = oneshot::channel();
        // Room in the queue is the rule; the wait for it is boxed, so the
        // future of every request does not carry it.
        match self.tx.try_send(make(reply)) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(cmd)) => Box::pin(self.tx.send(cmd))
                .await
                .map_err(|_| StoreError::ShuttingDown)?,
            Err(mpsc::error::TrySendError::Closed(_)) => return Err(self.gone()),
        }
        match &self.object_wal {
            None => rx.await.map_err(|_| self.gone())?,
            // A commit waits for object storage: past the timeout the
            // request answers 503 (the commit may still land).
            Some((timeout, _)) => match tokio::time::timeout(*timeout, rx).await {
                Ok(answer) => answer.map_err(|_| self.gone())?,
                Err(_) => Err(StoreError::ObjectStoreSlow),
            },
        }
    }

    pub async fn create(
        &self,
        path: String,
        config: StreamConfig,
        closed: bool,
        payload: Bytes,
    ) -> Result<Created, StoreError> {
        self.call(|reply| Command::Create {
            path,
            config,
            closed,
            payload,
            reply,
        })
        .await
    }

    /// Creates a fork at `path` as `plan` says (see `core::fork`).
    pub async fn fork(
        &self,
        path: String,
        plan: ForkPlan,
        closed: bool,
        payload: Bytes,
    ) -> Result<Created, StoreError> {
        self.call(|reply| Command::Fork {
            path,
            plan,
            closed,
            payload,
            reply,
        })
        .await
    }

    /// Appends to the stream at `view`'s path (whichever stream is there
    /// when the writer gets to it: the view names the path without a copy).
    pub async fn append(
        &self,
        view: Arc<StreamView>,
        incarnation: Option<String>,
        req: AppendRequest,
        payload: Bytes,
    ) -> Result<Appended, StoreError> {
        self.call(|reply| Command::Append {
            view,
            incarnation,
            req,
            payload,
            reply,
        })
        .await
    }

    pub async fn delete(
        &self,
        path: String,
        incarnation: Option<String>,
    ) -> Result<(), StoreError> {
        self.call(|reply| Command::Delete {
            path,
            incarnation,
            reply,
        })
        .await
    }

    /// Rolls the stream at `path` (incarnation `incarnation`) back to
    /// offset `to` (see `writer::restoring`).
    pub async fn restore(
        &self,
        path: String,
        incarnation: String,
        to: u64,
    ) -> Result<writer::Restored, StoreError> {
        self.call(|reply| Command::Restore {
            path,
            incarnation,
            to,
            reply,
        })
        .await
    }

    /// A replica takes its owner's commits, each one WAL object's frames
    /// in number order (decision 0018); once answered, readers see them.
    pub async fn replicate(&self, objects: Vec<Bytes>) -> Result<(), StoreError> {
        self.call(|reply| Command::Replicate { objects, reply })
            .await
    }

    /// Asks the writer to expire idle streams now.
    pub async fn tick(&self) {
        let _ = self.tx.send(Command::Tick).await;
    }

    /// Stops the writer after the commands already queued and waits for its
    /// final checkpoint. Later calls through any clone answer `ShuttingDown`.
    pub async fn shutdown(&self) {
        let _ = self.tx.send(Command::Shutdown).await;
        let handle = self.writer.lock().take();
        if let Some(h) = handle {
            let mut joined = tokio::task::spawn_blocking(move || h.wait());
            // The queued commands are finished first; a WAL put that still
            // waits for an unreachable bucket after the write timeout gives
            // up (its commit is not acknowledged) rather than hold the stop.
            if let Some((timeout, stopper)) = &self.object_wal {
                if tokio::time::timeout(*timeout, &mut joined).await.is_ok() {
                    return;
                }
                stopper.store(true, std::sync::atomic::Ordering::Release);
            }
            let _ = joined.await;
        }
    }
}
