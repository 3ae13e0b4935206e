//! Descriptor exhaustion: the origin under `prlimit --nofile=128`, with
//! 180 connections held open (idle, or with a long-poll in flight) and 350
//! streams read, appended to and created. It never stops; every answer it gives is a
//! success or `503` + `Retry-After`; what needs no new descriptor (appends,
//! creates, reads from the log, long-polls) is still served; once the
//! connections close everything succeeds again without a restart; and a
//! SIGKILL restart under the same limit finds every acknowledged byte.
//!
//! Two connection caps:
//! - past the limit (`--max-connections 1024`): the held connections take
//!   every descriptor, so accept fails with `EMFILE`, and so does every open
//!   of a stream's file (reads answer 503), of a new log segment and of the
//!   promoter's files;
//! - the default (half the limit, 64 here): the connections past it wait in
//!   the listener's backlog and cost the origin nothing, and no answer at
//!   all is a 503 (at this limit the pool of stream files, 64 at least, and
//!   the connections can still use up the descriptors between them; the
//!   pool then gives its own back and opens again).
//!
//! The origin is restarted before the pressure so that its pool of open
//! stream files starts empty: a read of a stream that lives in its own file
//! then needs a new descriptor.

use crate::common;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use common::process::{count_files, Proc};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;

const NOFILE: usize = 128;
/// Streams that live in their own files (created with more than the
/// promotion threshold of 64 KiB), and streams whose bytes stay in the log.
const FILE_STREAMS: usize = 150;
const LOG_STREAMS: usize = 150;
/// Connections that send requests all through the pressure.
const WORKERS: usize = 8;
/// Connections with a long-poll in flight, on the first log streams.
const LONG_POLLS: usize = 12;
/// Connections opened and left silent. With the workers and long-polls
/// that is 180 connections: past the limit the origin accepts about 107 in
/// all (every descriptor left), under the default cap 64; the rest wait in
/// the listener's backlog of 128 (more would find it full, and their
/// connects would time out in the kernel).
const IDLE: usize = 160;
/// The default connection cap at this limit: half of it.
const DEFAULT_CAP: usize = NOFILE / 2;
/// Streams created during the pressure.
const FRESH: usize = 48;
/// The bound on every wait for a state (never reached when all is well).
const PATIENCE: Duration = Duration::from_secs(90);
const OCTETS: &str = "application/octet-stream";

/// The origin's connection cap.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cap {
    /// Half the descriptor limit: 64.
    Default,
    /// Past the descriptor limit: connections alone can take them all.
    PastTheLimit,
}

fn spawn_origin(data: &Path, cap: Cap) -> Proc {
    let limit = format!("--nofile={NOFILE}:{NOFILE}");
    let mut args: Vec<&std::ffi::OsStr> = vec![
        "--data".as_ref(),
        data.as_os_str(),
        "--object-store".as_ref(),
        "none".as_ref(),
        // Checkpoints (a new log segment, new files) come due under the
        // pressure too.
        "--checkpoint-bytes".as_ref(),
        "1MiB".as_ref(),
        // Held connections stay open for the whole test.
        "--header-read-timeout".as_ref(),
        "600s".as_ref(),
    ];
    if cap == Cap::PastTheLimit {
        args.extend::<[&std::ffi::OsStr; 2]>(["--max-connections".as_ref(), "1024".as_ref()]);
    }
    common::process::spawn(&["prlimit", &limit], &args)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The process's open sockets: the listener's and the connections'.
fn open_sockets(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| {
        d.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
            .filter(|target| target.to_string_lossy().starts_with("socket:"))
            .count()
    })
}

/// `len` bytes of `tag` repeated: each stream's bytes are its own.
fn filler(tag: &str, len: usize) -> Vec<u8> {
    tag.bytes().cycle().take(len).collect()
}

/// What the pressure appends to a stream: 4 KiB, or to every fifth log
/// stream past the promotion threshold (64 KiB), so that the promoter
/// tries to open files too.
fn pressure_body(path: &str) -> Vec<u8> {
    let fifth = path
        .strip_prefix("/v1/stream/fd/log-")
        .and_then(|i| i.parse::<usize>().ok())
        .is_some_and(|i| i % 5 == 0);
    let len = if fifth { 70 * 1024 } else { 4096 };
    filler(&format!("pressure {path};"), len)
}

