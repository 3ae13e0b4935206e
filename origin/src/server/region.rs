//! A region origin (`--durability object`): for each partition of the
//! region it serves the partition while it owns it, forwards its requests
//! to the owner while another origin does (`http::forward`), takes it over
//! when the owner stops renewing its heartbeat (`region::liveness`), and
//! lets go of it when the spread over the live origins gives it to another
//! (`region::assignment`: a cooperative hand-off).
//!
//! Each claim opens a fresh store in a folder of its own under
//! `DATA/region/{n}`, rebuilt from the bucket: a store that lost its
//! partition is stopped in the background and its folder removed, and its
//! threads never share files with the next one. Each store gets its share
//! of the origin's budgets (`per_partition`), and all share one request
//! body budget and one set of per-account limits (`Sharing`). The key
//! store and the token signing key stay in `DATA` itself, for every store
//! in turn, copied from the bucket before each claim (`region::auth_sync`);
//! the owner of partition 0, where the admin API lives, puts the key store
//! back when it changes.
//!
//! A partition's states: `Joining` (at start, while a claim replays, and
//! between a release and the next owner's claim: its requests answer 503 +
//! `Retry-After`), `Serving` (this origin's store answers), `Following`
//! (forwarded to the owner's URL). The heartbeat is renewed every `renew`
//! on a task of its own, so a long replay does not make this origin look
//! dead.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use shell::Http1;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::clock::{Clock, SystemClock};
use crate::http::forward::Forwarder;
use crate::http::{self, HttpConfig, Shared};
use crate::metrics::RegionMetrics;
use crate::region::liveness::Released;
use crate::region::membership::{Heartbeater, Membership, MembershipConfig};
use crate::store::StoreConfig;

mod across;
mod answer;
mod beat;
mod builds;
mod keys;
mod list;
mod moves;
mod origin_log;
mod peer;
mod replica;
mod subscriptions;
mod takeover;

use answer::handle;

#[derive(Clone)]
enum Current {
    Joining,
    Serving {
        state: Shared,
        epoch: u64,
        /// Shared: the state is cloned for every request.
        dir: Arc<std::path::Path>,
    },
    Following {
        url: Arc<str>,
    },
}

/// One partition as this origin holds it.
struct Part {
    current: RwLock<Current>,
    /// Raised at every change of its state (forwarded answers of the old end).
    generation: tokio::sync::watch::Sender<u64>,
}

pub struct RegionOrigin {
    /// The stores' configuration; `data` is each claim's own folder.
    store: StoreConfig,
    http: HttpConfig,
    clock: Arc<dyn Clock>,
    /// `--data`: the key store, and the stores' folders under `region/`.
    data: PathBuf,
    membership: MembershipConfig,
    metrics: Arc<RegionMetrics>,
    forwarder: Forwarder,
    /// The region's partition count, and each partition's state here.
    partitions: u32,
    parts: Vec<Part>,
    /// Partitions this origin let go of, each kept until a newer claim of
    /// it is seen, and whether its store stopped: only then does the
    /// heartbeat list it (`released`). Decisions count it at once, so this
    /// origin does not take back what it is letting go of.
    /// until a newer claim of it is seen.
    released: Arc<parking_lot::Mutex<Vec<(Released, bool)>>>,
    /// What the stores share.
    sharing: super::Sharing,
    /// Set once the partition count is pinned (or found the same): the
    /// heartbeat waits for it, so an origin that may not join is never
    /// seen as a live member.
    pinned: std::sync::atomic::AtomicBool,
    /// One copy of the access files from the bucket at a time.
    fetching: Arc<tokio::sync::Mutex<()>>,
    /// Turns true when the server starts to shut down.
    closing: tokio::sync::watch::Sender<bool>,
    /// Set from the stop signal on (`/readyz` answers 503 draining).
    draining: shell::ready::Draining,
    incarnations: AtomicU64,
    /// Set while this origin stands aside after claims that keep failing:
    /// its heartbeat says `leaving`, so the others take over.
    standing_aside: std::sync::atomic::AtomicBool,
    /// Set the first time no partition was joining: `/readyz` stays ready
    /// from then on (`answer.rs`).
    joined: std::sync::atomic::AtomicBool,
    /// The counters of the stores this origin let go of (`leave`).
    retired: crate::metrics::Metrics,
    /// Held while a store leaves the serving set and while a scrape reads
    /// it, so each store is counted once.
    scrape: parking_lot::Mutex<()>,
    /// The bucket (membership, access control), opened when serving starts.
    objects: std::sync::OnceLock<Arc<dyn object_store::ObjectStore>>,
    /// Set when the origin stops: a checkpoint build waiting for the bucket
    /// gives up (it is safe to stop anywhere: `region::checkpoint`).
    builds_stop: Arc<std::sync::atomic::AtomicBool>,
    /// The key the region's origins prove to one another, once read.
    peer_key: std::sync::OnceLock<Arc<str>>,
    /// Copies of forks across partitions being filled here (`across`).
    copying: across::Copying,
    /// Each partition's replica, while it is followed (`replica`).
    replicas: Vec<parking_lot::Mutex<Option<replica::Replica>>>,
    /// The WAL layout once known (`one_wal`).
    layout: std::sync::OnceLock<bool>,
    /// The log objects the replicas' rounds share (one WAL per origin).
    shared_reads: crate::region::origin_wal::SharedReads,
    /// The instant the replicas' rounds are timed from: every replica
    /// rounds at the same moments, so their reads of one log coincide.
    rounds_from: tokio::time::Instant,
    /// Writes this origin forwarded, for reading them back (`replica`).
    written: parking_lot::Mutex<replica::Written>,
    /// Reads waiting for a replica to reach their `min_next_offset` now
    /// (at most `--region-replica-floor-waiting`; past it a floored read
    /// is forwarded to the owner at once).
    floor_waiting: tokio::sync::Semaphore,
    /// Tells the subscriptions running here (if this origin owns
    /// partition 0) of the creates and appends of every store it opens.
    relay: Arc<crate::subscriptions::catalog::Relay>,
    /// With one WAL per origin: this origin's log, while it serves (a
    /// stopped one is replaced at the next claim).
    log: parking_lot::Mutex<Option<Arc<crate::region::origin_wal::OriginWal>>>,
    /// The threads the writers of the partitions this origin owns share,
    /// with one WAL per origin (`store::writer_pool`): one a core.
    writers: Arc<crate::store::writer_pool::WriterPool>,
    /// What the logs' puts count (`ds_origin_object_wal_*`), beside the
    /// stores' counts.
    log_metrics: Arc<crate::metrics::Metrics>,
}

