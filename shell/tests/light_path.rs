//! The light path (`shell::light_path`) against real sockets on loopback:
//! HTTP/1.1 tails answered without hyper, byte for byte as hyper frames
//! them, the connection handed to hyper at the first request that is not a
//! tail, and every way a tail ends (the client leaves, asks to close, goes
//! idle; the server drains). The handler says which path served it: the
//! light path's requests have no body at all (`RequestBody::Empty`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full, StreamBody};
use shell::{Http1, RequestBody, ServeConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, Semaphore};

type Body = http_body_util::combinators::UnsyncBoxBody<Bytes, std::io::Error>;

/// What the test's handler shares with the test.
struct World {
    /// Long-polls wait for a permit, one each.
    release: Semaphore,
    /// Long-polls waiting now.
    waiting: AtomicUsize,
    /// The SSE bodies' senders, in order of arrival.
    sse: parking_lot::Mutex<Vec<mpsc::Sender<Bytes>>>,
    /// Handler futures not dropped yet (answered or not).
    futures: AtomicUsize,
}

impl Default for World {
    fn default() -> World {
        World {
            release: Semaphore::new(0),
            waiting: AtomicUsize::new(0),
            sse: parking_lot::Mutex::new(Vec::new()),
            futures: AtomicUsize::new(0),
        }
    }
}

/// Counts a waiting long-poll while it lives: dropped when its future is.
struct Waiting(Arc<World>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A handler's future, counted in `World::futures` until it is dropped
/// (answering does not drop it: only its owner can).
struct Counted<F> {
    inner: std::pin::Pin<Box<F>>,
    world: Arc<World>,
}

impl<F> Counted<F> {
    fn new(world: &Arc<World>, inner: F) -> Counted<F> {
        world.futures.fetch_add(1, Ordering::SeqCst);
        Counted {
            inner: Box::pin(inner),
            world: Arc::clone(world),
        }
    }
}

impl<F: std::future::Future> std::future::Future for Counted<F> {
    type Output = F::Output;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        self.inner.as_mut().poll(cx)
    }
}

impl<F> Drop for Counted<F> {
    fn drop(&mut self) {
        self.world.futures.fetch_sub(1, Ordering::SeqCst);
    }
}

fn which(req: &Request<RequestBody>) -> &'static str {
    match req.body() {
        RequestBody::Empty => "light",
        RequestBody::Hyper(_) => "hyper",
    }
}

async fn handler(world: Arc<World>, req: Request<RequestBody>) -> Response<Body> {
    let path = which(&req);
    let query = req.uri().query().unwrap_or("").to_owned();
    if query.contains("live=sse") {
        let (tx, rx) = mpsc::channel::<Bytes>(8);
        world.sse.lock().push(tx);
        let frames = futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|b| (Ok(http_body::Frame::data(b)), rx))
        });
        let mut r = Response::new(BodyExt::boxed_unsync(StreamBody::new(frames)));
        r.headers_mut()
            .insert("content-type", "text/event-stream".parse().unwrap());
        r.headers_mut().insert("x-path", path.parse().unwrap());
        return r;
    }
    if query.contains("live=long-poll") {
        world.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(Arc::clone(&world));
        world.release.acquire().await.unwrap().forget();
        assert!(!query.contains("panic"), "a handler that panics once woken");
    }
    let body = req.into_body().collect().await.unwrap().to_bytes();
    let text = format!("{path} {} {}", query, body.len());
    let mut r = Response::new(BodyExt::boxed_unsync(
        Full::new(Bytes::from(text)).map_err(|never| match never {}),
    ));
    r.headers_mut().insert("x-path", path.parse().unwrap());
    r
}

/// A server with `config`; it stops when `stop` is sent (or never).
async fn start(
    config: ServeConfig,
    stop: Option<tokio::sync::oneshot::Receiver<()>>,
) -> (
    std::net::SocketAddr,
    Arc<World>,
    tokio::task::JoinHandle<()>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let world = Arc::new(World::default());
    let w = Arc::clone(&world);
    let task = tokio::spawn(async move {
        let stop = async move {
            match stop {
                Some(rx) => {
                    let _ = rx.await;
                }
                None => std::future::pending().await,
            }
        };
        shell::serve(
            listener,
            Vec::new(),
            &config,
            Http1::HyperWatches,
            stop,
            move |req| Counted::new(&w, handler(Arc::clone(&w), req)),
        )
        .await
        .unwrap();
    });
    (addr, world, task)
}

/// Reads until `want` bytes end what was read, or the connection closes.
async fn read_until(c: &mut TcpStream, want: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&got).ends_with(want) {
        let n = tokio::time::timeout(Duration::from_secs(20), c.read(&mut buf))
            .await
            .expect("the server answers")
            .unwrap();
        if n == 0 {
            break;
        }
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8(got).unwrap()
}