/// The origin child and every log line it wrote so far.
struct Watched {
    proc: Proc,
    lines: Vec<String>,
}

impl Watched {
    fn start(data: &Path, cap: Cap) -> Self {
        Watched {
            proc: spawn_origin(data, cap),
            lines: Vec::new(),
        }
    }

    fn pid(&self) -> u32 {
        self.proc.child.id()
    }

    fn base(&self) -> String {
        format!("http://{}", self.proc.addr)
    }

    /// Takes in the log written since, and fails the test (with the end of
    /// the log) if the process has stopped.
    fn check_alive(&mut self) {
        while let Ok(line) = self.proc.log.try_recv() {
            self.lines.push(line);
        }
        if let Some(status) = self.proc.child.try_wait().expect("try_wait") {
            let end = self.lines[self.lines.len().saturating_sub(40)..].join("\n");
            panic!("the origin stopped ({status}); its log ended with:\n{end}");
        }
    }

    fn logged(&mut self, needle: &str) -> usize {
        self.check_alive();
        self.lines.iter().filter(|l| l.contains(needle)).count()
    }

    /// The messages of the log lines with `needle`, each with its count.
    fn messages_with(&mut self, needle: &str) -> BTreeMap<String, usize> {
        self.check_alive();
        let mut seen = BTreeMap::new();
        for line in self.lines.iter().filter(|l| l.contains(needle)) {
            // `… LEVEL target: message key=value …`
            let message = line.split_once(": ").map_or(line.as_str(), |(_, m)| m);
            let words: Vec<&str> = message
                .split(' ')
                .take_while(|w| !w.contains('='))
                .collect();
            *seen.entry(words.join(" ")).or_default() += 1;
        }
        seen
    }
}

/// One HTTP/1.1 connection of its own (a request that fails on it is a
/// connection the origin dropped, not a new connection tried).
struct Conn {
    tx: SendRequest<Full<Bytes>>,
}

struct Answer {
    status: u16,
    retry_after: Option<String>,
    body: Bytes,
}

impl Conn {
    async fn open(addr: SocketAddr) -> Conn {
        let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
        let (tx, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .expect("handshake");
        tokio::spawn(conn);
        Conn { tx }
    }

    async fn send(&mut self, method: &str, target: &str, body: Option<Vec<u8>>) -> Answer {
        let mut req = http::Request::builder()
            .method(method)
            .uri(target)
            .header("host", "origin");
        if body.is_some() {
            req = req.header("content-type", OCTETS);
        }
        let req = req
            .body(Full::new(Bytes::from(body.unwrap_or_default())))
            .unwrap();
        let answered = async {
            self.tx.ready().await?;
            let resp = self.tx.send_request(req).await?;
            let status = resp.status().as_u16();
            let retry_after = resp
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
            let body = resp.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>(Answer {
                status,
                retry_after,
                body,
            })
        };
        match tokio::time::timeout(PATIENCE, answered).await {
            Ok(Ok(a)) => a,
            Ok(Err(e)) => panic!("{method} {target}: the connection failed: {e}"),
            Err(_) => panic!("{method} {target}: no answer in {PATIENCE:?}"),
        }
    }
}

/// Answers counted by kind; anything but the expected success, `503` or
/// `429` (each with `Retry-After`) fails the test.
#[derive(Default, Debug)]
struct Tally {
    ok: usize,
    unavailable: usize,
    limited: usize,
}

impl Tally {
    /// Whether `a` is the success `ok`.
    fn judge(&mut self, what: &str, a: &Answer, ok: u16) -> bool {
        match a.status {
            s if s == ok => {
                self.ok += 1;
                return true;
            }
            503 => self.unavailable += 1,
            429 => self.limited += 1,
            s => panic!(
                "{what}: answered {s}, not {ok}/503/429: {}",
                String::from_utf8_lossy(&a.body)
            ),
        }
        assert!(
            a.retry_after.is_some(),
            "{what}: {} without Retry-After",
            a.status
        );
        false
    }

