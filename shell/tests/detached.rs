//! A tail's connection detached from its task (`shell::detached`) against
//! real sockets: the light path writes the answer's head (chunked, closing)
//! and hands the connection over; its holder writes the chunks and ends the
//! answer with its last chunk (or cuts it); the answer's body lives as
//! long as the connection; the drain waits for it; and a request hyper
//! serves is never offered.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use shell::detached::{Detached, Offered};
use shell::{Http1, RequestBody, ServeConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;

/// Counts the answers' bodies alive.
struct Alive(Arc<AtomicUsize>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A body that holds an [`Alive`]: it goes when the body does.
fn kept_body(alive: &Arc<AtomicUsize>) -> Body {
    alive.fetch_add(1, Ordering::SeqCst);
    let guard = Alive(Arc::clone(alive));
    BodyExt::boxed_unsync(Full::new(Bytes::new()).map_err(move |never| {
        let _ = &guard;
        match never {}
    }))
}

struct World {
    /// Detached connections, as they arrive.
    conns: mpsc::UnboundedSender<Detached>,
    bodies: Arc<AtomicUsize>,
}

fn handler(world: &Arc<World>, req: Request<RequestBody>) -> Response<Body> {
    let offered = req.extensions().get::<Offered>().is_some();
    let mut resp = Response::new(kept_body(&world.bodies));
    resp.headers_mut()
        .insert("x-offered", offered.to_string().parse().unwrap());
    if offered {
        let (slot, pending) = shell::detached::slot();
        resp.extensions_mut().insert(slot);
        let conns = world.conns.clone();
        tokio::spawn(async move {
            if let Some(conn) = pending.take().await {
                let _ = conns.send(conn);
            }
        });
    }
    resp
}

async fn start(
    stop: tokio::sync::oneshot::Receiver<()>,
) -> (
    std::net::SocketAddr,
    mpsc::UnboundedReceiver<Detached>,
    Arc<AtomicUsize>,
    tokio::task::JoinHandle<()>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = mpsc::unbounded_channel();
    let bodies = Arc::new(AtomicUsize::new(0));
    let world = Arc::new(World {
        conns: tx,
        bodies: Arc::clone(&bodies),
    });
    let task = tokio::spawn(async move {
        shell::serve(
            listener,
            Vec::new(),
            &ServeConfig::default(),
            Http1::HyperWatches,
            async move {
                let _ = stop.await;
            },
            move |req| {
                let resp = handler(&world, req);
                Box::pin(async move { resp })
            },
        )
        .await
        .unwrap();
    });
    (addr, rx, bodies, task)
}

async fn read_to_end(c: &mut TcpStream) -> String {
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), c.read_to_end(&mut got))
        .await
        .expect("the server closes")
        .unwrap();
    String::from_utf8(got).unwrap()
}

async fn read_head(c: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut byte = [0u8; 1];
    while !got.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(20), c.read(&mut byte))
            .await
            .expect("the head comes")
            .unwrap();
        assert_eq!(n, 1, "the connection closed before the head ended");
        got.push(byte[0]);
    }
    String::from_utf8(got).unwrap()
}

const SSE: &[u8] = b"GET /s?offset=-1&live=sse HTTP/1.1\r\nHost: x\r\n\r\n";

#[tokio::test]
async fn a_detached_answer_is_written_by_its_holder_and_ends_with_its_last_chunk() {
    let (_stop, stop) = tokio::sync::oneshot::channel();
    let (addr, mut conns, bodies, _task) = start(stop).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(SSE).await.unwrap();
    let head = read_head(&mut c).await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(head.contains("\r\nx-offered: true\r\n"), "{head}");
    assert!(
        head.contains("\r\ntransfer-encoding: chunked\r\n"),
        "{head}"
    );
    assert!(head.contains("\r\nconnection: close\r\n"), "{head}");
    let mut conn = conns.recv().await.expect("the connection is handed over");
    // The body (and what it holds) lives with the connection.
    assert_eq!(bodies.load(Ordering::SeqCst), 1);
    conn.send_chunk(Bytes::from_static(b"data: a\n\n"))
        .await
        .unwrap();
    let bytes = [shell::detached::chunk(b"data: bc\n\n")];
    let slices: Vec<_> = bytes.iter().map(|b| std::io::IoSlice::new(b)).collect();
    assert_eq!(conn.try_write(&slices).unwrap(), bytes[0].len());
    conn.finish();
    assert_eq!(bodies.load(Ordering::SeqCst), 0);
    let rest = read_to_end(&mut c).await;
    assert_eq!(rest, "9\r\ndata: a\n\n\r\na\r\ndata: bc\n\n\r\n0\r\n\r\n");
}

#[tokio::test]
async fn a_cut_answer_has_no_last_chunk_and_a_client_that_leaves_is_seen() {
    let (_stop, stop) = tokio::sync::oneshot::channel();
    let (addr, mut conns, _bodies, _task) = start(stop).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(SSE).await.unwrap();
    read_head(&mut c).await;
    let conn = conns.recv().await.unwrap();
    conn.cut();
    assert_eq!(read_to_end(&mut c).await, "", "closed without a last chunk");

    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(SSE).await.unwrap();
    read_head(&mut c).await;
    let mut conn = conns.recv().await.unwrap();
    let ended = |conn: &mut Detached| {
        let waker = futures::task::noop_waker();
        conn.ended(&mut std::task::Context::from_waker(&waker))
    };
    assert!(!ended(&mut conn), "the client is there");
    drop(c);
    tokio::time::timeout(Duration::from_secs(20), conn.closed())
        .await
        .expect("the client's close is seen");
}

#[tokio::test]
async fn the_drain_waits_for_detached_connections_and_tells_them_to_end() {
    let (stop_tx, stop) = tokio::sync::oneshot::channel();
    let (addr, mut conns, _bodies, task) = start(stop).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(SSE).await.unwrap();
    read_head(&mut c).await;
    let mut conn = conns.recv().await.unwrap();
    stop_tx.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(20), conn.closed())
        .await
        .expect("the drain ends the answer");
    let mut task = task;
    assert!(
        tokio::time::timeout(Duration::from_millis(100), &mut task)
            .await
            .is_err(),
        "the server waits for the detached answer"
    );
    drop(conn);
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("the server stops once it ended")
        .unwrap();
    assert_eq!(read_to_end(&mut c).await, "0\r\n\r\n");
}

#[tokio::test]
async fn a_request_hyper_serves_is_not_offered() {
    let (_stop, stop) = tokio::sync::oneshot::channel();
    let (addr, _conns, _bodies, _task) = start(stop).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET /s?offset=-1 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = read_to_end(&mut c).await;
    assert!(answer.contains("\r\nx-offered: false\r\n"), "{answer}");
}