/// How often each partition served here is swept for what a crash in the
/// middle of a fork across partitions left (`across::sweep`), at most: a
/// shorter grace sweeps as often as it.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// A claim under way: its partition, its store's folder and the replay's task.
type Claiming = (u32, PathBuf, JoinHandle<std::io::Result<Shared>>);

impl RegionOrigin {
    pub fn new(
        store: StoreConfig,
        http: HttpConfig,
        membership: MembershipConfig,
    ) -> std::io::Result<Arc<RegionOrigin>> {
        let data = store.data.clone();
        // The stores of a previous run: the bucket has all they held.
        let stale = data.join("region");
        if stale.exists() {
            std::fs::remove_dir_all(&stale)?;
        }
        let metrics = Arc::new(RegionMetrics::default());
        let partitions = store.region.partitions.max(1);
        metrics.partitions.store(i64::from(partitions), Relaxed);
        let sharing = super::Sharing {
            ingress: Arc::new(http::ingress::Ingress::new(&http)),
            limits: shared::limits::Limits::new(http.auth.limits),
            timings: Arc::default(),
            key_store: Some(crate::region::auth_sync::KeyStore::new(&data)),
        };
        let written = replica::Written::new(store.region.replica_written);
        let shared_reads =
            crate::region::origin_wal::SharedReads::new(store.region.replica_shared_bytes);
        let layout = if store.region.wal_auto {
            std::sync::OnceLock::new()
        } else {
            std::sync::OnceLock::from(store.region.one_wal)
        };
        let sharing_timings = Arc::clone(&sharing.timings);
        let floor_waiting = tokio::sync::Semaphore::new(
            store
                .region
                .replica_floor_waiting
                .min(tokio::sync::Semaphore::MAX_PERMITS),
        );
        Ok(Arc::new(RegionOrigin {
            forwarder: Forwarder::new(
                &store.region.node,
                Arc::clone(&metrics),
                store.object_write_timeout,
                store.region.forwards,
            ),
            store,
            http,
            clock: Arc::new(SystemClock),
            data,
            membership,
            metrics,
            partitions,
            parts: (0..partitions)
                .map(|_| Part {
                    current: RwLock::new(Current::Joining),
                    generation: tokio::sync::watch::Sender::new(0),
                })
                .collect(),
            released: Default::default(),
            sharing,
            fetching: Default::default(),
            pinned: Default::default(),
            closing: tokio::sync::watch::Sender::new(false),
            draining: shell::ready::Draining::default(),
            incarnations: AtomicU64::new(0),
            standing_aside: std::sync::atomic::AtomicBool::new(false),
            joined: std::sync::atomic::AtomicBool::new(false),
            retired: Default::default(),
            scrape: parking_lot::Mutex::new(()),
            objects: std::sync::OnceLock::new(),
            builds_stop: Arc::default(),
            peer_key: std::sync::OnceLock::new(),
            copying: Default::default(),
            replicas: (0..partitions).map(|_| Default::default()).collect(),
            shared_reads,
            layout,
            rounds_from: tokio::time::Instant::now(),
            written: parking_lot::Mutex::new(written),
            floor_waiting,
            relay: Arc::default(),
            log: parking_lot::Mutex::new(None),
            writers: crate::store::writer_pool::WriterPool::new(
                std::thread::available_parallelism().map_or(1, |n| n.get()),
            ),
            log_metrics: Arc::new(crate::metrics::Metrics::with_timings(Arc::clone(
                &sharing_timings,
            ))),
        }))
    }

