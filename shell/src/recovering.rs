//! What a server answers before it serves: the origin binds its listener
//! first (its first log line names the address), then replays its log,
//! which takes a while with a million streams. Meanwhile probes get an
//! answer and everything else waits, as it would in the listen backlog:
//!
//! - a connection whose first bytes are `GET /readyz` or `GET /healthz` is
//!   answered at once (`503` + `Retry-After: 1` for readiness, `200` for
//!   liveness: the process lives) and closed;
//! - any other connection is held, unread, and handed to the server once
//!   it serves ([`answer_until`] returns them), so a client that connected
//!   early is answered as if it had connected late.
//!
//! Bounded (`ServeConfig::recovering_connections`), apart for the two
//! kinds so that early clients never starve the probes:
//!
//! - at most that many connections are being looked at or answered as
//!   probes at once (past it the listener waits; each is decided within
//!   `ServeConfig::probe_timeout` and answered within twice that, so a
//!   probe waits at most that long for room);
//! - at most that many are held; a client's connection past it gives its
//!   room to look back and is answered `503` + `Retry-After: 1`
//!   (`NOT_READY`) and closed, at most that many such answers at once
//!   (past that it is closed unanswered);
//! - a connection that closes before sending anything, while it is looked
//!   at or held, is dropped at once and frees its room (one that sent its
//!   request and then left is noticed by the server when it reads it);
//! - once recovery is done, a connection still being looked at is handed
//!   to the server whatever the bound.
//!
//! A connection that shows nothing within `probe_timeout` is held too (the
//! server's own header timeout then applies to it).

use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::ReadBuf;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};

use crate::config::ServeConfig;
use crate::ready::{self, NotReady};

/// A connection accepted early, for the server to serve.
pub type Held = (TcpStream, SocketAddr);

const PROBES: [&[u8]; 2] = [b"GET /readyz", b"GET /healthz"];

/// What the first bytes say.
#[derive(Debug, PartialEq, Eq)]
enum Seen {
    Probe,
    Other,
    /// A prefix of a probe: peek again.
    More,
    /// The client closed (or the socket failed) before deciding.
    Closed,
}

fn classify(first: &[u8]) -> Seen {
    let mut more = false;
    for probe in PROBES {
        let n = first.len().min(probe.len());
        if first[..n] != probe[..n] {
            continue;
        }
        if first.len() > probe.len() {
            // The path must end there.
            return match first[probe.len()] {
                b' ' | b'?' => Seen::Probe,
                _ => Seen::Other,
            };
        }
        more = true;
    }
    if more {
        Seen::More
    } else {
        Seen::Other
    }
}

/// Waits for bytes (or the end) and copies what came into `into`,
/// leaving it unread: how many (0 at the end).
async fn peek(stream: &TcpStream, into: &mut [u8]) -> std::io::Result<usize> {
    poll_fn(|cx| {
        let mut buf = ReadBuf::new(into);
        stream
            .poll_peek(cx, &mut buf)
            .map(|r| r.map(|_| buf.filled().len()))
    })
    .await
}

