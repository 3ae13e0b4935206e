//! Wiring: open the store, serve HTTP on a listener until told to stop, then
//! stop the writer after the last answer.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::clock::{Clock, SystemClock};
use crate::connection;
use crate::drain::Drain;
use crate::http::{self, AppState, HttpConfig};
use crate::metrics::Metrics;
use crate::peer::Peer;
use crate::store::{RecoveryReport, Store, StoreConfig};

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
        let metrics = Arc::new(Metrics::default());
        let store_data = store.data.clone();
        let (store, report) = Store::open(store, clock, Arc::clone(&metrics))?;
        let ingress = http::OwnLines(Semaphore::new(
            usize::try_from(http.ingress_budget)
                .unwrap_or(usize::MAX)
                .min(Semaphore::MAX_PERMITS),
        ));
        let closing = tokio::sync::watch::Sender::new(false);
        let auth = crate::auth::Auth::open(&store_data, http.auth.clone())?;
        let state = Arc::new(AppState {
            auth,
            store,
            config: http,
            metrics,
            ingress,
            closing,
        });
        Ok(Origin { state, report })
    }

    /// Serves until `shutdown` resolves, then drains and stops the store.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let store = self.state.store.clone();
        // Once a second: expire idle streams, pick up key changes made by
        // the admin CLI (a revoked key stops working within a second), and
        // forget accounts idle for a while.
        let sweeper = tokio::spawn({
            let state = self.state.clone();
            async move {
                let mut tick = tokio::time::interval(Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    state.store.tick().await;
                    if let Err(e) = state.auth.keys.reload_if_changed() {
                        tracing::error!(error = %e, "could not reload the key store");
                    }
                    state.auth.limits.sweep(std::time::Instant::now());
                }
            }
        });
        let closing = self.state.closing.clone();
        let shutdown = async move {
            shutdown.await;
            closing.send_replace(true);
        };
        let result = accept_loop(self.state, listener, shutdown).await;
        sweeper.abort();
        store.shutdown().await;
        result
    }
}

/// Serves HTTP/1.1 and HTTP/2 connections until `shutdown`, then lets the
/// open requests finish (live reads end at once, see `AppState::closing`).
async fn accept_loop(
    state: http::Shared,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let drain = Arc::new(Drain::default());
    let cap = match state.config.max_connections {
        0 => (crate::store::descriptor_limit() / 2).max(64) as usize,
        n => n,
    };
    tracing::info!(max_connections = cap, "connections served at once at most");
    // A connection holds a permit for its life: at the cap, no more are
    // accepted until one closes (they wait in the kernel's backlog).
    let connections = Arc::new(tokio::sync::Semaphore::new(
        cap.min(tokio::sync::Semaphore::MAX_PERMITS),
    ));
    let header_read_timeout = state.config.header_read_timeout;
    tokio::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&connections).acquire_owned() => p.expect("never closed"),
            _ = &mut shutdown => break,
        };
        let (stream, _) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of file descriptors and the like: wait, then go on.
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = &mut shutdown => break,
        };
        // Answers are small and latency-bound: send them without Nagle's delay.
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let service = move |peer: Option<Peer>| {
            hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
                let state = state.clone();
                // Only reads wait for their client (long-polls, SSE).
                if let (&hyper::Method::GET, Some(peer)) = (req.method(), &peer) {
                    req.extensions_mut().insert(peer.clone());
                }
                // Boxed: hyper moves the future it is given into its slot
                // for the request in flight, a copy of the whole future (3 KiB)
                // into memory that is cold per connection: 2.6 % of the
                // workers' time under the append benchmark (perf).
                Box::pin(async move {
                    Ok::<_, std::convert::Infallible>(http::handle(state, req).await)
                })
            })
        };
        let member = drain.enter();
        tokio::spawn(async move {
            connection::serve(stream, service, member, header_read_timeout).await;
            drop(permit);
        });
    }
    drop(listener);
    drain.shutdown().await;
    Ok(())
}
