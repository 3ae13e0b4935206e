//! A region origin (`--durability object`): it serves the partition while
//! it owns it, forwards every stream request to the owner while another
//! origin does (`http::forward`), and takes the partition over when the
//! owner stops renewing its heartbeat (`region::liveness`).
//!
//! Each claim opens a fresh store in a folder of its own under
//! `DATA/region/{n}`, rebuilt from the bucket: a store that lost the
//! partition is stopped in the background and its folder removed, and its
//! threads never share files with the next one. The key store and the
//! token signing key stay in `DATA` itself, for every store in turn,
//! copied from the bucket before each claim (`region::auth_sync`).
//!
//! States: `Joining` (at start and while a claim replays: stream requests
//! answer 503 + `Retry-After`), `Serving` (this origin's store answers),
//! `Following` (forwarded to the owner's URL). The membership loop renews
//! the heartbeat every `renew` even while a claim replays, so a long
//! replay does not make this origin look dead.

use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Response};
use axum::response::IntoResponse;
use futures::FutureExt;
use parking_lot::RwLock;
use shell::Http1;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::clock::{Clock, SystemClock};
use crate::http::error::ApiError;
use crate::http::forward::Forwarder;
use crate::http::{self, routes, HttpConfig, Shared};
use crate::metrics::RegionMetrics;
use crate::region::checkpoint::{self, Built};
use crate::region::liveness::Decision;
use crate::region::membership::{Heartbeater, Membership, MembershipConfig};
use crate::region::WalError;
use crate::store::StoreConfig;

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
    current: RwLock<Current>,
    /// Turns true when the server starts to shut down.
    closing: tokio::sync::watch::Sender<bool>,
    incarnations: AtomicU64,
    /// Raised at every change of state (forwarded answers of the old end).
    generation: tokio::sync::watch::Sender<u64>,
    /// Set while this origin stands aside after failed claims: its
    /// heartbeat says `leaving`, so the next origin in line claims.
    standing_aside: std::sync::atomic::AtomicBool,
    /// The bucket (membership, access control), opened when serving starts.
    objects: std::sync::OnceLock<Arc<dyn object_store::ObjectStore>>,
    /// Set when the origin stops: a checkpoint build waiting for the bucket
    /// gives up (it is safe to stop anywhere: `region::checkpoint`).
    builds_stop: Arc<std::sync::atomic::AtomicBool>,
}