    fn current(&self, p: u32) -> Current {
        self.parts[p as usize].current.read().clone()
    }

    /// The stores this origin serves now.
    fn serving(&self) -> Vec<Shared> {
        (0..self.partitions)
            .filter_map(|p| match self.current(p) {
                Current::Serving { state, .. } => Some(state),
                _ => None,
            })
            .collect()
    }

    /// What `/readyz` reads: set it (`shell::signal::after_drain`) to say
    /// draining before `shutdown` resolves.
    pub fn draining(&self) -> shell::ready::Draining {
        self.draining.clone()
    }

    /// Serves until `shutdown` resolves, then stops the stores it serves
    /// and tells the region it left (the others take over at once).
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let objects = self.open_bucket().await?;
        let _ = self.objects.set(Arc::clone(&objects));
        if let Some(keys) = &self.sharing.key_store {
            keys.open(Arc::clone(&objects));
        }
        // Read now, so the first fork across partitions does not wait for it.
        let _ = self.peer_key().await;
        let heartbeater = Arc::new(Heartbeater::new(
            Arc::clone(&objects),
            &self.store.region.node,
            &self.store.region.url,
        ));
        let membership = Membership::new(
            objects,
            self.membership.clone(),
            &self.store.region.node,
            &self.store.region.url,
            self.partitions,
        )
        .with_tenures(self.one_wal());
        let (stop_beating, beating) = tokio::sync::watch::channel(false);
        let beats = tokio::spawn(Arc::clone(&self).beat(Arc::clone(&heartbeater), beating));
        let run = tokio::spawn(Arc::clone(&self).run(membership));
        let periodic = self.periodic();
        let shutdown =
            shell::signal::announced(shutdown, self.closing.clone(), self.draining.clone());
        let serve = self.http.serve.clone();
        let me = Arc::clone(&self);
        let result = shell::serve(
            listener,
            Vec::new(),
            &serve,
            Http1::RequestsWatch,
            shutdown,
            move |req| Box::pin(handle(Arc::clone(&me), req)),
        )
        .await;
        drop(periodic);
        run.await.map_err(std::io::Error::other)?;
        for p in 0..self.partitions {
            self.drop_replica(p);
        }
        for part in &self.parts {
            let last = std::mem::replace(&mut *part.current.write(), Current::Joining);
            if let Current::Serving { state, .. } = last {
                state.store.shutdown().await;
            }
        }
        // The heartbeat went on until the stores stopped; now the others
        // may take over at once.
        let _ = stop_beating.send(true);
        let _ = beats.await;
        let patience = self.patience();
        match tokio::time::timeout(patience, heartbeater.beat(true, Vec::new(), Vec::new())).await {
            Ok(Ok(())) => {}
            _ => tracing::warn!(
                "could not tell the region this origin left; it takes over after the lease"
            ),
        }
        result
    }

    /// One WAL per origin or a WAL per partition: `--region-wal`'s, or with
    /// `auto` the bucket's once read (`read_layout`; nothing that depends on
    /// it runs before: the partition count is pinned after it).
    pub(super) fn one_wal(&self) -> bool {
        self.layout
            .get()
            .copied()
            .unwrap_or(self.store.region.one_wal)
    }

    /// With `--region-wal auto`, reads the bucket's layout once (within the
    /// patience); true once it is known.
    pub(super) async fn read_layout(&self, objects: &dyn object_store::ObjectStore) -> bool {
        if self.layout.get().is_some() {
            return true;
        }
        let read = tokio::time::timeout(self.patience(), crate::region::pin::one_wal_in(objects));
        match read.await {
            Ok(Ok(one_wal)) => {
                let layout = if one_wal { "origin" } else { "partition" };
                tracing::info!(
                    region_wal = layout,
                    "the region's WAL layout, from its bucket"
                );
                let _ = self.layout.set(one_wal);
                true
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not read the region's WAL layout from its bucket; trying again");
                false
            }
            Err(_) => false,
        }
    }

    /// The region's bucket, its partition count pinned if it answers:
    /// another count refuses to start; a bucket not answering yet is tried
    /// again before the first look (answering 503 meanwhile).
    async fn open_bucket(&self) -> std::io::Result<Arc<dyn object_store::ObjectStore>> {
        let settings: Vec<(&str, &str)> = self
            .store
            .object_store_settings
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let url = self.store.object_store.as_deref().ok_or_else(|| {
            std::io::Error::other("object durability needs object storage (--object-store)")
        })?;
        let objects = crate::objects::open_with(url, &settings).map_err(std::io::Error::other)?;
        if !self.read_layout(&*objects).await {
            return Ok(objects);
        }
        let pinned = tokio::time::timeout(
            self.patience(),
            crate::region::pin::partitions(&*objects, self.partitions, self.one_wal()),
        )
        .await;
        match pinned {
            Ok(Err(crate::region::pin::PinError::Mismatch(why))) => {
                return Err(std::io::Error::other(why))
            }
            Ok(Ok(())) => self.pinned.store(true, Relaxed),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not pin the region's partition count yet; trying again")
            }
            Err(_) => {}
        }
        Ok(objects)
    }

    /// The periodic work of a running region origin, until dropped: each
    /// second every store's tick (and the replicas' keys), and the sweep of
    /// what a crash in a fork across partitions left.
    fn periodic(self: &Arc<Self>) -> (shell::periodic::Periodic, shell::periodic::Periodic) {
        let sweeper = shell::periodic::every(Duration::from_secs(1), {
            let me = Arc::clone(self);
            move || {
                let stores = me.serving();
                let replicas = me.replica_states();
                async move {
                    for state in stores {
                        super::tick(&state).await;
                    }
                    // A replica decides nothing, but its reads check keys:
                    // a revoked one stops working there too.
                    for state in replicas {
                        super::reload_keys(&state);
                    }
                }
            }
        });
        let every = SWEEP_EVERY.min(self.store.region.pin_grace.max(Duration::from_millis(100)));
        let every_ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX);
        let forks = shell::periodic::every(every, {
            let me = Arc::clone(self);
            move || {
                let me = Arc::clone(&me);
                async move {
                    for p in 0..me.partitions {
                        if let Current::Serving { state, .. } = me.current(p) {
                            across::sweep(&me, p, &state, every_ms).await;
                        }
                    }
                }
            }
        });
        (sweeper, forks)
    }

    /// How long one request to the bucket may take before it counts as failed.
    fn patience(&self) -> Duration {
        self.membership
            .renew
            .saturating_mul(2)
            .max(Duration::from_secs(1))
    }
}

