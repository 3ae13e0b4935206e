//! `many-tails`: many streams, one SSE reader each, through the edge (issue
//! 25's "many tailed streams"): every stream has a shared upstream tail of
//! its own, and those waiting requests share the edge's HTTP/2
//! connections to the origin (`edge::upstream::multiplexed`). Prints the
//! TCP connections from the edge to the origin (counted in `/proc/net/tcp`,
//! not taken from the edge's word) and the edge's own HTTP/2 gauges, the
//! memory each tailed stream costs the edge and the origin, and the
//! delivery latency of timestamped appends spread over the streams (each
//! append goes to one stream, so every reader must get exactly the appends
//! of its own stream, in order).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;

use crate::append::{connect, send};
use crate::edge::{metric, rss_kib, wait_metric, write_stamped, Binaries, Pair};
use crate::sse_framing::Lines;
use crate::stats::Summary;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub bins: Binaries,
    /// Streams, one SSE reader each.
    #[arg(long, default_value_t = 10_000)]
    pub streams: usize,
    /// Appends per second, spread over the streams in turn.
    #[arg(long, default_value_t = 100)]
    pub rate: u64,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// More arguments for the edge, one flag or value each (repeat it), e.g.
    /// `--edge-arg=--upstream-protocol --edge-arg=http1`: the tails over
    /// HTTP/1.1, a connection each, as behind an HTTP/1.1-only hop.
    #[arg(long = "edge-arg", allow_hyphen_values = true)]
    pub edge_args: Vec<String>,
}

fn stream(i: usize) -> String {
    format!("/v1/stream/tailed-{i}")
}

/// Appends `i`'s share of `total` appends spread in turn over `n` streams.
fn share(i: usize, n: usize, total: usize) -> usize {
    if i >= total {
        0
    } else {
        (total - i - 1) / n + 1
    }
}

/// One reader: the timestamps' delays of the `expected` events of its
/// stream, or an error if one came out of order. It stays connected (its
/// tail open) until `done`, whatever its share.
async fn reader(
    edge: SocketAddr,
    path: String,
    expected: usize,
    clock: Instant,
    connected: Arc<tokio::sync::Barrier>,
    delivered: Arc<AtomicUsize>,
    mut done: tokio::sync::watch::Receiver<bool>,
) -> anyhow::Result<Vec<u32>> {
    let mut s = connect(edge).await?;
    s.ready().await?;
    let resp = s
        .send_request(
            Request::get(format!("{path}?offset=now&live=sse")).body(Full::new(Bytes::new()))?,
        )
        .await?;
    anyhow::ensure!(resp.status() == 200, "SSE: {}", resp.status());
    connected.wait().await;
    let mut body = resp.into_body();
    let mut lines = Lines::default();
    let mut lat = Vec::with_capacity(expected);
    let mut last = 0u64;
    while lat.len() < expected {
        let Some(frame) = body.frame().await else {
            anyhow::bail!("{path}: the tail ended after {} of {expected}", lat.len());
        };
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        let now = clock.elapsed().as_micros() as u64;
        let mut in_order = true;
        lines.feed(&data, |sent| {
            in_order &= sent > last;
            last = sent;
            lat.push(now.saturating_sub(sent).min(u32::MAX as u64) as u32);
            delivered.fetch_add(1, Relaxed);
        });
        anyhow::ensure!(in_order, "{path}: out of order");
    }
    anyhow::ensure!(
        lat.len() == expected,
        "{path}: {} events of {expected}",
        lat.len()
    );
    let _ = done.wait_for(|d| *d).await;
    drop(body);
    Ok(lat)
}

