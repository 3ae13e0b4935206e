//! The accept loop: connections are served until the shutdown future
//! resolves, then drained. A semaphore caps how many are served at once
//! (mini-redis's model): each connection holds a permit for its life, and at
//! the cap the loop stops accepting, so the rest wait in the kernel's
//! backlog instead of costing descriptors and memory here.
//!
//! Every request reaches the handler with its body wrapped in an
//! [`IdleBody`] (or none, on the light path: [`RequestBody`]), and runs as its request's context (`request_id`), which
//! names its [`Client`] (who sent it: `request_id::client()`).

use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http::{Request, Response};
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

use crate::body::IdleBody;
use crate::config::ServeConfig;
use crate::connection;
use crate::drain::Drain;
use crate::peer::Peer;
use crate::request_body::RequestBody;
use crate::request_id;

/// How HTTP/1.1 connections notice a client that leaves mid-request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Http1 {
    /// hyper reads the socket after each body and drops the request's
    /// future when the client has gone (the edge, whose waiting requests are
    /// shared and cheap to drop).
    HyperWatches,
    /// Served half-closed: hyper skips that read (an 8 KiB buffer per
    /// request), and the requests that wait watch [`Client::peer`]
    /// themselves (the origin's append path).
    RequestsWatch,
}

/// Who sent a request: the socket's peer address, and on a half-closed
/// HTTP/1.1 connection the client to watch (see [`crate::peer`]).
#[derive(Clone, Debug)]
pub struct Client {
    pub addr: SocketAddr,
    pub peer: Option<Peer>,
}

/// Serves `listener` until `shutdown` resolves, answering every request
/// with `handler` (whose future comes boxed: see [`Served::call`]); then lets the open requests finish and returns. It
/// serves `held` first: connections accepted while the server was
/// recovering (`crate::recovering`), oldest first (none: `Vec::new()`).
pub async fn serve<H, F, B>(
    listener: TcpListener,
    held: Vec<crate::recovering::Held>,
    config: &ServeConfig,
    http1: Http1,
    shutdown: impl Future<Output = ()> + Send + 'static,
    handler: H,
) -> std::io::Result<()>
where
    H: Fn(Request<RequestBody>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + Unpin + 'static,
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let drain = Arc::new(Drain::default());
    // One copy for every connection to share.
    let shared_config = Arc::new(config.clone());
    // The light path's waiting answers (`crate::lot`).
    let lot = crate::lot::Lot::new(Arc::clone(&shared_config), http1);
    let cap = config.connection_cap();
    tracing::info!(max_connections = cap, "connections served at once at most");
    let connections = Arc::new(Semaphore::new(cap));
    tokio::pin!(shutdown);
    let mut held = held.into_iter();
    loop {
        let permit = tokio::select! {
            p = Arc::clone(&connections).acquire_owned() => p.expect("never closed"),
            _ = &mut shutdown => break,
        };
        let (stream, addr) = if let Some(h) = held.next() {
            h
        } else {
            tokio::select! {
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
            }
        };
        // Answers are small and latency-bound: send them without Nagle's delay.
        let _ = stream.set_nodelay(true);
        let served = Served {
            handler: handler.clone(),
            addr,
            idle: config.body_idle_timeout,
        };
        // Spawned as it is, not wrapped in a block that moves it in: a
        // block's captures keep their own room in its state beside the
        // future they were moved into, for the connection's life.
        tokio::spawn(connection::serve(
            stream,
            served,
            Some((drain.enter(), permit)),
            Arc::clone(&lot),
            None,
        ));
    }
    drop(listener);
    drain.shutdown().await;
    Ok(())
}

/// What a connection calls for each of its requests: the server's handler,
/// run as the request's context.
#[derive(Clone)]
pub(crate) struct Served<H> {
    handler: H,
    addr: SocketAddr,
    idle: Duration,
}

impl<H, F, B: 'static> Served<H>
where
    H: Fn(Request<RequestBody>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + Unpin + 'static,
{
    /// The answer to `req`, from a client to watch on a half-closed
    /// HTTP/1.1 connection (`peer`).
    pub(crate) fn call(
        &self,
        req: Request<RequestBody>,
        peer: Option<Peer>,
    ) -> request_id::Answered<F> {
        // Its id (the client's, if valid), arrival and sender, for the
        // request's task (`request_id::client`; what it passes on carries
        // the id: `request_id::pass_on`); the id is echoed on the answer.
        let mut ctx = request_id::from_headers(req.headers());
        ctx.client = Some(Client {
            addr: self.addr,
            peer,
        });
        // The handler's future comes boxed (hence `Unpin`): every layer
        // a future is wrapped in moves it whole, and hyper moves what it is
        // given into its slot for the request in flight, so only a pointer
        // should move. The server boxes it, not the shell: it knows the
        // request's kind, and a waiting read's future need not be the size
        // of an append's (origin `http::handle`).
        let answer = (self.handler)(req);
        request_id::answered(ctx, answer)
    }

    /// The connection's service for hyper.
    pub(crate) fn service(
        self,
        peer: Option<Peer>,
    ) -> impl hyper::service::HttpService<
        Incoming,
        ResBody = B,
        Error = Infallible,
        Future: Send + 'static,
    > + Clone
           + Send
           + 'static
    where
        B: http_body::Body + Send + 'static,
    {
        hyper::service::service_fn(move |req: Request<Incoming>| {
            let req = req.map(|b| RequestBody::Hyper(IdleBody::new(b, self.idle)));
            let answer = self.call(req, peer.clone());
            async move { Ok::<_, Infallible>(answer.await) }
        })
    }
}
#[cfg(test)]
impl<H> Served<H> {
    pub(crate) fn new_for_probe(handler: H) -> Self {
        Served {
            handler,
            addr: "127.0.0.1:1".parse().unwrap(),
            idle: Duration::from_secs(1),
        }
    }
}
