//! The shell's connection limits against real sockets on loopback, on
//! tokio's paused clock: a timeout of 10 s or 30 s passes as soon as
//! nothing else can run, so each test checks the exact limit without
//! sleeping through it. The handler stands in for origin and edge: it reads
//! the whole body and says how it ended.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use shell::{BodyIdle, Http1, RequestBody, ServeConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

async fn handler(req: Request<RequestBody>) -> Response<Full<Bytes>> {
    let client = shell::request_id::client().map(|c| c.addr);
    let answer = match req.into_body().collect().await {
        Ok(body) => (
            200,
            format!("{} bytes from {client:?}", body.to_bytes().len()),
        ),
        Err(e) if BodyIdle::find(&*e).is_some() => (408, "idle".to_owned()),
        Err(e) => (400, e.to_string()),
    };
    let mut r = Response::new(Full::new(Bytes::from(answer.1)));
    *r.status_mut() = http::StatusCode::from_u16(answer.0).unwrap();
    r
}

/// A server on a free port with `config`; stops when the test ends.
async fn start(config: ServeConfig, http1: Http1) -> std::net::SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        shell::serve(
            listener,
            Vec::new(),
            &config,
            http1,
            std::future::pending::<()>(),
            |req| Box::pin(handler(req)),
        )
        .await
    });
    addr
}

/// What the server sends before it closes or goes quiet for `within`:
/// `None` for silence, `Some("")` for a close.
async fn answer_of(conn: &mut TcpStream, within: Duration) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    match tokio::time::timeout(within, conn.read(&mut buf)).await {
        Ok(Ok(n)) => Some(String::from_utf8_lossy(&buf[..n]).into_owned()),
        Ok(Err(_)) => Some(String::new()),
        Err(_) => None,
    }
}

const STALLED: &[u8] = b"POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 8388608\r\n\r\na few bytes";