    fn add(&mut self, other: &Tally) {
        self.ok += other.ok;
        self.unavailable += other.unavailable;
        self.limited += other.limited;
    }
}

/// A stream and every byte acknowledged to it, in order.
struct Stream {
    path: String,
    in_file: bool,
    bytes: Vec<u8>,
}

/// The metric `name`'s value in a `/metrics` text.
fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Every stream reads back exactly its acknowledged bytes (no other answer).
async fn read_back(client: &reqwest::Client, base: &str, streams: &[Stream]) {
    futures::future::join_all(streams.chunks(20).map(|part| async move {
        for s in part {
            let r = client
                .get(format!("{base}{}?offset=-1", s.path))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200, "read {}", s.path);
            let got = r.bytes().await.unwrap();
            assert!(
                got == s.bytes,
                "{} read back {} bytes, {} were acknowledged",
                s.path,
                got.len(),
                s.bytes.len()
            );
        }
    }))
    .await;
}

/// Polls `/metrics` through `conn` until `holds` says yes.
async fn until_metrics(conn: &mut Conn, what: &str, holds: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let a = conn.send("GET", "/metrics", None).await;
        assert_eq!(a.status, 200);
        if holds(std::str::from_utf8(&a.body).unwrap()) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Samples the process's open descriptors until stopped; returns the most
/// seen (a figure: the test asserts on states it waits for, not on this).
struct Sampler {
    running: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<usize>,
}

impl Sampler {
    fn start(pid: u32) -> Self {
        let running = Arc::new(AtomicBool::new(true));
        let thread = std::thread::spawn({
            let running = Arc::clone(&running);
            move || {
                let mut peak = 0;
                while running.load(Ordering::Relaxed) {
                    peak = peak.max(open_fds(pid));
                    std::thread::sleep(Duration::from_millis(2));
                }
                peak
            }
        });
        Sampler { running, thread }
    }

    fn stop(self) -> usize {
        self.running.store(false, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// Makes the streams on a fresh origin in `data`, FILE_STREAMS of them in
/// files of their own, and stops it once every file is there.
async fn make_streams(client: &reqwest::Client, data: &Path, cap: Cap) -> Vec<Stream> {
    let streams: Vec<Stream> = (0..FILE_STREAMS)
        .map(|i| Stream {
            path: format!("/v1/stream/fd/file-{i}"),
            in_file: true,
            bytes: filler(&format!("file {i};"), 70 * 1024),
        })
        .chain((0..LOG_STREAMS).map(|i| Stream {
            path: format!("/v1/stream/fd/log-{i}"),
            in_file: false,
            bytes: filler(&format!("log {i};"), 100 + i),
        }))
        .collect();
    let mut origin = Watched::start(data, cap);
    let base = origin.base();
    futures::future::join_all(streams.chunks(20).map(|part| {
        let base = &base;
        async move {
            for s in part {
                let r = client
                    .put(format!("{base}{}", s.path))
                    .header("content-type", OCTETS)
                    .body(s.bytes.clone())
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 201, "create {}", s.path);
            }
        }
    }))
    .await;
    let deadline = Instant::now() + PATIENCE;
    while count_files(&data.join("streams")) < FILE_STREAMS {
        origin.check_alive();
        assert!(Instant::now() < deadline, "the large streams got files");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    origin.proc.terminate();
    streams
}

/// Connections held open through the pressure.
struct Held {
    /// Each sends the requests of one part of the streams.
    workers: Vec<Conn>,
    /// Each waits at the end of one of the first log streams.
    long_polls: Vec<tokio::task::JoinHandle<(Conn, Answer)>>,
    idle: Vec<tokio::net::TcpStream>,
}

/// Opens the workers' connections, then the long-polls, then the idle
/// ones (accept takes them in that order), and waits until the origin
/// holds all it will: every descriptor past the limit, the cap's worth of
/// connections under the default cap.
async fn hold_connections(origin: &mut Watched, cap: Cap) -> Held {
    let (addr, pid) = (origin.proc.addr, origin.pid());
    let sockets = open_sockets(pid);
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let mut conn = Conn::open(addr).await;
        assert_eq!(conn.send("GET", "/metrics", None).await.status, 200);
        workers.push(conn);
    }
    let long_polls = (0..LONG_POLLS)
        .map(|i| {
            let target =
                format!("/v1/stream/fd/log-{i}?offset=now&live=long-poll&timeout_ms=60000");
            tokio::spawn(async move {
                let mut conn = Conn::open(addr).await;
                let a = conn.send("GET", &target, None).await;
                (conn, a)
            })
        })
        .collect();
    until_metrics(&mut workers[0], "the long-polls wait", |m| {
        metric(m, "ds_origin_long_polls_waiting") >= LONG_POLLS as f64
    })
    .await;
    let mut idle = Vec::new();
    for _ in 0..IDLE {
        idle.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
    }
    let deadline = Instant::now() + PATIENCE;
    loop {
        let held = match cap {
            Cap::PastTheLimit => open_fds(pid) >= NOFILE && origin.logged("os error 24") > 0,
            Cap::Default => open_sockets(pid) >= sockets + DEFAULT_CAP,
        };
        origin.check_alive();
        if held {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the origin held its connections: {} descriptors open",
            open_fds(pid)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Held {
        workers,
        long_polls,
        idle,
    }
}

/// Through the workers' connections: every stream read and appended to,
/// FRESH streams created. Returns the streams with what was acknowledged,
/// and the answers to reads of streams' files and to the writes.
async fn press(workers: &mut [Conn], streams: Vec<Stream>) -> (Vec<Stream>, Tally, Tally) {
    let mut parts: Vec<Vec<Stream>> = (0..WORKERS).map(|_| Vec::new()).collect();
    for (i, s) in streams.into_iter().enumerate() {
        parts[i % WORKERS].push(s);
    }
    let mut fresh: Vec<Vec<Stream>> = (0..WORKERS).map(|_| Vec::new()).collect();
    for i in 0..FRESH {
        fresh[i % WORKERS].push(Stream {
            path: format!("/v1/stream/fd/fresh-{i}"),
            in_file: false,
            bytes: filler(&format!("fresh {i};"), 200 + i),
        });
    }
    let work = workers.iter_mut().zip(parts).zip(fresh);
    let results = futures::future::join_all(work.map(|((conn, mut part), fresh)| async move {
        let mut reads_from_files = Tally::default();
        let mut writes = Tally::default();
        for s in &mut part {
            let a = conn
                .send("GET", &format!("{}?offset=-1", s.path), None)
                .await;
            if !s.in_file {
                // Bytes in the log need no new descriptor.
                assert_eq!(a.status, 200, "read {} from the log", s.path);
                assert!(a.body == s.bytes, "read {}", s.path);
            } else if reads_from_files.judge(&s.path, &a, 200) {
                assert!(a.body == s.bytes, "read {}", s.path);
            }
            let body = pressure_body(&s.path);
            let a = conn.send("POST", &s.path, Some(body.clone())).await;
            if writes.judge(&s.path, &a, 204) {
                s.bytes.extend_from_slice(&body);
            }
        }
        for s in fresh {
            let a = conn.send("PUT", &s.path, Some(s.bytes.clone())).await;
            if writes.judge(&s.path, &a, 201) {
                part.push(s);
            }
        }
        assert_eq!(conn.send("GET", "/metrics", None).await.status, 200);
        (part, reads_from_files, writes)
    }))
    .await;
    let mut streams = Vec::new();
    let (mut reads_from_files, mut writes) = (Tally::default(), Tally::default());
    for (part, files, written) in results {
        streams.extend(part);
        reads_from_files.add(&files);
        writes.add(&written);
    }
    (streams, reads_from_files, writes)
}

/// Each long-poll woke with exactly the append it waited for; returns
/// their connections (still open) and their answers.
async fn long_poll_answers(
    long_polls: Vec<tokio::task::JoinHandle<(Conn, Answer)>>,
    streams: &[Stream],
) -> (Vec<Conn>, Tally) {
    let mut answers = Tally::default();
    let mut conns = Vec::new();
    for (i, poll) in long_polls.into_iter().enumerate() {
        let (conn, a) = poll.await.unwrap();
        let path = format!("/v1/stream/fd/log-{i}");
        let appended = streams
            .iter()
            .any(|s| s.path == path && s.bytes.ends_with(&pressure_body(&path)));
        if answers.judge(&path, &a, 200) {
            assert!(appended, "{path}: a long-poll woke without an append");
            assert!(a.body == pressure_body(&path), "long-poll on {path}");
        }
        conns.push(conn);
    }
    (conns, answers)
}

/// Once the held connections closed: reads of streams' files succeed again
/// (polled), then every stream reads back exactly, and appends and a create
/// succeed, all without a 503. Returns the descriptors open once reads
/// succeeded again.
async fn recover(
    origin: &mut Watched,
    client: &reqwest::Client,
    streams: &mut Vec<Stream>,
) -> usize {
    let base = origin.base();
    let in_file = streams.iter().find(|s| s.in_file).unwrap();
    let probe = format!("{base}{}?offset=-1", in_file.path);
    let deadline = Instant::now() + PATIENCE;
    loop {
        origin.check_alive();
        let r = client.get(&probe).send().await.unwrap();
        if r.status() == 200 {
            break;
        }
        assert_eq!(r.status(), 503, "a read while descriptors return");
        assert!(Instant::now() < deadline, "reads from files resume");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let released = open_fds(origin.pid());
    read_back(client, &base, streams).await;
    for s in streams.iter_mut() {
        let body = filler(&format!("after {};", s.path), 512);
        let r = client
            .post(format!("{base}{}", s.path))
            .header("content-type", OCTETS)
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204, "append to {} after the pressure", s.path);
        s.bytes.extend_from_slice(&body);
    }
    let after = Stream {
        path: "/v1/stream/fd/after".into(),
        in_file: false,
        bytes: b"after".to_vec(),
    };
    let r = client
        .put(format!("{base}{}", after.path))
        .header("content-type", OCTETS)
        .body(after.bytes.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "a create after the pressure");
    streams.push(after);
    read_back(client, &base, streams).await;
    origin.check_alive();
    released
}

/// What a run saw.
#[derive(Debug)]
#[allow(dead_code)] // read through Debug: the figures printed
struct Seen {
    cap: Cap,
    /// Descriptors open: at the start (after the restart), once the
    /// connections were held, the most sampled under the pressure, once
    /// reads succeeded again, after every stream was read, and after the
    /// SIGKILL restart's reads.
    fds_at_start: usize,
    fds_held: usize,
    fds_peak: usize,
    fds_released: usize,
    fds_after: usize,
    fds_restarted: usize,
    /// Connections the origin held (accepted, open) under the pressure.
    connections: usize,
    reads_from_files: Tally,
    writes: Tally,
    long_polls: Tally,
    /// Log lines naming EMFILE, by message.
    emfile: BTreeMap<String, usize>,
}

/// The whole scenario under `cap`, asserting what holds under every cap.
async fn run(cap: Cap) -> Seen {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder()
        .timeout(PATIENCE)
        .build()
        .unwrap();
    let streams = make_streams(&client, dir.path(), cap).await;
    // A restart opens no stream file: the pool of open files starts empty.
    let mut origin = Watched::start(dir.path(), cap);
    let pid = origin.pid();
    let fds_at_start = open_fds(pid);
    let sockets_at_start = open_sockets(pid);
    let Held {
        mut workers,
        long_polls,
        idle,
    } = hold_connections(&mut origin, cap).await;
    let connections = open_sockets(pid) - sockets_at_start;
    let fds_held = open_fds(pid);
    let sampler = Sampler::start(pid);
    let (mut streams, reads_from_files, writes) = press(&mut workers, streams).await;
    let (polled, long_polls) = long_poll_answers(long_polls, &streams).await;
    let fds_peak = sampler.stop();
    origin.check_alive();

    drop((idle, polled, workers));
    let fds_released = recover(&mut origin, &client, &mut streams).await;
    let fds_after = open_fds(pid);
    let emfile = origin.messages_with("os error 24");

    // SIGKILL, and a restart under the same limit finds every byte.
    drop(origin);
    let mut origin = Watched::start(dir.path(), cap);
    read_back(&client, &origin.base(), &streams).await;
    origin.check_alive();
    let fds_restarted = open_fds(origin.pid());
    let seen = Seen {
        cap,
        fds_at_start,
        fds_held,
        fds_peak,
        fds_released,
        fds_after,
        fds_restarted,
        connections,
        reads_from_files,
        writes,
        long_polls,
        emfile,
    };
    eprintln!("{seen:#?}");
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_past_the_limit_take_every_descriptor_and_all_recovers() {
    let seen = run(Cap::PastTheLimit).await;
    assert!(
        seen.reads_from_files.unavailable > 0,
        "reads that needed a descriptor found none, and answered 503"
    );
    assert!(
        seen.emfile.contains_key("accept failed"),
        "{:?}",
        seen.emfile
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_the_default_cap_a_connection_flood_costs_no_answer() {
    let seen = run(Cap::Default).await;
    assert_eq!(seen.reads_from_files.unavailable, 0);
    assert_eq!(seen.writes.unavailable, 0);
    assert_eq!(seen.connections, DEFAULT_CAP, "connections held at the cap");
}
