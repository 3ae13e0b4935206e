//! Benchmarks of the edge, each starting its own origin and edge processes
//! (and the ceiling where it compares):
//! - `sse-fanout`: N SSE readers through the edge on one stream, a writer
//!   appending timestamped events at a fixed rate; prints publish-to-receive
//!   p50/p99, the edge's and the origin's memory per idle SSE reader, and
//!   the edge's per waiting (collapsed) long-poller.
//! - `catchup-compare`: warm-cache catch-up reads from the edge, the same
//!   reads from the origin, and the bare-hyper ceiling serving a static body
//!   of the same size; prints each and the edge's share of the ceiling.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use tokio::process::{Child, Command};

use crate::append::{connect, send};
use crate::compare::start;
use crate::stats::Summary;

#[derive(clap::Args)]
pub struct Binaries {
    /// The origin binary to start.
    #[arg(long, default_value = "target/release/origin")]
    pub origin: PathBuf,
    /// The edge binary to start.
    #[arg(long, default_value = "target/release/edge")]
    pub edge: PathBuf,
}

#[derive(clap::Args)]
pub struct FanoutArgs {
    #[command(flatten)]
    pub bins: Binaries,
    /// SSE readers through the edge, all on one stream.
    #[arg(long, default_value_t = 1000)]
    pub readers: usize,
    /// Events appended per second.
    #[arg(long, default_value_t = 50)]
    pub rate: u64,
    /// Seconds of appends measured.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Long-pollers waiting at once for the memory figure (0: skip).
    #[arg(long, default_value_t = 1000)]
    pub long_pollers: usize,
    /// Readers and long-pollers share this many HTTP/2 connections (prior
    /// knowledge), spread evenly; 0: HTTP/1.1, one connection each. Each
    /// connection carries at most the server's 256 streams.
    #[arg(long, default_value_t = 0)]
    pub http2_connections: usize,
    /// Open readers a hundred at a time, each hundred once the last is in
    /// (what readers cost once in place, without the cost of all arriving
    /// at once).
    #[arg(long)]
    pub trickle: bool,
}

/// Where a reader sends its request: its own HTTP/1.1 connection, or one
/// of a few shared HTTP/2 connections.
#[derive(Clone)]
pub(crate) enum Readers {
    Http1(SocketAddr),
    Http2(Vec<hyper::client::conn::http2::SendRequest<Full<Bytes>>>),
}

impl Readers {
    pub(crate) async fn open(
        addr: SocketAddr,
        http2_connections: usize,
    ) -> anyhow::Result<Readers> {
        if http2_connections == 0 {
            return Ok(Readers::Http1(addr));
        }
        let mut senders = Vec::with_capacity(http2_connections);
        for _ in 0..http2_connections {
            let stream = tokio::net::TcpStream::connect(addr).await?;
            stream.set_nodelay(true)?;
            let (sender, conn) = hyper::client::conn::http2::handshake(
                hyper_util::rt::TokioExecutor::new(),
                hyper_util::rt::TokioIo::new(stream),
            )
            .await?;
            tokio::spawn(conn);
            senders.push(sender);
        }
        Ok(Readers::Http2(senders))
    }

    /// Sends the `i`th reader's request.
    pub(crate) async fn send(
        &self,
        i: usize,
        req: Request<Full<Bytes>>,
    ) -> anyhow::Result<hyper::Response<hyper::body::Incoming>> {
        match self {
            Readers::Http1(addr) => {
                let mut s = connect(*addr).await?;
                s.ready().await?;
                Ok(s.send_request(crate::append::with_host(req)).await?)
            }
            Readers::Http2(senders) => {
                let mut s = senders[i % senders.len()].clone();
                s.ready().await?;
                let (mut parts, body) = req.into_parts();
                if parts.uri.authority().is_none() {
                    parts.uri = format!("http://127.0.0.1{}", parts.uri).parse()?;
                }
                Ok(s.send_request(Request::from_parts(parts, body)).await?)
            }
        }
    }
}