#[tokio::test(start_paused = true)]
async fn a_body_silent_for_the_idle_timeout_ends_at_that_moment() {
    for http1 in [Http1::RequestsWatch, Http1::HyperWatches] {
        let addr = start(ServeConfig::default(), http1).await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        let started = Instant::now();
        c.write_all(STALLED).await.unwrap();
        let answer = answer_of(&mut c, Duration::from_secs(60)).await.unwrap();
        assert!(answer.starts_with("HTTP/1.1 408"), "{http1:?}: {answer}");
        assert_eq!(started.elapsed(), Duration::from_secs(10), "{http1:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_body_that_trickles_within_the_timeout_is_read_whole() {
    let addr = start(ServeConfig::default(), Http1::RequestsWatch).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 15\r\n\r\n")
        .await
        .unwrap();
    // 45 s in all, a byte every 3 s: the timeout restarts with each.
    for byte in b"abcdefghijklmno" {
        tokio::time::sleep(Duration::from_secs(3)).await;
        c.write_all(&[*byte]).await.unwrap();
    }
    let answer = answer_of(&mut c, Duration::from_secs(60)).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("15 bytes from Some(127.0.0.1:"), "{answer}");
}

#[tokio::test(start_paused = true)]
async fn a_head_that_never_ends_and_an_idle_connection_close_at_the_timeout() {
    for http1 in [Http1::RequestsWatch, Http1::HyperWatches] {
        let addr = start(ServeConfig::default(), http1).await;
        let mut partial = TcpStream::connect(addr).await.unwrap();
        let started = Instant::now();
        partial
            .write_all(b"GET /s HTTP/1.1\r\nHost: x\r\n")
            .await
            .unwrap();
        let closed = answer_of(&mut partial, Duration::from_secs(120)).await;
        assert!(
            closed.is_some(),
            "{http1:?}: the server gave up on the head"
        );
        assert_eq!(started.elapsed(), Duration::from_secs(30), "{http1:?}");

        let mut idle = TcpStream::connect(addr).await.unwrap();
        idle.write_all(b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let first = answer_of(&mut idle, Duration::from_secs(1)).await.unwrap();
        assert!(first.starts_with("HTTP/1.1 200"), "{http1:?}: {first}");
        let answered = Instant::now();
        let after = answer_of(&mut idle, Duration::from_secs(120)).await;
        assert_eq!(after.as_deref(), Some(""), "{http1:?}: closed when idle");
        assert_eq!(answered.elapsed(), Duration::from_secs(30), "{http1:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn past_the_connection_cap_a_client_waits_until_one_closes() {
    let config = ServeConfig {
        max_connections: 2,
        ..ServeConfig::default()
    };
    let addr = start(config, Http1::HyperWatches).await;
    let mut held = Vec::new();
    for _ in 0..2 {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let ok = answer_of(&mut c, Duration::from_secs(1)).await.unwrap();
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        held.push(c);
    }
    let mut third = TcpStream::connect(addr).await.unwrap();
    third
        .write_all(b"GET /s HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    // Well within the held connections' keep-alive timeout (30 s).
    assert_eq!(
        answer_of(&mut third, Duration::from_secs(20)).await,
        None,
        "not served while two connections are open"
    );
    drop(held.pop());
    let ok = answer_of(&mut third, Duration::from_secs(1)).await.unwrap();
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
}

/// An HTTP/2 connection to `addr`, and a task that ends when it closes.
async fn h2_client(
    addr: std::net::SocketAddr,
) -> (
    hyper::client::conn::http2::SendRequest<http_body_util::StreamBody<Receiver>>,
    tokio::task::JoinHandle<()>,
) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (h2, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    let closed = tokio::spawn(async move {
        let _ = conn.await;
    });
    (h2, closed)
}

/// A request with an empty body.
fn get(addr: std::net::SocketAddr) -> Request<http_body_util::StreamBody<Receiver>> {
    let (_, rx) = tokio::sync::mpsc::channel(1);
    Request::get(format!("http://{addr}/s"))
        .body(http_body_util::StreamBody::new(Receiver(rx)))
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn an_http2_connection_has_at_most_its_streams_in_flight() {
    let config = ServeConfig {
        http2_max_streams: 2,
        ..ServeConfig::default()
    };
    let addr = start(config, Http1::RequestsWatch).await;
    let (h2, _closed) = h2_client(addr).await;
    // Three bodies that never end: the server takes two streams at a time.
    let mut senders = Vec::new();
    let mut answers = Vec::new();
    let started = Instant::now();
    for _ in 0..3 {
        let (tx, rx) = tokio::sync::mpsc::channel(1);
        senders.push(tx);
        let body = http_body_util::StreamBody::new(Receiver(rx));
        let req = Request::post(format!("http://{addr}/s"))
            .body(body)
            .unwrap();
        let mut h2 = h2.clone();
        answers.push(tokio::spawn(async move {
            let answer = h2.send_request(req).await;
            (answer.map(|r| r.status()), started.elapsed())
        }));
    }
    let mut timed_out = Vec::new();
    let mut third = None;
    for a in answers {
        match a.await.unwrap() {
            (Ok(status), at) if at == Duration::from_secs(10) => timed_out.push(status),
            other => third = Some(other),
        }
    }
    assert_eq!(timed_out, [http::StatusCode::REQUEST_TIMEOUT; 2]);
    // The third either waited for a stream (the client knew the limit) or,
    // sent before the client read the server's settings, was refused
    // unseen: safe to send again.
    match third.expect("a third answer") {
        (Ok(status), at) => {
            assert_eq!(status, http::StatusCode::REQUEST_TIMEOUT);
            assert_eq!(at, Duration::from_secs(20), "it waited for a free stream");
        }
        (Err(e), _) => {
            let reason = std::error::Error::source(&e)
                .and_then(|s| s.downcast_ref::<h2::Error>())
                .and_then(h2::Error::reason);
            assert_eq!(reason, Some(h2::Reason::REFUSED_STREAM), "{e:?}");
        }
    }
    drop(senders);
}

#[tokio::test(start_paused = true)]
async fn a_connection_that_says_nothing_is_closed_at_the_timeout() {
    let addr = start(ServeConfig::default(), Http1::RequestsWatch).await;
    for first in [&b""[..], b"P", b"PR"] {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(first).await.unwrap();
        let started = Instant::now();
        let closed = answer_of(&mut c, Duration::from_secs(120)).await;
        assert_eq!(closed.as_deref(), Some(""), "{first:?}");
        assert_eq!(started.elapsed(), Duration::from_secs(30), "{first:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_idle_http2_connection_is_closed_and_a_busy_one_is_not() {
    // Pings only after an hour: the idle timeout alone closes these.
    let config = ServeConfig {
        http2_keep_alive: Duration::from_secs(3600),
        ..ServeConfig::default()
    };
    let addr = start(config, Http1::RequestsWatch).await;
    // The preface and nothing more.
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    let started = Instant::now();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(7200), c.read_to_end(&mut rest))
        .await
        .expect("closed")
        .ok();
    // Asked to close at 30 s (idle): a GOAWAY and a ping; a client that
    // never answers is dropped 30 s later. (Without the idle timeout only
    // the hourly ping would ever close it.)
    assert_eq!(started.elapsed(), Duration::from_secs(60));

    // Answered at once, then idle: closed 30 s after the answer.
    let (mut h2, closed) = h2_client(addr).await;
    assert_eq!(h2.send_request(get(addr)).await.unwrap().status(), 200);
    let answered = Instant::now();
    // A client that answers pings is kept by them alone: only the idle
    // timeout closes it.
    tokio::time::timeout(Duration::from_secs(120), closed)
        .await
        .expect("closed when idle")
        .unwrap();
    assert_eq!(answered.elapsed(), Duration::from_secs(30));
}

#[tokio::test(start_paused = true)]
async fn an_http2_connection_busy_past_the_idle_timeout_is_kept() {
    // Idle after 5 s; a body that never comes ends at 10 s. (No pings: on
    // a paused clock an answer to one may arrive after time jumped past
    // its timeout.)
    let config = ServeConfig {
        header_read_timeout: Duration::from_secs(5),
        http2_keep_alive: Duration::from_secs(3600),
        ..ServeConfig::default()
    };
    let addr = start(config, Http1::RequestsWatch).await;
    let (mut h2, closed) = h2_client(addr).await;
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let req = Request::post(format!("http://{addr}/s"))
        .body(http_body_util::StreamBody::new(Receiver(rx)))
        .unwrap();
    let started = Instant::now();
    assert_eq!(h2.send_request(req).await.unwrap().status(), 408);
    assert_eq!(started.elapsed(), Duration::from_secs(10));
    // In flight for twice the idle timeout and not asked to close: the
    // idle time counts from the answer (had it been asked at 5 s, the
    // connection would close as soon as its last stream ended).
    closed.await.unwrap();
    assert_eq!(started.elapsed(), Duration::from_secs(15));
    drop(tx);
}

/// An mpsc receiver as a body's stream of frames.
struct Receiver(tokio::sync::mpsc::Receiver<Result<http_body::Frame<Bytes>, std::io::Error>>);

impl futures::Stream for Receiver {
    type Item = Result<http_body::Frame<Bytes>, std::io::Error>;
    fn poll_next(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}
