//! Waiting requests to the origin (the shared tails' long-polls, collapsed
//! long-polls, the invalidation feed) over HTTP/2: many at once over few
//! connections.
//!
//! Over HTTP/1.1 each waiting request holds a connection of its own for as
//! long as it waits: 10,000 tailed streams were 10,000 connections from
//! each edge, and at the origin a connection's buffers and future for
//! each (~22 KiB, `docs/decisions/0020-idle-reader-cost.md`). Here each
//! origin gets at most `connections` HTTP/2 connections (prior knowledge,
//! `h2c`: the origin's listener tells HTTP/2 from HTTP/1.1 by the
//! preface), each carrying at most `streams` requests at once (below the
//! origin's own `SETTINGS_MAX_CONCURRENT_STREAMS`, 256 by default, so a
//! request never queues inside the connection). A request goes on the
//! first open connection with room (filling connections before opening
//! more, so few stay open); a new connection is opened when none has room;
//! at `connections × streams` requests in flight to one origin a new one
//! is refused at once ([`MultiplexError::Full`]: the tail ends and its
//! readers reconnect, a long-poll answers 503 + `Retry-After`). A
//! connection that failed or was closed by the origin is dropped from the
//! pool at the next request; the requests on it fail as with HTTP/1.1.
//!
//! Ordinary requests (forwards, chunk and catch-up reads) stay on the
//! HTTP/1.1 pool: they are short, and one TCP connection each keeps a slow
//! body from holding up others.

use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};

use crate::metrics::{Gauge, Metrics};

/// How long opening a connection may take before the origin counts as
/// unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The bounds of the edge's connections to each origin: the HTTP/2 pool's,
/// and how many idle HTTP/1.1 connections the other requests keep.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MultiplexLimits {
    /// HTTP/2 connections open to one origin at most.
    pub connections: usize,
    /// Requests in flight on one connection at most.
    pub streams: usize,
    /// Idle HTTP/1.1 connections (of the other requests) kept open to one
    /// origin for reuse, at most; one more idle is closed.
    pub idle_http1: usize,
    /// Waiting requests in flight to one origin over HTTP/1.1 (where it
    /// does not speak HTTP/2: `upstream::waiting`), a connection each, at
    /// most; one more is refused at once, as at the HTTP/2 bound.
    pub http1_waiting: usize,
}