/// The benchmark's script, step by step as its report reads (long by
/// design: split, its steps would only pass their state along).
pub async fn run(args: Args) -> anyhow::Result<()> {
    let n = args.streams.max(1);
    // Every reader is a connection: the edge's default cap (half its
    // descriptor limit) would leave the benchmark's own requests waiting.
    let cap = (n + 1000).to_string();
    let mut edge_args = vec!["--max-connections", &cap];
    edge_args.extend(args.edge_args.iter().map(String::as_str));
    let pair = Pair::start_with(&args.bins, &edge_args).await?;
    let (edge, origin) = (pair.edge_addr, pair.origin_addr);
    // Created through the edge, 32 at a time.
    let next = Arc::new(AtomicUsize::new(0));
    let creators: Vec<_> = (0..32)
        .map(|_| {
            let next = Arc::clone(&next);
            tokio::spawn(async move {
                let mut s = connect(edge).await?;
                loop {
                    let i = next.fetch_add(1, Relaxed);
                    if i >= n {
                        return anyhow::Ok(());
                    }
                    let req = Request::put(stream(i))
                        .header("content-type", "text/plain")
                        .body(Full::new(Bytes::new()))?;
                    let status = send(&mut s, req).await?;
                    anyhow::ensure!(status == 201, "create: {status}");
                }
            })
        })
        .collect();
    for c in creators {
        c.await??;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (edge_pid, origin_pid) = (pair.edge.id().unwrap_or(0), pair.origin.id().unwrap_or(0));
    let (edge_base, origin_base) = (rss_kib(edge_pid), rss_kib(origin_pid));
    let conns_before = testkit::tcp::established_to(origin.port());

    let total = (args.rate * args.seconds) as usize;
    let clock = Instant::now();
    let connected = Arc::new(tokio::sync::Barrier::new(n + 1));
    let (finish, done) = tokio::sync::watch::channel(false);
    let delivered = Arc::new(AtomicUsize::new(0));
    let readers: Vec<_> = (0..n)
        .map(|i| {
            tokio::spawn(reader(
                edge,
                stream(i),
                share(i, n, total),
                clock,
                Arc::clone(&connected),
                Arc::clone(&delivered),
                done.clone(),
            ))
        })
        .collect();
    connected.wait().await;
    wait_metric(edge, "ds_edge_upstream_live_reads", n as i64).await?;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (edge_rss, origin_rss) = (rss_kib(edge_pid), rss_kib(origin_pid));
    let conns = testkit::tcp::established_to(origin.port());
    // An edge from before the HTTP/2 pool has no such gauges.
    let pool = match (
        metric(edge, "ds_edge_upstream_h2_connections").await,
        metric(edge, "ds_edge_upstream_h2_streams").await,
    ) {
        (Ok(c), Ok(s)) => format!("{c} connections, {s} waiting requests"),
        _ => "none (an edge without it)".to_owned(),
    };
    let http1 = metric(edge, "ds_edge_upstream_http1_waiting")
        .await
        .map_or_else(
            |_| "none (an edge without it)".to_owned(),
            |v| v.to_string(),
        );

    let started = Instant::now();
    write_stamped(origin, args.rate, total, clock, |k| stream(k % n)).await?;
    // Every reader has its share (or failed) before the tails close.
    let deadline = Instant::now() + Duration::from_secs(60);
    while delivered.load(Relaxed) < total && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    finish.send_replace(true);
    let mut all = Vec::with_capacity(total);
    let mut failed = 0u64;
    let mut first_error = None;
    for r in readers {
        match tokio::time::timeout(Duration::from_secs(60), r).await {
            Ok(Ok(Ok(lat))) => all.extend(lat),
            Ok(Ok(Err(e))) => {
                failed += 1;
                first_error.get_or_insert(e.to_string());
            }
            _ => failed += 1,
        }
    }
    let s = Summary::from_latencies(all, failed, started.elapsed());
    println!(
        "many-tails: {n} streams, one SSE reader each, through the edge; {total} appends at {}/s spread over them",
        args.rate
    );
    println!(
        "edge -> origin: {conns} TCP connections with every tail open ({conns_before} before the readers); the edge's HTTP/2 pool: {pool}; waiting requests over HTTP/1.1: {http1}"
    );
    println!(
        "memory per tailed stream: edge {:.1} KiB (RSS {edge_base} -> {edge_rss} KiB), origin {:.1} KiB (RSS {origin_base} -> {origin_rss} KiB)",
        edge_rss.saturating_sub(edge_base) as f64 / n as f64,
        origin_rss.saturating_sub(origin_base) as f64 / n as f64,
    );
    println!(
        "delivery (append sent -> event read): p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms  ({} of {total} delivered, {failed} readers failed{})",
        s.p50_us as f64 / 1000.0,
        s.p99_us as f64 / 1000.0,
        s.max_us as f64 / 1000.0,
        s.requests,
        first_error.map(|e| format!(": {e}")).unwrap_or_default(),
    );
    pair.stop().await;
    anyhow::ensure!(
        failed == 0 && s.requests == total as u64,
        "not every event arrived exactly once"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shares_add_up_to_the_total() {
        for (n, total) in [(10, 1000), (10_000, 1000), (7, 50), (3, 0)] {
            let sum: usize = (0..n).map(|i| share(i, n, total)).sum();
            assert_eq!(sum, total, "{n} streams, {total} appends");
        }
        assert_eq!(share(3, 10, 25), 3);
        assert_eq!(share(9, 10, 25), 2);
    }
}