/// A claim under way: its store's folder and the replay's task.
type Claiming = (PathBuf, JoinHandle<std::io::Result<Shared>>);

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
        Ok(Arc::new(RegionOrigin {
            forwarder: Forwarder::new(&store.region.node, Arc::clone(&metrics)),
            store,
            http,
            clock: Arc::new(SystemClock),
            data,
            membership,
            metrics,
            current: RwLock::new(Current::Joining),
            closing: tokio::sync::watch::Sender::new(false),
            incarnations: AtomicU64::new(0),
            generation: tokio::sync::watch::Sender::new(0),
            standing_aside: std::sync::atomic::AtomicBool::new(false),
            objects: std::sync::OnceLock::new(),
            builds_stop: Arc::default(),
        }))
    }

    fn current(&self) -> Current {
        self.current.read().clone()
    }

    /// Serves until `shutdown` resolves, then stops the store it serves and
    /// tells the region it left (the others take over at once).
    pub async fn serve(
        self: Arc<Self>,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
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
        let _ = self.objects.set(Arc::clone(&objects));
        let heartbeater = Arc::new(Heartbeater::new(
            Arc::clone(&objects),
            &self.store.region.node,
            &self.store.region.url,
        ));
        let membership = Membership::new(
            objects,
            self.membership.clone(),
            &self.store.region.node,
            self.store.region.partition,
        );
        let (stop_beating, beating) = tokio::sync::watch::channel(false);
        let beats = tokio::spawn(Arc::clone(&self).beat(Arc::clone(&heartbeater), beating));
        let run = tokio::spawn(Arc::clone(&self).run(membership));
        let sweeper = shell::periodic::every(Duration::from_secs(1), {
            let me = Arc::clone(&self);
            move || {
                let current = me.current();
                async move {
                    if let Current::Serving { state, .. } = current {
                        super::tick(&state).await;
                    }
                }
            }
        });
        let shutdown = shell::signal::announced(shutdown, self.closing.clone());
        let serve = self.http.serve.clone();
        let me = Arc::clone(&self);
        let result = shell::serve(
            listener,
            &serve,
            Http1::RequestsWatch,
            shutdown,
            move |req| handle(Arc::clone(&me), req),
        )
        .await;
        drop(sweeper);
        run.await.map_err(std::io::Error::other)?;
        let last = std::mem::replace(&mut *self.current.write(), Current::Joining);
        if let Current::Serving { state, .. } = last {
            state.store.shutdown().await;
        }
        // The heartbeat went on until the store stopped; now the others
        // may take over at once.
        let _ = stop_beating.send(true);
        let _ = beats.await;
        let patience = self.patience();
        match tokio::time::timeout(patience, heartbeater.beat(true)).await {
            Ok(Ok(())) => {}
            _ => tracing::warn!(
                "could not tell the region this origin left; it takes over after the lease"
            ),
        }
        result
    }

    /// How long one request to the bucket may take before it counts as failed.
    fn patience(&self) -> Duration {
        self.membership
            .renew
            .saturating_mul(2)
            .max(Duration::from_secs(1))
    }

    /// Renews the heartbeat every renewal until told to stop; `leaving`
    /// while this origin stands aside after failed claims.
    async fn beat(
        self: Arc<Self>,
        heartbeater: Arc<Heartbeater>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut interval = tokio::time::interval(self.membership.renew);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            let aside = self.standing_aside.load(Relaxed);
            match tokio::time::timeout(self.patience(), heartbeater.beat(aside)).await {
                Ok(Ok(())) => {}
                _ => {
                    self.metrics.heartbeat_failures.fetch_add(1, Relaxed);
                    tracing::warn!("could not renew this origin's heartbeat");
                }
            }
        }
    }

    /// The membership loop: look, decide, act; until closing.
    async fn run(self: Arc<Self>, mut m: Membership) {
        let renew = m.config().renew;
        let patience = self.patience();
        let mut interval = tokio::time::interval(renew);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut closed = self.closing.subscribe();
        let mut claiming: Option<Claiming> = None;
        // Claims that failed in a row, and when the next may start.
        let mut failures: u32 = 0;
        let mut next_claim = tokio::time::Instant::now();
        // The key store as last put in the bucket by this origin.
        let mut keys_published = Vec::new();
        // A checkpoint build under way, and when the next may start.
        let mut building: Option<JoinHandle<Result<Built, WalError>>> = None;
        let mut next_build = tokio::time::Instant::now() + self.store.region.checkpoint.interval;
        loop {
            // A claim that finishes is served at once, not at the next tick.
            let finished = async {
                match &mut claiming {
                    Some((_, task)) => Some(task.await),
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = interval.tick() => {}
                _ = closed.wait_for(|c| *c) => break,
                outcome = finished => {
                    let (dir, _) = claiming.take().expect("a claim was under way");
                    if self.claimed(dir, outcome.expect("some")) {
                        failures = 0;
                        self.standing_aside.store(false, Relaxed);
                    } else {
                        // Back off (a renewal, doubling up to 30 s) and
                        // stand aside: the others see this origin leaving
                        // and the next in line claims.
                        failures = failures.saturating_add(1);
                        let wait = renew
                            .saturating_mul(1u32 << failures.min(5))
                            .min(Duration::from_secs(30));
                        next_claim = tokio::time::Instant::now() + wait;
                        self.standing_aside.store(true, Relaxed);
                    }
                    continue;
                }
            }
            match m.look(patience).await {
                Some(live) => self.metrics.live_nodes.store(live as i64, Relaxed),
                None => {
                    self.metrics.heartbeat_failures.fetch_add(1, Relaxed);
                    continue;
                }
            }
            if claiming.is_some() {
                continue;
            }
            if let Current::Serving { state, .. } = self.current() {
                if state.store.is_stopped() {
                    // Its writer stopped (fenced, or a put failed): nothing
                    // more is acknowledged; claim again or follow.
                    tracing::warn!("this origin's store stopped writing; it steps down");
                    self.step_down(Current::Joining);
                } else {
                    let objects = self.objects.get().expect("set before the loop");
                    let published = crate::region::auth_sync::publish(
                        &**objects,
                        &self.data,
                        &mut keys_published,
                    );
                    if let Err(e) = tokio::time::timeout(patience, published)
                        .await
                        .unwrap_or_else(|_| Err(std::io::Error::other("timed out")))
                    {
                        tracing::warn!(error = %e, "could not put the key store in the bucket; trying again");
                    }
                    if building.as_ref().is_some_and(|b| b.is_finished()) {
                        let outcome = building.take().expect("finished").await;
                        self.built(outcome);
                    }
                    let now = tokio::time::Instant::now();
                    if building.is_none() && now >= next_build {
                        next_build = now + self.store.region.checkpoint.interval;
                        building = self.build_checkpoint(&state);
                    }
                }
            }
            let serving = match self.current() {
                Current::Serving { epoch, .. } => Some(epoch),
                _ => None,
            };
            match m.decide(serving) {
                Decision::Serve => {}
                Decision::Follow { url } => {
                    self.standing_aside.store(false, Relaxed);
                    self.follow(url)
                }
                Decision::Claim if tokio::time::Instant::now() >= next_claim => {
                    claiming = Some(self.claim())
                }
                Decision::Claim => {}
            }
        }
        self.builds_stop.store(true, Relaxed);
        // A claim still replaying finishes, and its store stops at once.
        if let Some((dir, task)) = claiming {
            if let Ok(Ok(state)) = task.await {
                state.store.shutdown().await;
            }
            remove_later(dir);
        }
        if let Current::Serving { state, .. } = self.current() {
            let _ = state.closing.send(true);
        }
    }

    /// Starts a checkpoint build of the partition this origin serves, on a
    /// blocking thread (`region::checkpoint`). A build that outlives the
    /// serving is safe to finish: its looks and the model say so.
    fn build_checkpoint(&self, state: &Shared) -> Option<JoinHandle<Result<Built, WalError>>> {
        let epoch = state.store.epoch()?;
        let acknowledged = state.store.acknowledged_below()?;
        let job = checkpoint::BuildJob {
            store: Arc::clone(self.objects.get()?),
            partition: self.store.region.partition,
            epoch,
            acknowledged,
            scratch: checkpoint::scratch_dir(
                &self.data,
                self.incarnations.fetch_add(1, Relaxed) + 1,
            ),
            now: self.clock.now_ms(),
            config: self.store.region.checkpoint.clone(),
            metrics: Arc::clone(&self.metrics),
            stopping: Arc::clone(&self.builds_stop),
        };
        Some(tokio::task::spawn_blocking(move || checkpoint::build(&job)))
    }

    /// Counts and logs what a checkpoint build did.
    fn built(&self, outcome: Result<Result<Built, WalError>, tokio::task::JoinError>) {
        match outcome {
            Ok(Ok(Built::NotYet)) => {}
            Ok(Ok(Built::Published {
                number,
                streams,
                bytes,
                parts,
                deleted,
            })) => {
                tracing::info!(
                    number,
                    streams,
                    bytes,
                    parts,
                    deleted,
                    "checkpointed the partition in the bucket"
                );
            }
            Ok(Ok(Built::GaveUp(why))) => {
                self.metrics.checkpoint_failures.fetch_add(1, Relaxed);
                tracing::info!(why, "a checkpoint build gave up");
            }
            Ok(Err(e)) => {
                self.metrics.checkpoint_failures.fetch_add(1, Relaxed);
                tracing::warn!(error = %e, "a checkpoint build failed; the next one tries again");
            }
            Err(e) => {
                self.metrics.checkpoint_failures.fetch_add(1, Relaxed);
                tracing::error!(error = %e, "a checkpoint build's task failed");
            }
        }
    }

    /// Starts a claim: a new store in a folder of its own, replayed from
    /// the bucket on a blocking thread.
    fn claim(&self) -> Claiming {
        self.step_down(Current::Joining);
        let n = self.incarnations.fetch_add(1, Relaxed) + 1;
        let mut config = self.store.clone();
        config.data = self.data.join("region").join(n.to_string());
        let dir = config.data.clone();
        let (http, clock, keys) = (
            self.http.clone(),
            Arc::clone(&self.clock),
            self.data.clone(),
        );
        tracing::info!(folder = %dir.display(), "claiming the partition");
        let objects = Arc::clone(self.objects.get().expect("set before the loop"));
        let task = tokio::spawn(async move {
            // The region's signing key and key store first: keys and tokens
            // made on an earlier owner work here too.
            crate::region::auth_sync::fetch(&*objects, &keys).await?;
            tokio::task::spawn_blocking(move || {
                super::open_state(config, http, clock, &keys).map(|(state, _)| state)
            })
            .await
            .map_err(std::io::Error::other)?
        });
        (dir, task)
    }

    /// Serves what a claim opened; false if it failed.
    fn claimed(
        &self,
        dir: PathBuf,
        outcome: Result<std::io::Result<Shared>, tokio::task::JoinError>,
    ) -> bool {
        match outcome {
            Ok(Ok(state)) => {
                let epoch = state.store.epoch().unwrap_or(0);
                self.metrics.claims.fetch_add(1, Relaxed);
                tracing::info!(
                    epoch,
                    streams = state.store.stream_count(),
                    "serving the partition"
                );
                *self.current.write() = Current::Serving {
                    state,
                    epoch,
                    dir: dir.into(),
                };
                // If a newer claim came meanwhile, the next look sees it.
                if *self.closing.borrow() {
                    if let Current::Serving { state, .. } = self.current() {
                        let _ = state.closing.send(true);
                    }
                }
                true
            }
            Ok(Err(e)) => {
                self.metrics.claim_failures.fetch_add(1, Relaxed);
                tracing::warn!(error = %e, "the claim did not make this origin the owner");
                remove_later(dir);
                false
            }
            Err(e) => {
                self.metrics.claim_failures.fetch_add(1, Relaxed);
                tracing::error!(error = %e, "the claim's task failed");
                remove_later(dir);
                false
            }
        }
    }

    /// Forwards to `url` from now on; a store this origin served (of an
    /// older epoch, fenced) stops in the background.
    fn follow(&self, url: String) {
        if matches!(&*self.current.read(), Current::Following { url: u } if **u == *url) {
            return;
        }
        tracing::info!(owner = %url, "following the partition's owner");
        self.step_down(Current::Following {
            url: url.as_str().into(),
        });
    }

    /// Moves to `next`; a store this origin served stops in the background
    /// (its live reads end, its folder goes), and answers forwarded under
    /// the state left behind end.
    fn step_down(&self, next: Current) {
        let previous = std::mem::replace(&mut *self.current.write(), next);
        self.generation.send_modify(|g| *g += 1);
        if let Current::Serving { state, dir, .. } = previous {
            tracing::warn!("this origin no longer serves the partition; its store stops");
            let _ = state.closing.send(true);
            tokio::spawn(async move {
                state.store.shutdown().await;
                drop(state);
                remove_later(dir.to_path_buf());
            });
        }
    }

    /// Resolves when this origin starts to stop or leaves the state it is
    /// in now (a forwarded answer to an owner it no longer follows ends).
    fn ended(&self) -> futures::future::BoxFuture<'static, ()> {
        let mut closing = self.closing.subscribe();
        let mut generation = self.generation.subscribe();
        let now = *generation.borrow_and_update();
        async move {
            tokio::select! {
                _ = closing.wait_for(|c| *c) => {}
                _ = generation.wait_for(|g| *g != now) => {}
            }
        }
        .boxed()
    }
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

