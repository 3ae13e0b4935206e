//! Wiring: serve HTTP on a listener until told to stop, end live reads,
//! then let the open answers finish.

use std::future::Future;

use shell::Http1;
use tokio::net::TcpListener;

use crate::config::EdgeConfig;
use crate::http::{self, EdgeState, Shared};

/// A running edge's parts, for tests and the binary.
pub struct Edge {
    pub state: Shared,
}

impl Edge {
    /// Fails only when the object store named cannot be opened.
    pub fn new(config: EdgeConfig) -> Result<Edge, crate::objects::OpenError> {
        Ok(Edge {
            state: EdgeState::new(config)?,
        })
    }

    /// Serves until `shutdown` resolves; live reads end at once, the rest
    /// finish.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let closing = self.state.closing.clone();
        let shutdown = async move {
            shutdown.await;
            closing.send_replace(true);
        };
        let state = self.state;
        // Once a second: forget rate-limit budgets idle for a while.
        let sweeper = tokio::spawn({
            let state = state.clone();
            async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    let now = shell::clock::now();
                    state.access.limits().sweep(now);
                }
            }
        });
        let serve = state.config.limits.serve.clone();
        let served = shell::serve(
            listener,
            &serve,
            Http1::HyperWatches,
            shutdown,
            move |req| http::handle(state.clone(), req),
        )
        .await;
        sweeper.abort();
        served
    }
}