impl RegionOrigin {
    /// The configuration of a store of partition `p` here (a claim's or a
    /// replica's) in the folder `data`, with its share of the budgets.
    fn partition_config(&self, p: u32, data: PathBuf) -> StoreConfig {
        let mut config = per_partition(&self.store, self.partitions);
        config.region.partition = p;
        config.region.one_wal = self.one_wal();
        config.data = data;
        config
    }

    /// Opens a store of `config` with what the stores share, when called:
    /// blocking (a claim's replay, a replica's recovery), so on a blocking
    /// thread.
    fn opener(
        &self,
        config: StoreConfig,
    ) -> impl FnOnce() -> std::io::Result<Shared> + Send + 'static {
        let (http, clock, keys, sharing) = (
            self.http.clone(),
            Arc::clone(&self.clock),
            self.data.clone(),
            self.sharing.clone(),
        );
        move || {
            super::open_state_sharing(config, http, clock, &keys, Some(&sharing))
                .map(|(state, _)| state)
        }
    }
}

/// A store's share of the origin's budgets when the origin may serve all
/// `partitions` at once: each memory and file bound divided by the count
/// (never below a floor that keeps a store working), so the origin's
/// totals stay what its flags say.
fn per_partition(config: &StoreConfig, partitions: u32) -> StoreConfig {
    let mut c = config.clone();
    if partitions <= 1 {
        return c;
    }
    let n = u64::from(partitions);
    let share = |v: u64, floor: u64| (v / n).max(floor.min(v));
    c.buffered_bytes_limit = share(c.buffered_bytes_limit, 8 << 20);
    c.chunk_cache_bytes = share(c.chunk_cache_bytes, 16 << 20);
    c.max_unsealed_bytes = share(c.max_unsealed_bytes, 16 << 20);
    c.log_retain_bytes = share(c.log_retain_bytes, 16 << 20);
    c.max_log_extents = share(c.max_log_extents, 4096);
    c.open_files = share(config.open_files_cap() as u64, 16) as usize;
    c
}

/// Removes a stopped store's folder on a blocking thread.
fn remove_later(dir: PathBuf) {
    tokio::task::spawn_blocking(move || {
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(folder = %dir.display(), error = %e, "could not remove a stopped store's folder");
            }
        }
    });
}