async fn wait_for(what: impl Fn() -> bool) {
    tokio::time::timeout(Duration::from_secs(20), async {
        while !what() {
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    })
    .await
    .expect("the condition came true");
}

const LONG_POLL: &[u8] = b"GET /s?offset=-1&live=long-poll HTTP/1.1\r\nHost: x\r\n\r\n";

#[tokio::test]
async fn long_polls_are_answered_on_the_light_path_until_another_request_comes() {
    let (addr, world, _task) = start(ServeConfig::default(), None).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    for _ in 0..2 {
        c.write_all(LONG_POLL).await.unwrap();
        wait_for(|| world.waiting.load(Ordering::SeqCst) == 1).await;
        world.release.add_permits(1);
        let answer = read_until(&mut c, "light offset=-1&live=long-poll 0").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
        assert!(answer.contains("\r\nx-path: light\r\n"), "{answer}");
        assert!(answer.contains("\r\ndate: "), "{answer}");
        assert!(answer.contains("\r\ncontent-length: 32\r\n"), "{answer}");
        assert!(!answer.contains("connection: close"), "{answer}");
    }
    // A write on the same connection goes to hyper, which serves it (and
    // the connection) from here; its body is read whole.
    c.write_all(b"POST /s HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
        .await
        .unwrap();
    let answer = read_until(&mut c, "hyper  3").await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    c.write_all(LONG_POLL).await.unwrap();
    wait_for(|| world.waiting.load(Ordering::SeqCst) == 1).await;
    world.release.add_permits(1);
    read_until(&mut c, "hyper offset=-1&live=long-poll 0").await;
}

#[tokio::test]
async fn an_sse_body_streams_in_chunks_and_ends_with_the_last() {
    let (addr, world, _task) = start(ServeConfig::default(), None).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET /s?offset=now&live=sse HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let head = read_until(&mut c, "\r\n\r\n").await;
    assert!(head.starts_with("HTTP/1.1 200 OK\r\n"), "{head}");
    assert!(
        head.contains("\r\ntransfer-encoding: chunked\r\n"),
        "{head}"
    );
    assert!(
        head.contains("\r\ncontent-type: text/event-stream\r\n"),
        "{head}"
    );
    assert!(head.contains("\r\nx-path: light\r\n"), "{head}");
    // Answered, the handler's future is let go while its body streams.
    wait_for(|| world.futures.load(Ordering::SeqCst) == 0).await;
    let tx = world.sse.lock()[0].clone();
    for i in 0..20 {
        let event = format!("data: {i}\n\n");
        tx.send(Bytes::from(event.clone())).await.unwrap();
        let chunk = read_until(&mut c, &format!("{event}\r\n")).await;
        assert_eq!(chunk, format!("{:x}\r\n{event}\r\n", event.len()));
    }
    drop(tx);
    world.sse.lock().clear();
    assert_eq!(read_until(&mut c, "0\r\n\r\n").await, "0\r\n\r\n");
    // The connection stays open for the next request.
    c.write_all(b"GET /plain HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    read_until(&mut c, "hyper  0").await;
}

#[tokio::test]
async fn a_client_that_leaves_ends_its_waiting_long_poll() {
    let (addr, world, _task) = start(ServeConfig::default(), None).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(LONG_POLL).await.unwrap();
    wait_for(|| world.waiting.load(Ordering::SeqCst) == 1).await;
    drop(c);
    // Its handler's future is dropped: nothing waits any more.
    wait_for(|| world.waiting.load(Ordering::SeqCst) == 0).await;
}

#[tokio::test]
async fn a_pipelined_request_waits_its_turn() {
    let (addr, world, _task) = start(ServeConfig::default(), None).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    let mut both = LONG_POLL.to_vec();
    both.extend_from_slice(b"GET /s?offset=now&live=long-poll HTTP/1.1\r\nHost: x\r\n\r\n");
    c.write_all(&both).await.unwrap();
    wait_for(|| world.waiting.load(Ordering::SeqCst) == 1).await;
    world.release.add_permits(1);
    read_until(&mut c, "light offset=-1&live=long-poll 0").await;
    wait_for(|| world.waiting.load(Ordering::SeqCst) == 1).await;
    world.release.add_permits(1);
    read_until(&mut c, "light offset=now&live=long-poll 0").await;
}

#[tokio::test]
async fn a_client_that_asks_to_close_is_answered_then_closed() {
    let (addr, world, _task) = start(ServeConfig::default(), None).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(b"GET /s?offset=-1&live=long-poll HTTP/1.1\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    world.release.add_permits(1);
    let mut all = String::new();
    c.read_to_string(&mut all).await.unwrap();
    assert!(all.contains("\r\nconnection: close\r\n"), "{all}");
    assert!(all.ends_with("light offset=-1&live=long-poll 0"), "{all}");
}

#[tokio::test]
async fn a_head_longer_than_the_look_and_a_path_turned_off_go_to_hyper() {
    // The look holds 64 bytes; this head is longer. (A head not all
    // arrived at the look goes to hyper the same way: `light_path::head`.)
    let short = ServeConfig {
        light_head_bytes: 64,
        ..ServeConfig::default()
    };
    let (addr, world, _task) = start(short, None).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(
        b"GET /s?offset=-1&live=long-poll HTTP/1.1\r\nHost: x\r\nAccept: text/plain\r\n\r\n",
    )
    .await
    .unwrap();
    wait_for(|| world.waiting.load(Ordering::SeqCst) == 1).await;
    world.release.add_permits(1);
    read_until(&mut c, "hyper offset=-1&live=long-poll 0").await;

    let off = ServeConfig {
        light_path: false,
        ..ServeConfig::default()
    };
    let (addr, world, _task) = start(off, None).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(LONG_POLL).await.unwrap();
    wait_for(|| world.waiting.load(Ordering::SeqCst) == 1).await;
    world.release.add_permits(1);
    read_until(&mut c, "hyper offset=-1&live=long-poll 0").await;
}

#[tokio::test(start_paused = true)]
async fn an_idle_light_connection_closes_at_the_keep_alive_timeout() {
    let (addr, world, _task) = start(ServeConfig::default(), None).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(LONG_POLL).await.unwrap();
    world.release.add_permits(1);
    read_until(&mut c, "light offset=-1&live=long-poll 0").await;
    let answered = tokio::time::Instant::now();
    let mut rest = Vec::new();
    c.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    assert_eq!(answered.elapsed(), Duration::from_secs(30));
}

#[tokio::test]
async fn a_drain_lets_a_waiting_long_poll_finish_and_closes_idle_connections() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (addr, world, task) = start(ServeConfig::default(), Some(rx)).await;
    let mut idle = TcpStream::connect(addr).await.unwrap();
    idle.write_all(LONG_POLL).await.unwrap();
    wait_for(|| world.waiting.load(Ordering::SeqCst) == 1).await;
    world.release.add_permits(1);
    read_until(&mut idle, "light offset=-1&live=long-poll 0").await;
    let mut waiting = TcpStream::connect(addr).await.unwrap();
    waiting.write_all(LONG_POLL).await.unwrap();
    wait_for(|| world.waiting.load(Ordering::SeqCst) == 1).await;
    tx.send(()).unwrap();
    // The idle one closes at once.
    let mut rest = Vec::new();
    idle.read_to_end(&mut rest).await.unwrap();
    assert!(rest.is_empty());
    assert!(!task.is_finished(), "a request is still in flight");
    world.release.add_permits(1);
    let mut all = String::new();
    waiting.read_to_string(&mut all).await.unwrap();
    assert!(all.contains("\r\nconnection: close\r\n"), "{all}");
    assert!(all.ends_with("light offset=-1&live=long-poll 0"), "{all}");
    tokio::time::timeout(Duration::from_secs(20), task)
        .await
        .expect("the server stops once its last request is answered")
        .unwrap();
}

/// A long-poll whose answer waits holds no task of its own: its connection
/// is parked in the server's lot (one task per 4,096 of them), and taken up
/// again by a new task once its answer is there.
#[tokio::test]
async fn waiting_long_polls_hold_no_task_each() {
    const N: usize = 200;
    let (addr, world, _task) = start(ServeConfig::default(), None).await;
    let tasks = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let before = tasks();
    let mut conns = Vec::new();
    for _ in 0..N {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(LONG_POLL).await.unwrap();
        conns.push(c);
    }
    wait_for(|| world.waiting.load(Ordering::SeqCst) == N).await;
    // Every connection's task has ended (or is about to: it parks right
    // after its first poll); the lot's one task remains.
    wait_for(|| tasks() <= before + 1).await;
    world.release.add_permits(N);
    for c in &mut conns {
        let answer = read_until(c, "light offset=-1&live=long-poll 0").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    }
    // Each connection is served again, by a task of its own while it is
    // (a next request on it is served as the first was).
    conns[0].write_all(LONG_POLL).await.unwrap();
    wait_for(|| world.waiting.load(Ordering::SeqCst) == 1).await;
    world.release.add_permits(1);
    read_until(&mut conns[0], "light offset=-1&live=long-poll 0").await;
}

/// A handler that panics while its answer is parked ends its own request
/// only (as in a task of its own): its connection closes, the other parked
/// answers are answered, and the server parks and answers new ones.
#[tokio::test]
async fn a_parked_handler_that_panics_ends_only_its_own_connection() {
    let (addr, world, _task) = start(ServeConfig::default(), None).await;
    let mut doomed = TcpStream::connect(addr).await.unwrap();
    doomed
        .write_all(b"GET /s?offset=-1&live=long-poll&panic HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut fine = TcpStream::connect(addr).await.unwrap();
    fine.write_all(LONG_POLL).await.unwrap();
    wait_for(|| world.waiting.load(Ordering::SeqCst) == 2).await;
    world.release.add_permits(2);
    assert_eq!(
        read_until(&mut doomed, "never").await,
        "",
        "closed, unanswered"
    );
    let answer = read_until(&mut fine, "light offset=-1&live=long-poll 0").await;
    assert!(answer.starts_with("HTTP/1.1 200 OK\r\n"), "{answer}");
    let mut next = TcpStream::connect(addr).await.unwrap();
    next.write_all(LONG_POLL).await.unwrap();
    wait_for(|| world.waiting.load(Ordering::SeqCst) == 1).await;
    world.release.add_permits(1);
    read_until(&mut next, "light offset=-1&live=long-poll 0").await;
}
