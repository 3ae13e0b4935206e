//! One accepted connection: which HTTP version it speaks, then serving it
//! until it ends or the server drains.
//!
//! `hyper_util`'s automatic builder answers the same question by reading
//! into a buffer of its own and replaying it through a wrapper around the
//! socket; the wrapper, and the builder's own future, sit on every read and
//! every poll of every request after that. Here the first bytes are only
//! peeked at, once per connection, and the connection is then served by
//! hyper's HTTP/1.1 or HTTP/2 connection directly.
//!
//! An HTTP/1.1 connection whose request is a tail (a long-poll or an SSE
//! read) is served on the light path without hyper ([`crate::light_path`])
//! until a request that is not one arrives; hyper serves it from there.
//!
//! HTTP/1.1 runs with `half_close` when the server asks for it
//! ([`Http1::RequestsWatch`]): hyper does not read the socket while a
//! request is answered, and the requests that wait watch for their client
//! themselves (see [`crate::peer`]).
//!
//! A connection that says nothing within `header_read_timeout` of opening
//! is closed before its version is known. HTTP/2 has no header-read timeout
//! of its own: a connection with no request in flight for
//! `header_read_timeout` is asked to close ([`crate::idle`]), one has at
//! most `http2_max_streams` requests at once, its bodies have the body idle
//! timeout, and hyper's keep-alive pings close one whose client stopped
//! answering while requests are in flight.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use http::{Request, Response};
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::graceful::GracefulConnection;
use tokio::io::ReadBuf;
use tokio::net::TcpStream;

use crate::accept::{Http1, Served};
use crate::config::ServeConfig;
use crate::drain::Member;
use crate::idle::{Activity, Tracked};
use crate::lot::{Lot, Parked};
use crate::peer;
use crate::request_body::RequestBody;

/// What an HTTP/2 connection with prior knowledge starts with. No HTTP/1
/// request can start with its method (`PRI`): three bytes tell them apart.
const H2_START: &[u8] = b"PRI";

