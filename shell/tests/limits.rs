//! The shell's connection limits against real sockets on loopback, on
//! tokio's paused clock: a timeout of 10 s or 30 s passes as soon as
//! nothing else can run, so each test checks the exact limit without
//! sleeping through it. The handler stands in for origin and edge: it reads
//! the whole body and says how it ended.

use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use shell::{BodyIdle, Http1, IdleBody, ServeConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

async fn handler(req: Request<IdleBody<Incoming>>) -> Response<Full<Bytes>> {
    let client = req.extensions().get::<shell::Client>().map(|c| c.addr);
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
            &config,
            http1,
            std::future::pending::<()>(),
            handler,
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
    c.write_all(b"POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\n")
        .await
        .unwrap();
    for byte in b"abcde" {
        tokio::time::sleep(Duration::from_secs(9)).await;
        c.write_all(&[*byte]).await.unwrap();
    }
    let answer = answer_of(&mut c, Duration::from_secs(60)).await.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.contains("5 bytes from Some(127.0.0.1:"), "{answer}");
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

#[tokio::test(start_paused = true)]
async fn an_http2_connection_has_at_most_its_streams_in_flight() {
    let config = ServeConfig {
        http2_max_streams: 2,
        ..ServeConfig::default()
    };
    let addr = start(config, Http1::RequestsWatch).await;
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (h2, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(tcp),
    )
    .await
    .unwrap();
    tokio::spawn(conn);
    // Three bodies that never end: the server takes two streams at a time.
    let mut senders = Vec::new();
    let mut answers = Vec::new();
    for _ in 0..3 {
        let (tx, rx) =
            tokio::sync::mpsc::channel::<Result<http_body::Frame<Bytes>, std::io::Error>>(1);
        senders.push(tx);
        let body = http_body_util::StreamBody::new(Receiver(rx));
        let req = Request::post(format!("http://{addr}/s"))
            .body(body)
            .unwrap();
        let mut h2 = h2.clone();
        answers.push(tokio::spawn(async move { h2.send_request(req).await }));
    }
    let started = Instant::now();
    let mut timed_out = Vec::new();
    let mut refused = 0;
    for a in answers {
        match a.await.unwrap() {
            Ok(r) => timed_out.push((r.status(), started.elapsed())),
            // Past the limit a stream is refused before the server saw it:
            // safe for the client to send again.
            Err(e) => {
                let h2 = std::error::Error::source(&e)
                    .and_then(|s| s.downcast_ref::<h2::Error>())
                    .and_then(h2::Error::reason);
                assert_eq!(h2, Some(h2::Reason::REFUSED_STREAM), "{e:?}");
                refused += 1;
            }
        }
    }
    assert_eq!(refused, 1);
    assert_eq!(
        timed_out,
        [(http::StatusCode::REQUEST_TIMEOUT, Duration::from_secs(10)); 2].to_vec(),
        "the two streams taken end at the idle timeout"
    );
    drop(senders);
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