/// Answers one request: the server's own endpoints here, stream requests
/// by the store it serves or the owner it follows.
async fn handle<B>(me: Arc<RegionOrigin>, req: axum::http::Request<B>) -> Response<Body>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let current = me.current();
    if req.method() == Method::GET {
        match req.uri().path() {
            routes::METRICS => {
                let mut text = match &current {
                    Current::Serving { state, .. } => http::metrics_text(state),
                    _ => String::new(),
                };
                let (serving, following, epoch) = match &current {
                    Current::Serving { epoch, .. } => (1, 0, *epoch),
                    Current::Following { .. } => (0, 1, 0),
                    Current::Joining => (0, 0, 0),
                };
                me.metrics.render_into(&mut text, serving, following, epoch);
                return http::metrics_response(text);
            }
            routes::HEALTH => return http::health_response(),
            _ => {}
        }
    }
    match current {
        Current::Serving { state, .. } => http::handle(state, req).await,
        Current::Following { url } => {
            me.forwarder
                .forward(&url, req.map(Body::new), me.ended())
                .await
        }
        Current::Joining => {
            let mut r = ApiError::Busy(
                "this origin is joining its region or taking the partition over; retry shortly",
            )
            .into_response();
            http::common_headers(&mut r, true);
            r
        }
    }
}