#[derive(clap::Args)]
pub struct CatchupArgs {
    #[command(flatten)]
    pub bins: Binaries,
    /// Bytes per read (`max_bytes`; the ceiling's body size).
    #[arg(long, default_value_t = 65536)]
    pub read_bytes: usize,
    /// MiB of stream to read from (complete chunks are cached at the edge).
    #[arg(long, default_value_t = 32)]
    pub stream_mib: usize,
    /// Closed-loop readers, one connection each.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
}

/// An origin and an edge in front of it, as processes of their own.
pub(crate) struct Pair {
    pub(crate) origin: Child,
    pub(crate) edge: Child,
    pub(crate) edge_addr: SocketAddr,
    pub(crate) origin_addr: SocketAddr,
    data: PathBuf,
}

impl Pair {
    pub(crate) async fn start(bins: &Binaries) -> anyhow::Result<Pair> {
        Self::start_with(bins, &[]).await
    }

    /// [`Pair::start`], with `edge_args` added to the edge's command line.
    pub(crate) async fn start_with(bins: &Binaries, edge_args: &[&str]) -> anyhow::Result<Pair> {
        let data = std::env::temp_dir().join(format!("ds-edge-bench-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&data);
        let (origin, origin_addr) = start(
            Command::new(&bins.origin)
                .args(["--listen", "127.0.0.1:0", "--durability", "async", "--data"])
                .arg(&data),
        )
        .await?;
        let (edge, edge_addr) = start(
            Command::new(&bins.edge)
                .args([
                    "--listen",
                    "127.0.0.1:0",
                    "--origin",
                    &format!("http://{origin_addr}"),
                ])
                .args(edge_args),
        )
        .await?;
        Ok(Pair {
            origin,
            edge,
            edge_addr,
            origin_addr,
            data,
        })
    }

    pub(crate) fn edge_rss_kib(&self) -> u64 {
        rss_kib(self.edge.id().unwrap_or(0))
    }

    pub(crate) async fn stop(mut self) {
        let _ = self.edge.start_kill();
        let _ = self.edge.wait().await;
        let _ = self.origin.start_kill();
        let _ = self.origin.wait().await;
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

/// Resident memory of a process, from /proc.
pub(crate) fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

pub(crate) async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    content_type: &str,
    body: Bytes,
) -> anyhow::Result<u16> {
    let mut s = connect(addr).await?;
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", content_type)
        .body(Full::new(body))?;
    send(&mut s, req).await
}

/// One value of a server's `/metrics`.
pub(crate) async fn metric(addr: SocketAddr, series: &str) -> anyhow::Result<i64> {
    let mut s = connect(addr).await?;
    s.ready().await?;
    let resp = s
        .send_request(Request::get("/metrics").body(Full::new(Bytes::new()))?)
        .await?;
    let text = resp.into_body().collect().await?.to_bytes();
    let text = String::from_utf8_lossy(&text);
    text.lines()
        .find_map(|l| {
            l.strip_prefix(series)?
                .strip_prefix(' ')?
                .trim()
                .parse()
                .ok()
        })
        .ok_or_else(|| anyhow::anyhow!("no {series} in /metrics"))
}

pub(crate) async fn wait_metric(addr: SocketAddr, series: &str, want: i64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let got = metric(addr, series).await?;
        if got == want {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "{series} never reached {want} (stayed at {got})"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// The writer of the SSE benchmarks: `total` appends at `rate` a second on
/// one connection to `addr`, the `k`th to `path(k)`, each one line holding
/// the microseconds since `clock` when it was sent. Returns, in order, when
/// each was sent and when its answer came (microseconds since `clock`).
pub(crate) async fn write_stamped(
    addr: SocketAddr,
    rate: u64,
    total: usize,
    clock: Instant,
    path: impl Fn(usize) -> String,
) -> anyhow::Result<Vec<(u64, u64)>> {
    let mut writer = connect(addr).await?;
    let mut tick = tokio::time::interval(Duration::from_micros(1_000_000 / rate.max(1)));
    let mut times = Vec::with_capacity(total);
    for k in 0..total {
        tick.tick().await;
        let sent = clock.elapsed().as_micros() as u64;
        let req = Request::post(path(k))
            .header("content-type", "text/plain")
            .body(Full::new(Bytes::from(format!("{sent}\n"))))?;
        let status = send(&mut writer, req).await?;
        anyhow::ensure!(status < 300, "append: {status}");
        times.push((sent, clock.elapsed().as_micros() as u64));
    }
    Ok(times)
}

/// Delivery latencies from `(sent, received)` records: from each append's
/// send, and from its answer (`written`, from [`write_stamped`]; a reader
/// may receive an event before its writer has the answer: 0 then).
fn latencies(records: &[(u32, u32)], written: &[(u64, u64)]) -> (Vec<u32>, Vec<u32>) {
    let mut from_send = Vec::with_capacity(records.len());
    let mut from_answer = Vec::with_capacity(records.len());
    for &(sent, got) in records {
        from_send.push(got.saturating_sub(sent));
        let answered = written
            .binary_search_by_key(&u64::from(sent), |w| w.0)
            .map_or(u64::from(sent), |k| written[k].1);
        from_answer.push(u64::from(got).saturating_sub(answered).min(u32::MAX as u64) as u32);
    }
    (from_send, from_answer)
}

/// Takes the whole SSE events at the front of `buf` and calls `each` with
/// the timestamp (microseconds) of every line of their `data` events, in
/// order; a partial event stays in `buf`.
pub(crate) fn data_stamps(buf: &mut Vec<u8>, mut each: impl FnMut(u64)) {
    while let Some(at) = buf.windows(2).position(|w| w == b"\n\n") {
        let event: Vec<u8> = buf.drain(..at + 2).collect();
        let text = String::from_utf8_lossy(&event);
        if !text.starts_with("event: data") {
            continue;
        }
        for line in text.lines().filter_map(|l| l.strip_prefix("data:")) {
            if let Ok(sent) = line.trim().parse::<u64>() {
                each(sent);
            }
        }
    }
}

/// One fan-out run: `readers` SSE readers at `readers_addr` on `path`, a
/// writer appending timestamped lines at `rate` per second for `seconds`.
/// Returns the publish-to-receive summary (its `errors` count the readers
/// that missed an event) and the RSS of `measure_pid` once every reader was
/// connected.
async fn fanout_round(
    readers_addr: SocketAddr,
    metrics_addr: SocketAddr,
    open_series: &str,
    path: &'static str,
    args: &FanoutArgs,
    measure_pid: u32,
) -> anyhow::Result<Fanned> {
    let clock = Instant::now();
    let expected = args.rate * args.seconds;
    let mut readers = Vec::with_capacity(args.readers);
    let via = Readers::open(readers_addr, args.http2_connections).await?;
    for i in 0..args.readers {
        let via = via.clone();
        readers.push(tokio::spawn(async move {
            let resp = via
                .send(
                    i,
                    Request::get(format!("{path}?offset=now&live=sse"))
                        .body(Full::new(Bytes::new()))?,
                )
                .await?;
            anyhow::ensure!(resp.status() == 200, "SSE: {}", resp.status());
            let mut body = resp.into_body();
            let mut buf: Vec<u8> = Vec::new();
            // (sent, received), microseconds since `clock`.
            let mut got: Vec<(u32, u32)> = Vec::with_capacity(expected as usize);
            while (got.len() as u64) < expected {
                let Some(frame) = body.frame().await else {
                    break;
                };
                let Ok(data) = frame?.into_data() else {
                    continue;
                };
                let now = clock.elapsed().as_micros().min(u32::MAX as u128) as u32;
                buf.extend_from_slice(&data);
                data_stamps(&mut buf, |sent| {
                    got.push((sent.min(u32::MAX as u64) as u32, now));
                });
            }
            anyhow::Ok(got)
        }));
        if args.trickle && i % 100 == 99 {
            wait_metric(metrics_addr, open_series, i as i64 + 1).await?;
        }
    }
    wait_metric(metrics_addr, open_series, args.readers as i64).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = rss_kib(measure_pid);

    let started = Instant::now();
    let written = write_stamped(metrics_addr, args.rate, expected as usize, clock, |_| {
        path.to_owned()
    })
    .await?;
    let (mut from_send, mut from_answer) = (Vec::new(), Vec::new());
    let mut short = 0;
    for r in readers {
        let got = tokio::time::timeout(Duration::from_secs(30), r)
            .await
            .map_err(|_| anyhow::anyhow!("a reader did not get every event"))???;
        if (got.len() as u64) < expected {
            short += 1;
        }
        let (s, a) = latencies(&got, &written);
        from_send.extend(s);
        from_answer.extend(a);
    }
    let elapsed = started.elapsed();
    Ok(Fanned {
        from_send: Summary::from_latencies(from_send, short, elapsed),
        from_answer: Summary::from_latencies(from_answer, short, elapsed),
        rss_kib: rss,
    })
}

/// What one fan-out round measured.
struct Fanned {
    /// Delivery latency from each append's send...
    from_send: Summary,
    /// ...and from its answer.
    from_answer: Summary,
    /// The measured process's RSS once every reader was connected.
    rss_kib: u64,
}

fn fanout_line(label: &str, args: &FanoutArgs, f: &Fanned) -> String {
    let ms = |us: u64| us as f64 / 1000.0;
    let (s, a) = (&f.from_send, &f.from_answer);
    format!(
        "{label}: {} readers, {} events at {}/s: send-to-receive p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms; answer-to-receive p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms  ({} deliveries, {} readers short)",
        args.readers,
        args.rate * args.seconds,
        args.rate,
        ms(s.p50_us),
        ms(s.p99_us),
        ms(s.max_us),
        ms(a.p50_us),
        ms(a.p99_us),
        ms(a.max_us),
        s.requests,
        s.errors,
    )
}

pub async fn fanout(args: FanoutArgs) -> anyhow::Result<()> {
    let pair = Pair::start(&args.bins).await?;
    let edge = pair.edge_addr;
    let edge_pid = pair.edge.id().unwrap_or(0);
    for path in ["/v1/stream/fanout", "/v1/stream/fanout-direct"] {
        let status = request(edge, "PUT", path, "text/plain", Bytes::new()).await?;
        anyhow::ensure!(status == 201, "create: {status}");
    }
    // Let the edge settle before the baseline.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let base_rss = pair.edge_rss_kib();
    let through_edge = fanout_round(
        edge,
        edge,
        "ds_edge_sse_open",
        "/v1/stream/fanout",
        &args,
        edge_pid,
    )
    .await?;
    let tails = metric(edge, "ds_edge_upstream_requests_total{kind=\"tail\"}").await?;
    println!(
        "{}  upstream tail polls {tails}",
        fanout_line("edge", &args, &through_edge)
    );
    println!(
        "edge memory per idle SSE reader: {:.1} KiB (RSS {} -> {} KiB for {} readers)",
        (through_edge.rss_kib.saturating_sub(base_rss)) as f64 / args.readers.max(1) as f64,
        base_rss,
        through_edge.rss_kib,
        args.readers
    );
    let origin = pair.origin_addr;
    let origin_pid = pair.origin.id().unwrap_or(0);
    let origin_base = rss_kib(origin_pid);
    let direct = fanout_round(
        origin,
        origin,
        "ds_origin_sse_open",
        "/v1/stream/fanout-direct",
        &args,
        origin_pid,
    )
    .await?;
    println!("{}", fanout_line("origin (direct, peer)", &args, &direct));
    // The origin also served the edge's tail and the first round's
    // appends: its growth over this round is its own readers'.
    println!(
        "origin memory per idle SSE reader: {:.1} KiB (RSS {} -> {} KiB for {} readers)",
        (direct.rss_kib.saturating_sub(origin_base)) as f64 / args.readers.max(1) as f64,
        origin_base,
        direct.rss_kib,
        args.readers
    );
    println!(
        "p50 edge / origin: {:.0} %   p99 edge / origin: {:.0} %",
        100.0 * through_edge.from_send.p50_us as f64 / direct.from_send.p50_us.max(1) as f64,
        100.0 * through_edge.from_send.p99_us as f64 / direct.from_send.p99_us.max(1) as f64
    );

    pair.stop().await;
    if args.long_pollers > 0 {
        // A fresh edge, so memory the SSE readers freed does not hide what
        // the waiters take.
        let pair = Pair::start(&args.bins).await?;
        let edge = pair.edge_addr;
        let path = "/v1/stream/fanout";
        let status = request(edge, "PUT", path, "text/plain", Bytes::new()).await?;
        anyhow::ensure!(status == 201, "create: {status}");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let base = pair.edge_rss_kib();
        let mut pollers = Vec::with_capacity(args.long_pollers);
        let via = Readers::open(edge, args.http2_connections).await?;
        for i in 0..args.long_pollers {
            let via = via.clone();
            pollers.push(tokio::spawn(async move {
                let req = Request::get(format!(
                    "{path}?offset=now&live=long-poll&timeout_ms=60000&cursor=1"
                ))
                .body(Full::new(Bytes::new()))?;
                let resp = via.send(i, req).await?;
                let status = resp.status().as_u16();
                resp.into_body().collect().await?;
                anyhow::Ok(status)
            }));
        }
        wait_metric(edge, "ds_edge_long_polls_waiting", args.long_pollers as i64).await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let waiting = pair.edge_rss_kib();
        let flights = metric(edge, "ds_edge_long_poll_flights").await?;
        println!(
            "edge memory per waiting long-poller: {:.1} KiB (RSS {} -> {} KiB for {} waiters, {} upstream long-poll)",
            waiting.saturating_sub(base) as f64 / args.long_pollers as f64,
            base,
            waiting,
            args.long_pollers,
            flights
        );
        let status = request(edge, "POST", path, "text/plain", Bytes::from("0\n")).await?;
        anyhow::ensure!(status < 300, "append: {status}");
        for p in pollers {
            let _ = p.await;
        }
        pair.stop().await;
    }
    Ok(())
}

/// Closed-loop GETs over `paths` (each connection walks them in turn).
async fn get_loop(
    addr: SocketAddr,
    paths: Arc<Vec<String>>,
    connections: usize,
    warmup: u64,
    seconds: u64,
) -> anyhow::Result<Summary> {
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::with_capacity(connections);
    for c in 0..connections {
        let (paths, stop, measuring) = (paths.clone(), stop.clone(), measuring.clone());
        tasks.push(tokio::spawn(async move {
            let mut sender = connect(addr).await?;
            let mut lat = Vec::with_capacity(64 * 1024);
            let mut errors = 0u64;
            let mut i = c;
            while !stop.load(Ordering::Relaxed) {
                let req =
                    Request::get(paths[i % paths.len()].as_str()).body(Full::new(Bytes::new()))?;
                i += 1;
                let t = Instant::now();
                match send(&mut sender, req).await {
                    Ok(200) => {
                        if measuring.load(Ordering::Relaxed) {
                            lat.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        }
                    }
                    _ => {
                        errors += 1;
                        sender = connect(addr).await?;
                    }
                }
            }
            anyhow::Ok((lat, errors))
        }));
    }
    tokio::time::sleep(Duration::from_secs(warmup)).await;
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (mut all, mut errors) = (Vec::new(), 0);
    for t in tasks {
        let (lat, e) = t.await??;
        all.extend(lat);
        errors += e;
    }
    Ok(Summary::from_latencies(all, errors, elapsed))
}

pub async fn catchup(args: CatchupArgs) -> anyhow::Result<()> {
    let (mut ceiling, ceiling_addr) = start(
        Command::new(std::env::current_exe()?)
            .args(["ceiling", "--get-bytes"])
            .arg(args.read_bytes.to_string()),
    )
    .await?;
    let pair = Pair::start(&args.bins).await?;
    let path = "/v1/stream/catchup";
    let status = request(
        pair.edge_addr,
        "PUT",
        path,
        "application/octet-stream",
        Bytes::new(),
    )
    .await?;
    anyhow::ensure!(status == 201, "create: {status}");
    let part: Bytes = (0..1 << 20)
        .map(|i| (i % 251) as u8)
        .collect::<Vec<u8>>()
        .into();
    for _ in 0..args.stream_mib {
        let s = request(
            pair.edge_addr,
            "POST",
            path,
            "application/octet-stream",
            part.clone(),
        )
        .await?;
        anyhow::ensure!(s < 300, "append: {s}");
    }
    // Reads at every read_bytes step of the complete chunks.
    let complete = (args.stream_mib as u64 * (1 << 20)) / (4 << 20) * (4 << 20);
    let paths: Vec<String> = (0..complete / args.read_bytes as u64)
        .map(|i| {
            format!(
                "{path}?offset={:016x}&max_bytes={}",
                i * args.read_bytes as u64,
                args.read_bytes
            )
        })
        .collect();
    anyhow::ensure!(!paths.is_empty(), "the stream needs a complete 4 MiB chunk");
    let paths = Arc::new(paths);
    // Warm the edge: one pass over every read.
    let mut s = connect(pair.edge_addr).await?;
    for p in paths.iter() {
        let status = send(
            &mut s,
            Request::get(p.as_str()).body(Full::new(Bytes::new()))?,
        )
        .await?;
        anyhow::ensure!(status == 200, "warm-up read: {status}");
    }
    println!(
        "workload: {} closed-loop readers, {} B per read over {} MiB of complete chunks, {} s after {} s warm-up",
        args.connections, args.read_bytes, complete >> 20, args.seconds, args.warmup
    );
    let mb = |s: &Summary| s.rps() * args.read_bytes as f64 / 1e6;
    let ceiling_paths = Arc::new(vec!["/static".to_owned()]);
    let c = get_loop(
        ceiling_addr,
        ceiling_paths,
        args.connections,
        args.warmup,
        args.seconds,
    )
    .await?;
    println!(
        "{}  {:.0} MB/s",
        c.line("ceiling (bare hyper, static body)"),
        mb(&c)
    );
    let e = get_loop(
        pair.edge_addr,
        paths.clone(),
        args.connections,
        args.warmup,
        args.seconds,
    )
    .await?;
    println!("{}  {:.0} MB/s", e.line("edge (warm chunk cache)"), mb(&e));
    let o = get_loop(
        pair.origin_addr,
        paths,
        args.connections,
        args.warmup,
        args.seconds,
    )
    .await?;
    println!("{}  {:.0} MB/s", o.line("origin (direct)"), mb(&o));
    let hits = metric(pair.edge_addr, "ds_edge_cache_hits_total").await?;
    let misses = metric(pair.edge_addr, "ds_edge_cache_misses_total").await?;
    println!(
        "edge / ceiling: {:.0} %   edge / origin: {:.0} %   (edge cache: {hits} hits, {misses} misses)",
        100.0 * e.rps() / c.rps(),
        100.0 * e.rps() / o.rps()
    );
    let _ = ceiling.start_kill();
    let _ = ceiling.wait().await;
    pair.stop().await;
    Ok(())
}