/// Peeks until the first bytes decide (or the client stops sending).
async fn look(stream: &TcpStream) -> Seen {
    let mut last = 0;
    loop {
        let mut bytes = [0u8; 16];
        let peeked = peek(stream, &mut bytes).await;
        let n = match peeked {
            Ok(n) if n > 0 => n,
            _ => return Seen::Closed,
        };
        match classify(&bytes[..n]) {
            Seen::More if n == last => {
                // Nothing new yet: wait a moment before peeking again.
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            Seen::More => last = n,
            decided => return decided,
        }
    }
}

/// A probe's answer; any other request (one past the held bound) is told
/// the server is not ready yet.
fn answer(req: &Request<Incoming>) -> Response<Full<Bytes>> {
    if req.uri().path() == ready::HEALTH {
        let mut r = Response::new(Full::new(Bytes::from_static(b"ok")));
        r.headers_mut()
            .insert("cache-control", http::HeaderValue::from_static("no-store"));
        return r;
    }
    ready::answer::<String>(Err(NotReady::Recovering)).map(|b| Full::new(Bytes::from(b)))
}

async fn answer_probe(stream: TcpStream, timeout: Duration) {
    // As every answer of the server: with the request's id (echoed, and
    // in a refusal's body).
    let service = hyper::service::service_fn(|req: Request<Incoming>| {
        let ctx = crate::request_id::from_headers(req.headers());
        let answer = Box::pin(async move { answer(&req) });
        async move { Ok::<_, Infallible>(crate::request_id::answered(ctx, answer).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .keep_alive(false)
        .timer(TokioTimer::new())
        .header_read_timeout(timeout)
        .serve_connection(TokioIo::new(stream), service);
    let _ = tokio::time::timeout(timeout * 2, conn).await;
}

/// Answers probes on `listener` as above until `work` finishes; returns its
/// output and the connections held meanwhile, oldest first. The listener
/// is only borrowed: the server takes it over afterwards.
pub async fn answer_until<F: Future>(
    listener: &TcpListener,
    config: &ServeConfig,
    work: F,
) -> (F::Output, Vec<Held>) {
    let bound = config.recovering_connections.max(1);
    let looking = Arc::new(Semaphore::new(bound));
    let holding = Arc::new(Semaphore::new(bound));
    let refusing = Arc::new(Semaphore::new(bound));
    let timeout = config.probe_timeout;
    let (held_tx, mut held_rx) = mpsc::unbounded_channel::<(u64, Held)>();
    let (done_tx, done) = tokio::sync::watch::channel(false);
    let mut next = 0u64;
    tokio::pin!(work);
    let out = loop {
        // Accept only with room to look: each look ends within the timeout.
        let permit = tokio::select! {
            out = &mut work => break out,
            p = Arc::clone(&looking).acquire_owned() => p.expect("never closed"),
        };
        let (stream, addr) = tokio::select! {
            out = &mut work => break out,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(_) => {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let (order, held_tx, mut done) = (next, held_tx.clone(), done.clone());
        let (holding, refusing) = (Arc::clone(&holding), Arc::clone(&refusing));
        next += 1;
        tokio::spawn(async move {
            let seen = tokio::select! {
                s = tokio::time::timeout(timeout, look(&stream)) => s.unwrap_or(Seen::Other),
                _ = done.wait_for(|d| *d) => Seen::Other,
            };
            match seen {
                Seen::Closed => {}
                Seen::Probe => {
                    // Answering it never delays the hand-over.
                    drop(held_tx);
                    answer_probe(stream, timeout).await;
                }
                // Recovery is over: the server takes it, whatever the bound.
                _ if *done.borrow() => {
                    let _ = held_tx.send((order, (stream, addr)));
                }
                _ => match holding.try_acquire_owned() {
                    Ok(held) => {
                        drop(permit);
                        // Until the server takes it (or its client leaves).
                        let taken = tokio::select! {
                            _ = done.wait_for(|d| *d) => true,
                            _ = closed(&stream) => false,
                        };
                        if taken {
                            let _ = held_tx.send((order, (stream, addr)));
                        }
                        drop(held);
                        return;
                    }
                    Err(_) => {
                        // Refused apart from the room to look, so refusals
                        // never keep probes waiting.
                        drop((held_tx, permit));
                        if let Ok(_refusing) = refusing.try_acquire_owned() {
                            answer_probe(stream, timeout).await;
                        }
                        return;
                    }
                },
            }
            drop(permit);
        });
    };
    // Every task still looking hands its connection over now.
    done_tx.send_replace(true);
    drop(held_tx);
    let mut held = Vec::new();
    while let Some(h) = held_rx.recv().await {
        held.push(h);
    }
    held.sort_by_key(|(order, _)| *order);
    (out, held.into_iter().map(|(_, h)| h).collect())
}

/// Resolves once the client closed its end (or the socket failed) without
/// sending anything; a client that sent its request never resolves it (its
/// end waits behind the unread bytes, for the server to read).
async fn closed(stream: &TcpStream) {
    let mut byte = [0u8; 1];
    let peeked = peek(stream, &mut byte).await;
    if let Ok(1..) = peeked {
        // Bytes wait unread (peeking again would return at once): its
        // end shows once the server reads it.
        std::future::pending::<()>().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn ask(addr: SocketAddr, path: &str) -> String {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        s.read_to_string(&mut out).await.unwrap();
        out
    }

    #[test]
    fn the_first_bytes_tell_a_probe() {
        assert_eq!(classify(b"GET /readyz HTTP/1.1"), Seen::Probe);
        assert_eq!(classify(b"GET /healthz?x HTTP"), Seen::Probe);
        assert_eq!(classify(b"GET /ready"), Seen::More);
        assert_eq!(classify(b"GE"), Seen::More);
        assert_eq!(classify(b"GET /readyzz HTTP"), Seen::Other);
        assert_eq!(classify(b"POST /v1/stream/a"), Seen::Other);
        assert_eq!(classify(b"PRI * HTTP/2.0"), Seen::Other);
    }

    #[tokio::test]
    async fn probes_are_answered_and_the_rest_held_for_the_server() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<u32>();
        let asks = tokio::spawn(async move {
            // A client's request, sent before the server serves.
            let mut early = TcpStream::connect(addr).await.unwrap();
            early
                .write_all(b"GET /v1/stream/a HTTP/1.1\r\nhost: x\r\n\r\n")
                .await
                .unwrap();
            let ready = ask(addr, "/readyz").await;
            let health = ask(addr, "/healthz").await;
            done_tx.send(7).unwrap();
            (early, ready, health)
        });
        let config = ServeConfig::default();
        let (out, held) = answer_until(&listener, &config, async { done_rx.await.unwrap() }).await;
        assert_eq!(out, 7);
        let (early, ready, health) = asks.await.unwrap();
        assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
        assert!(ready.contains("retry-after: 1"), "{ready}");
        assert!(ready.contains("\"code\":\"NOT_READY\""), "{ready}");
        // With a request id, as every answer: echoed and in the body.
        let id = ready
            .lines()
            .find_map(|l| l.strip_prefix("x-request-id: "))
            .unwrap_or_else(|| panic!("no request id: {ready}"));
        assert!(
            ready.contains(&format!("\"request_id\":\"{id}\"")),
            "{ready}"
        );
        assert!(health.starts_with("HTTP/1.1 200"), "{health}");
        assert!(health.contains("x-request-id: "), "{health}");
        // The early request is held, unread, for the server.
        assert_eq!(held.len(), 1);
        let (stream, from) = &held[0];
        assert_eq!(*from, early.local_addr().unwrap());
        let mut head = [0u8; 16];
        let n = stream.peek(&mut head).await.unwrap();
        assert_eq!(&head[..n], b"GET /v1/stream/a");
    }

    #[tokio::test]
    async fn past_the_held_bound_clients_are_refused_and_probes_still_answered() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let config = ServeConfig {
            recovering_connections: 1,
            ..ServeConfig::default()
        };
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let clients = tokio::spawn(async move {
            // A client that leaves before sending anything takes no room:
            // the next one is held in its place.
            drop(TcpStream::connect(addr).await.unwrap());
            let mut held = TcpStream::connect(addr).await.unwrap();
            held.write_all(b"POST /v1/stream/a HTTP/1.1\r\n")
                .await
                .unwrap();
            // Accepted once the one before was decided (one looked at a
            // time): held is full, so it is refused, not held.
            let refused = ask(addr, "/v1/stream/b").await;
            // Probes keep being answered.
            let ready = ask(addr, "/readyz").await;
            let health = ask(addr, "/healthz").await;
            done_tx.send(()).unwrap();
            (held, refused, ready, health)
        });
        let (_, held) = answer_until(&listener, &config, async { done_rx.await.unwrap() }).await;
        let (_held, refused, ready, health) = clients.await.unwrap();
        assert!(refused.starts_with("HTTP/1.1 503"), "{refused}");
        assert!(refused.contains("retry-after: 1"), "{refused}");
        assert!(refused.contains("\"code\":\"NOT_READY\""), "{refused}");
        assert!(ready.starts_with("HTTP/1.1 503"), "{ready}");
        assert!(health.starts_with("HTTP/1.1 200"), "{health}");
        assert_eq!(held.len(), 1, "the bound is held");
        let mut head = [0u8; 4];
        let n = held[0].0.peek(&mut head).await.unwrap();
        assert_eq!(&head[..n], b"POST");
    }
}