/// Serves `stream` until the client leaves or the drain closes it, calling
/// `served` for each request. An HTTP/1.1 client that sends no whole
/// request head within `header_read_timeout` of the connection being ready
/// for one (opened, or idle after an answer) is disconnected. HTTP/1.1
/// tails go the light path first (`crate::light_path`); hyper's connections
/// are boxed, so a connection on the light path carries none of their
/// state.
pub(crate) async fn serve<H, F, B>(
    stream: TcpStream,
    served: Served<H>,
    // Its place in the drain, and among `max_connections`: held for the
    // connection's life (or handed over with it: `crate::detached`,
    // `crate::lot`).
    mut held: Option<(Member, tokio::sync::OwnedSemaphorePermit)>,
    lot: Arc<Lot<H, F, B>>,
    // Taken up again from a parked answer, now there (`crate::lot`).
    answer: Option<Box<(Response<B>, bool)>>,
) where
    H: Fn(Request<RequestBody>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + Unpin + 'static,
    B: AnswerBody,
{
    let config = &lot.config;
    let Some((member, _)) = &mut held else {
        return;
    };
    // (Awaited where made: a future bound to a name keeps its room in this
    // one's state for the connection's life, moved out or not.)
    let h2 = answer.is_none()
        && match tokio::time::timeout(config.header_read_timeout, speaks_h2(&stream, member)).await
        {
            Ok(Some(h2)) => h2,
            _ => return, // silent too long, closed, or draining
        };
    let stream = if h2 {
        stream
    } else if config.light_path || answer.is_some() {
        let ended = crate::light_path::serve(
            stream,
            |req| served.call(req, None),
            &mut held,
            answer,
            config.light_head_bytes,
            config.header_read_timeout,
        )
        .await;
        match ended {
            crate::light_path::Ended::Hyper(stream) => stream,
            crate::light_path::Ended::Closed => return,
            crate::light_path::Ended::Parked(stream, answer, close) => {
                if let Some(held) = held.take() {
                    lot.park(Parked {
                        stream,
                        answer,
                        close,
                        held,
                        served,
                    });
                }
                return;
            }
        }
    } else {
        stream
    };
    let Some((member, _permit)) = held else {
        return;
    };
    if h2 {
        Box::pin(serve_h2(stream, served, member, config)).await;
    } else {
        Box::pin(serve_h1(stream, served, member, config, lot.http1)).await;
    }
}

async fn serve_h2<H, F, B>(
    stream: TcpStream,
    served: Served<H>,
    member: Member,
    config: &ServeConfig,
) where
    H: Fn(Request<RequestBody>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + Unpin + 'static,
    B: AnswerBody,
{
    let activity = Arc::new(Activity::default());
    let service = Tracked {
        inner: served.service(None),
        activity: Arc::clone(&activity),
    };
    let conn = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
        .timer(hyper_util::rt::TokioTimer::new())
        .max_concurrent_streams(config.http2_max_streams)
        .keep_alive_interval(config.http2_keep_alive)
        .keep_alive_timeout(config.http2_keep_alive)
        .serve_connection(TokioIo::new(stream), service);
    until_drained(conn, member, Some((&activity, config.header_read_timeout))).await;
}

async fn serve_h1<H, F, B>(
    stream: TcpStream,
    served: Served<H>,
    member: Member,
    config: &ServeConfig,
    http1: Http1,
) where
    H: Fn(Request<RequestBody>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + Unpin + 'static,
    B: AnswerBody,
{
    let mut h1 = hyper::server::conn::http1::Builder::new();
    h1.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(config.header_read_timeout);
    match http1 {
        Http1::RequestsWatch => {
            let (io, peer) = peer::share(stream);
            let conn = h1
                .half_close(true)
                .serve_connection(TokioIo::new(io), served.service(Some(peer)));
            until_drained(conn, member, None).await;
        }
        Http1::HyperWatches => {
            let conn = h1.serve_connection(TokioIo::new(stream), served.service(None));
            until_drained(conn, member, None).await;
        }
    }
}

/// What an answer's body must be for hyper and the light path to send it.
pub(crate) trait AnswerBody:
    hyper::body::Body<Data: Send, Error: Into<Box<dyn std::error::Error + Send + Sync>>>
    + Send
    + Unpin
    + 'static
{
}

impl<B> AnswerBody for B where
    B: hyper::body::Body<Data: Send, Error: Into<Box<dyn std::error::Error + Send + Sync>>>
        + Send
        + Unpin
        + 'static
{
}

/// Whether the connection opens with HTTP/2's preface; `None` when it closes
/// (or the server drains) before saying anything.
async fn speaks_h2(stream: &TcpStream, member: &mut Member) -> Option<bool> {
    loop {
        let mut bytes = [0u8; 3];
        let peeked = poll_fn(|cx| {
            if member.should_close(cx) {
                return Poll::Ready(None);
            }
            let mut buf = ReadBuf::new(&mut bytes);
            match stream.poll_peek(cx, &mut buf) {
                Poll::Ready(Ok(n)) => Poll::Ready(Some(n)),
                Poll::Ready(Err(_)) => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await?;
        match decide(&bytes[..peeked]) {
            Decided::Version(h2) => return Some(h2),
            Decided::Closed => return None,
            // Fewer bytes than it takes to tell, all of them a start of
            // `PRI`: the rest is on its way (peeking again at once would
            // spin on the same bytes).
            Decided::NeedMore => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Decided {
    Version(bool),
    Closed,
    NeedMore,
}

fn decide(first: &[u8]) -> Decided {
    if first.is_empty() {
        Decided::Closed
    } else if first.len() >= H2_START.len() {
        Decided::Version(first.starts_with(H2_START))
    } else if H2_START.starts_with(first) {
        Decided::NeedMore
    } else {
        Decided::Version(false)
    }
}

/// Drives `conn` to its end; once the drain starts, or (given `idle`) once
/// it had no request in flight for that long, asks it (once) to finish the
/// request in flight and close. An idle connection asked to close that is
/// still open as long again is dropped (HTTP/2's goodbye waits for the
/// client to answer a ping, which a hostile one never does).
async fn until_drained<C: GracefulConnection>(
    conn: C,
    mut member: Member,
    idle: Option<(&Arc<Activity>, Duration)>,
) {
    let mut conn = std::pin::pin!(conn);
    let mut asked = false;
    // The idle timer, and the change of activity it was armed at.
    let mut timer: Option<(Pin<Box<tokio::time::Sleep>>, u64)> = None;
    let mut idle_goodbye: Option<Pin<Box<tokio::time::Sleep>>> = None;
    poll_fn(|cx| {
        if !asked && member.should_close(cx) {
            conn.as_mut().graceful_shutdown();
            asked = true;
        }
        if let (false, Some((activity, after))) = (asked, idle) {
            match activity.idle(cx) {
                (true, change) => {
                    let deadline = tokio::time::Instant::now() + after;
                    let t = match &mut timer {
                        Some((t, at)) if *at == change => t,
                        _ => {
                            &mut timer
                                .insert((Box::pin(tokio::time::sleep_until(deadline)), change))
                                .0
                        }
                    };
                    if t.as_mut().poll(cx).is_ready() {
                        conn.as_mut().graceful_shutdown();
                        asked = true;
                        // Idle and told so: a client that does not take
                        // its leave within as long again is dropped.
                        let leave = tokio::time::Instant::now() + after;
                        idle_goodbye = Some(Box::pin(tokio::time::sleep_until(leave)));
                    }
                }
                (false, _) => timer = None,
            }
        }
        if let Some(goodbye) = &mut idle_goodbye {
            if goodbye.as_mut().poll(cx).is_ready() {
                return Poll::Ready(());
            }
        }
        conn.as_mut().poll(cx).map(|_| ())
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_bytes_tell_the_version() {
        assert_eq!(decide(b"POS"), Decided::Version(false));
        assert_eq!(decide(b"GET"), Decided::Version(false));
        assert_eq!(decide(b"PUT"), Decided::Version(false));
        assert_eq!(decide(b"PRO"), Decided::Version(false));
        assert_eq!(decide(b"G"), Decided::Version(false));
        assert_eq!(decide(b"PRI"), Decided::Version(true));
        assert_eq!(decide(b"P"), Decided::NeedMore);
        assert_eq!(decide(b"PR"), Decided::NeedMore);
        assert_eq!(decide(b""), Decided::Closed);
    }
}
#[cfg(test)]
mod size {
    /// Every connection's task is as large as its future's largest state;
    /// hyper's connections are boxed apart, so a connection waiting on the
    /// light path (or silent) carries ~700 bytes, not hyper's state.
    #[tokio::test]
    async fn a_connection_carries_none_of_hypers_state() {
        use crate::request_body::RequestBody;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let c = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (s, _) = listener.accept().await.unwrap();
        let drain = std::sync::Arc::new(crate::drain::Drain::default());
        let served = crate::accept::Served::new_for_probe(|_req: http::Request<RequestBody>| {
            Box::pin(
                async move { http::Response::new(http_body_util::Empty::<bytes::Bytes>::new()) },
            )
        });
        let config = crate::config::ServeConfig::default();
        let permit = std::sync::Arc::new(tokio::sync::Semaphore::new(1))
            .try_acquire_owned()
            .unwrap();
        let lot = crate::lot::Lot::new(
            std::sync::Arc::new(config.clone()),
            crate::accept::Http1::HyperWatches,
        );
        let f = super::serve(s, served, Some((drain.enter(), permit)), lot, None);
        let size = std::mem::size_of_val(&f);
        assert!(size < 800, "a connection's future is {size} bytes");
        drop(c);
    }
}
