//! Benchmarks of the edge, each starting its own origin and edge processes
//! (and the ceiling where it compares), and what the edge's benchmarks
//! share (`sse-fanout` in `fanout.rs`, `many-tails`):
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

/// The benchmark's script, step by step as its report reads (long by
/// design: split, its steps would only pass their state along).
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
