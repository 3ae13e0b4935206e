//! Wiring: serve HTTP on a listener until told to stop, end live reads,
//! then let the open answers finish.

use std::future::Future;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
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
        accept_loop(self.state, listener, shutdown).await
    }
}

async fn accept_loop(
    state: Shared,
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let builder = Builder::new(TokioExecutor::new());
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
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
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        let service = hyper::service::service_fn(move |req| {
            let state = state.clone();
            async move { Ok::<_, std::convert::Infallible>(http::handle(state, req).await) }
        });
        let conn = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let conn = graceful.watch(conn);
        tokio::spawn(async move {
            let _ = conn.await;
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}
