//! Wiring: serve HTTP on a listener until told to stop, end live reads,
//! then let the open answers finish.

use std::future::Future;
use std::time::Duration;

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

    /// What `/readyz` reads: set it (`shell::signal::after_drain`) to say
    /// draining before `shutdown` resolves.
    pub fn draining(&self) -> shell::ready::Draining {
        self.state.draining.clone()
    }

    /// Serves until `shutdown` resolves; live reads end at once, the rest
    /// finish.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        let shutdown = shell::signal::announced(
            shutdown,
            self.state.closing.clone(),
            self.state.draining.clone(),
        );
        let state = self.state;
        // Once a second: forget rate-limit budgets idle for a while.
        let _sweeper = shell::periodic::every(Duration::from_secs(1), {
            let state = state.clone();
            move || {
                state.access.limits().sweep(shell::clock::now());
                std::future::ready(())
            }
        });
        let serve = state.config.limits.serve.clone();
        shell::serve(
            listener,
            Vec::new(),
            &serve,
            Http1::HyperWatches,
            shutdown,
            move |req| http::handle(state.clone(), req),
        )
        .await
    }
}