impl Default for MultiplexLimits {
    fn default() -> Self {
        MultiplexLimits {
            connections: 64,
            streams: 200,
            idle_http1: 1024,
            http1_waiting: 4096,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MultiplexError {
    #[error("the origin could not be reached: {0}")]
    Connect(#[source] std::io::Error),
    #[error("the HTTP/2 handshake with the origin failed")]
    Handshake(#[source] hyper::Error),
    #[error("the origin's answer failed")]
    Request(#[source] hyper::Error),
    #[error("a waiting request over HTTP/1.1 failed")]
    Http1(#[source] hyper_util::client::legacy::Error),
    #[error("every connection to the origin carries as many waiting requests as it may")]
    Full,
}

impl MultiplexError {
    /// Whether the origin could not be reached at all (the next origin
    /// may be tried).
    pub fn is_connect(&self) -> bool {
        match self {
            MultiplexError::Connect(_) | MultiplexError::Handshake(_) => true,
            MultiplexError::Http1(e) => e.is_connect(),
            _ => false,
        }
    }
}

struct Connection {
    send: http2::SendRequest<Body>,
    in_flight: Arc<AtomicUsize>,
    /// Counted open while in the pool.
    _open: Gauge,
}

/// Requests in flight on a connection (or, over HTTP/1.1, to an origin),
/// one of them until dropped (held until the answer's body has been read).
pub struct Stream {
    in_flight: Arc<AtomicUsize>,
    _counted: Gauge,
}

impl Stream {
    /// One more of `in_flight`, unless `limit` are already.
    pub(super) fn take(
        in_flight: &Arc<AtomicUsize>,
        limit: usize,
        counted: Gauge,
    ) -> Option<Stream> {
        in_flight
            .fetch_update(Relaxed, Relaxed, |n| (n < limit).then_some(n + 1))
            .ok()?;
        Some(Stream {
            in_flight: Arc::clone(in_flight),
            _counted: counted,
        })
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.in_flight.fetch_sub(1, Relaxed);
    }
}

/// The HTTP/2 connections to each origin (by its index in the edge's
/// list).
pub struct Multiplexed {
    limits: MultiplexLimits,
    /// Held across a connection's opening: two requests that find no room
    /// open one connection, not two.
    origins: Box<[tokio::sync::Mutex<Vec<Connection>>]>,
    metrics: Arc<Metrics>,
}

impl Multiplexed {
    pub fn new(origins: usize, limits: MultiplexLimits, metrics: Arc<Metrics>) -> Multiplexed {
        Multiplexed {
            limits: MultiplexLimits {
                connections: limits.connections.max(1),
                streams: limits.streams.max(1),
                ..limits
            },
            origins: (0..origins).map(|_| Default::default()).collect(),
            metrics,
        }
    }

    /// Sends `req` on a connection [`Multiplexed::room`] gave; the answer,
    /// and the stream to hold until its body is read.
    pub async fn send(
        mut send: http2::SendRequest<Body>,
        req: Request<Body>,
        stream: Stream,
    ) -> Result<(Response<Incoming>, Stream), MultiplexError> {
        let answer = async {
            send.ready().await.map_err(MultiplexError::Request)?;
            send.send_request(req)
                .await
                .map_err(MultiplexError::Request)
        };
        Ok((answer.await?, stream))
    }

    /// A connection to `origin` (at `uri`'s authority) with room for one
    /// more request, opened if none has any.
    pub async fn room(
        &self,
        origin: usize,
        uri: &Uri,
    ) -> Result<(http2::SendRequest<Body>, Stream), MultiplexError> {
        let mut pool = self.origins[origin].lock().await;
        pool.retain(|c| !c.send.is_closed());
        let found = pool
            .iter()
            .find(|c| c.in_flight.load(Relaxed) < self.limits.streams);
        let connection = match found {
            Some(c) => c,
            None if pool.len() < self.limits.connections => {
                let send = connect(uri).await?;
                pool.push(Connection {
                    send,
                    in_flight: Arc::default(),
                    _open: self.metrics.multiplexed_connection_guard(),
                });
                pool.last().expect("just pushed")
            }
            None => return Err(MultiplexError::Full),
        };
        let stream = Stream::take(
            &connection.in_flight,
            self.limits.streams,
            self.metrics.multiplexed_stream_guard(),
        )
        .ok_or(MultiplexError::Full)?;
        Ok((connection.send.clone(), stream))
    }
}

/// Opens an HTTP/2 connection (prior knowledge) to `uri`'s authority.
async fn connect(uri: &Uri) -> Result<http2::SendRequest<Body>, MultiplexError> {
    let authority = uri
        .authority()
        .map(|a| a.as_str().to_owned())
        .ok_or_else(|| {
            MultiplexError::Connect(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "no address in the origin's URL",
            ))
        })?;
    let tcp = tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(authority))
        .await
        .map_err(|_| MultiplexError::Connect(std::io::ErrorKind::TimedOut.into()))?
        .map_err(MultiplexError::Connect)?;
    let _ = tcp.set_nodelay(true);
    let (send, connection) = http2::Builder::new(TokioExecutor::new())
        .timer(TokioTimer::new())
        // A dead origin is noticed while every request on it waits.
        .keep_alive_interval(Duration::from_secs(20))
        .keep_alive_timeout(Duration::from_secs(20))
        .keep_alive_while_idle(true)
        .handshake(TokioIo::new(tcp))
        .await
        .map_err(MultiplexError::Handshake)?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::debug!(error = %e, "an HTTP/2 connection to the origin ended");
        }
    });
    Ok(send)
}
