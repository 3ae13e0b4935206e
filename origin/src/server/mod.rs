//! Wiring: open the store, serve HTTP on a listener until told to stop, then
//! stop the writer after the last answer.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use shell::Http1;
use tokio::net::TcpListener;

use crate::clock::{Clock, SystemClock};
use crate::http::{self, AppState, HttpConfig};
use crate::metrics::Metrics;
use crate::store::{RecoveryReport, Store, StoreConfig};

pub mod region;

/// Opens a store and the request handlers' state around it; the key store
/// is read from `keys` (the data directory, which a region origin's
/// stores live under).
pub fn open_state(
    store: StoreConfig,
    http: HttpConfig,
    clock: Arc<dyn Clock>,
    keys: &std::path::Path,
) -> std::io::Result<(http::Shared, RecoveryReport)> {
    open_state_sharing(store, http, clock, keys, None)
}

/// What the stores of one origin share, so that its bounds are the
/// origin's and not each store's: the request body budget and each
/// account's rate and tail limits (a region origin serves a store per
/// partition).
#[derive(Clone)]
pub struct Sharing {
    pub ingress: Arc<http::ingress::Ingress>,
    pub limits: Arc<shared::limits::Limits>,
    /// One set of request series and histograms for the whole origin.
    pub timings: Arc<crate::metrics::Timings>,
    /// A region's key store in its bucket, put back by the admin API.
    pub key_store: Option<Arc<crate::region::auth_sync::KeyStore>>,
}

/// [`open_state`], with the parts in `sharing` taken from there.
pub fn open_state_sharing(
    store: StoreConfig,
    http: HttpConfig,
    clock: Arc<dyn Clock>,
    keys: &std::path::Path,
    sharing: Option<&Sharing>,
) -> std::io::Result<(http::Shared, RecoveryReport)> {
    let metrics = Arc::new(match sharing {
        Some(s) => Metrics::with_timings(Arc::clone(&s.timings)),
        None => Metrics::default(),
    });
    let (store_durability, partition) = (store.durability, store.region.partition);
    let (store, report) = Store::open(store, clock, Arc::clone(&metrics))?;
    let ingress = match sharing {
        Some(s) => Arc::clone(&s.ingress),
        None => Arc::new(http::ingress::Ingress::new(&http)),
    };
    let closing = tokio::sync::watch::Sender::new(false);
    let stop = Arc::new(shell::waker_set::Closing::default());
    shell::signal::on_closing(closing.subscribe(), {
        let stop = Arc::clone(&stop);
        move || stop.close()
    });
    let mut auth = crate::auth::Auth::open(keys, http.auth.clone())?;
    if let Some(s) = sharing {
        auth.limits = Arc::clone(&s.limits);
    }
    // In a region the staged parts are in the bucket too: they move with
    // the partition.
    let bucket = match (store_durability, store.objects()) {
        (crate::store::Durability::Object, Some(objects)) => {
            Some(http::staging_bucket::StagingBucket::new(
                objects.clone(),
                partition,
                http.staged_upload_ttl,
            ))
        }
        _ => None,
    };
    let staging = match bucket {
        Some(b) => {
            http::staging::Staging::in_bucket(store.staging_dir(), &http, Arc::clone(&metrics), b)
        }
        None => http::staging::Staging::new(store.staging_dir(), &http, Arc::clone(&metrics)),
    };
    let state = Arc::new(AppState {
        staging,
        auth,
        store,
        config: http,
        metrics,
        ingress,
        closing,
        stop,
        draining: shell::ready::Draining::default(),
        key_store: sharing.and_then(|s| s.key_store.clone()),
        subscriptions: std::sync::OnceLock::new(),
        subscriptions_opening: Default::default(),
    });
    Ok((state, report))
}

/// The once-a-second work of a serving store: expire idle streams and
/// staged snapshot uploads, pick up key changes made by the admin CLI (a
/// revoked key stops working within a second), and forget accounts idle
/// for a while.
pub async fn tick(state: &AppState) {
    state.store.tick().await;
    state.staging.expire(state.store.clock().now_ms()).await;
    reload_keys(state);
    state.auth.limits.sweep(shell::clock::now());
}

/// Picks up key changes made by the admin CLI (or copied from the region's
/// bucket): a revoked key stops working within a second.
pub fn reload_keys(state: &AppState) {
    if let Err(e) = state.auth.keys.reload_if_changed() {
        tracing::error!(error = %e, "could not reload the key store");
    }
}

/// A running origin's parts, for tests and the binary.
pub struct Origin {
    pub state: http::Shared,
    pub report: RecoveryReport,
}

impl Origin {
    pub fn open(store: StoreConfig, http: HttpConfig) -> std::io::Result<Origin> {
        Self::open_with_clock(store, http, Arc::new(SystemClock))
    }

    pub fn open_with_clock(
        store: StoreConfig,
        http: HttpConfig,
        clock: Arc<dyn Clock>,
    ) -> std::io::Result<Origin> {
        let keys = store.data.clone();
        let (state, report) = open_state(store, http, clock, &keys)?;
        Ok(Origin { state, report })
    }

    /// What `/readyz` reads: set it (`shell::signal::after_drain`) to say
    /// draining before `shutdown` resolves.
    pub fn draining(&self) -> shell::ready::Draining {
        self.state.draining.clone()
    }

    /// Serves until `shutdown` resolves, then drains and stops the store.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        self.serve_held(listener, Vec::new(), shutdown).await
    }

    /// [`Origin::serve`], first serving the connections held while it
    /// recovered (`shell::recovering`).
    pub async fn serve_held(
        self,
        listener: TcpListener,
        held: Vec<shell::recovering::Held>,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let store = self.state.store.clone();
        let subscriptions = open_subscriptions(&self.state).await?;
        let engine = tokio::spawn(subscriptions.run(self.state.closing.subscribe()));
        let sweeper = shell::periodic::every(Duration::from_secs(1), {
            let state = self.state.clone();
            move || {
                let state = state.clone();
                async move { tick(&state).await }
            }
        });
        let shutdown = shell::signal::announced(
            shutdown,
            self.state.closing.clone(),
            self.state.draining.clone(),
        );
        let state = self.state;
        let serve = state.config.serve.clone();
        // Only the waiting requests watch their client (long-polls, SSE):
        // appends skip hyper's read after every body.
        let result = shell::serve(
            listener,
            held,
            &serve,
            Http1::RequestsWatch,
            shutdown,
            move |req| http::handle(state.clone(), req),
        )
        .await;
        drop(sweeper);
        // The engine stops on `closing`; a delivery in flight is sent
        // again after the restart (its wake was logged as not sent).
        let _ = engine.await;
        store.shutdown().await;
        result
    }
}

/// Opens the subscriptions of a serving store (their journal recovered)
/// and puts them in its state.
pub async fn open_subscriptions(
    state: &http::Shared,
) -> std::io::Result<Arc<crate::subscriptions::Subscriptions>> {
    let subscriptions = crate::subscriptions::Subscriptions::open(
        state.store.clone(),
        Arc::new(state.store.clone()),
        Some(&state.store.data_dir().join("subscriptions")),
        state.config.subscriptions.clone(),
        state.config.auth.default_prefix.clone(),
    )
    .await
    .map_err(|e| std::io::Error::other(format!("opening the subscriptions: {e}")))?;
    let observer: Arc<dyn crate::store::publisher::Observer> = subscriptions.clone();
    state.store.observe(observer);
    let _ = state.subscriptions.set(Arc::clone(&subscriptions));
    Ok(subscriptions)
}
