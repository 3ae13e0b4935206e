//! `webhooks-region`: webhook delivery in a region (decision 0024, "In a
//! region"), against origins already running (`loadtest/webhooks-region.sh`
//! starts three on SeaweedFS). `--subscriptions` webhook subscriptions, each
//! linking one stream of its own, made through the origins in turn; one
//! append per stream per `--period`, sent through the origins in turn (a
//! request that fails goes to the next origin and is sent again, so appends
//! go on while a partition is taken over); a receiver here notes when each
//! append's answer was covered by a delivered wake.
//!
//! With `--kill-after`, `--kill-command` is run with the address of the
//! origin that runs the subscriptions (the one whose `/metrics` has
//! `ds_origin_subscriptions`) that long into the window: the command kills
//! it (`kill -9`, its disk deleted). Reported then, apart: the latency of
//! appends answered 5 s or more before the kill (steady state), that of
//! the appends answered after it, and the longest time without any
//! delivery (the gap the takeover leaves).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::{BodyExt, Full};
use hyper::Request;

use crate::append::connect;
use crate::webhooks::{answered, receiver, Pace, Shared};

#[derive(clap::Args)]
pub struct Args {
    /// The region's origins (`host:port`, comma-separated).
    #[arg(long, value_delimiter = ',', required = true)]
    pub origins: Vec<SocketAddr>,
    /// Webhook subscriptions, one stream each.
    #[arg(long, default_value_t = 10_000)]
    pub subscriptions: usize,
    /// Each subscribed stream gets one append per period.
    #[arg(long, default_value = "10s", value_parser = shared::units::parse_duration)]
    pub period: Duration,
    /// Seconds of the measured window.
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
    /// Runs `--kill-command` this long into the window.
    #[arg(long, value_parser = shared::units::parse_duration)]
    pub kill_after: Option<Duration>,
    /// Run with the address of the origin running the subscriptions.
    #[arg(long)]
    pub kill_command: Option<String>,
}

/// Appends answered this long before the kill are the steady state's.
const BEFORE: Duration = Duration::from_secs(5);

/// Requests in flight while the streams and subscriptions are made.
const MAKING: usize = 128;

/// Appenders, each on a connection of its own.
const WORKERS: usize = 32;

/// How long one append may take to be answered (retries included).
const APPEND_WITHIN: Duration = Duration::from_secs(60);

/// One request, sent through the origins from the `first`-th on until one
/// answers a status below 500 (none within [`APPEND_WITHIN`]: an error).
async fn until_answered(
    origins: &[SocketAddr],
    first: usize,
    make: impl Fn() -> anyhow::Result<Request<Full<Bytes>>>,
) -> anyhow::Result<hyper::Response<Bytes>> {
    let deadline = Instant::now() + APPEND_WITHIN;
    let mut n = first;
    loop {
        let addr = origins[n % origins.len()];
        let tried = async {
            let mut s = connect(addr).await?;
            s.ready().await?;
            let resp = s.send_request(make()?).await?;
            let (parts, body) = resp.into_parts();
            let body = body.collect().await?.to_bytes();
            anyhow::Ok(hyper::Response::from_parts(parts, body))
        };
        if let Ok(Ok(r)) = tokio::time::timeout(Duration::from_secs(10), tried).await {
            if r.status().as_u16() < 500 {
                return Ok(r);
            }
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "no origin answered within {APPEND_WITHIN:?}"
        );
        n += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn json_request(method: &str, path: &str, body: Vec<u8>) -> anyhow::Result<Request<Full<Bytes>>> {
    Ok(Request::builder()
        .method(method)
        .uri(path)
        .header(hyper::header::HOST, "127.0.0.1")
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))?)
}

/// The streams and their subscriptions.
async fn make(a: &Args, hook: SocketAddr) -> anyhow::Result<()> {
    let origins = &a.origins;
    let made = futures::stream::iter(0..a.subscriptions)
        .map(|i| async move {
            let r = until_answered(origins, i, || {
                Ok(Request::put(format!("/v1/stream/hooks-r/{i}"))
                    .header(hyper::header::HOST, "127.0.0.1")
                    .header("content-type", "application/octet-stream")
                    .body(Full::new(Bytes::new()))?)
            })
            .await?;
            anyhow::ensure!(
                r.status().is_success(),
                "creating hooks-r/{i}: {}",
                r.status()
            );
            let body = serde_json::json!({
                "type": "webhook", "streams": [format!("hooks-r/{i}")],
                "webhook": {"url": format!("http://{hook}/hook")}, "lease_ttl_ms": 10_000,
            })
            .to_string();
            let r = until_answered(origins, i + 1, || {
                json_request(
                    "PUT",
                    &format!("/v1/stream/__ds/subscriptions/region-{i}"),
                    body.clone().into_bytes(),
                )
            })
            .await?;
            anyhow::ensure!(
                r.status().is_success(),
                "declaring region-{i}: {}",
                r.status()
            );
            anyhow::Ok(())
        })
        .buffer_unordered(MAKING)
        .collect::<Vec<_>>()
        .await;
    made.into_iter().collect()
}

/// One append per stream per period until `stop`, each noted in the
/// ledger once answered.
fn pace(
    a: &Args,
    ledger: &Shared,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<anyhow::Result<u64>>> {
    (0..WORKERS)
        .map(|w| {
            let (ledger, stop, origins) = (ledger.clone(), stop.clone(), a.origins.clone());
            let mine: Vec<usize> = (w..a.subscriptions).step_by(WORKERS).collect();
            let period = a.period;
            tokio::spawn(async move {
                let (mut pace, mut sent) = (Pace::new(mine, period, &stop), 0u64);
                while let Some(i) = pace.next().await {
                    let path = format!("/v1/stream/hooks-r/{i}");
                    let r = until_answered(&origins, w + i, || {
                        Ok(Request::post(&path)
                            .header(hyper::header::HOST, "127.0.0.1")
                            .header("content-type", "application/octet-stream")
                            .body(Full::new(Bytes::from_static(b"event")))?)
                    })
                    .await?;
                    let at = Instant::now();
                    anyhow::ensure!(
                        r.status().is_success(),
                        "appending to {path}: {}",
                        r.status()
                    );
                    let end = r
                        .headers()
                        .get("stream-next-offset")
                        .and_then(|v| v.to_str().ok());
                    if let Some(end) = end {
                        answered(&ledger, &format!("hooks-r/{i}"), end.to_owned(), at);
                        sent += 1;
                    }
                }
                anyhow::Ok(sent)
            })
        })
        .collect()
}

/// The origin whose `/metrics` has the subscriptions' families.
async fn runner(origins: &[SocketAddr]) -> Option<SocketAddr> {
    for &addr in origins {
        let Ok(r) = until_answered(&[addr], 0, || {
            Ok(Request::get("/metrics")
                .header(hyper::header::HOST, "127.0.0.1")
                .body(Full::new(Bytes::new()))?)
        })
        .await
        else {
            continue;
        };
        if String::from_utf8_lossy(r.body())
            .lines()
            .any(|l| l.starts_with("ds_origin_subscriptions "))
        {
            return Some(addr);
        }
    }
    None
}

fn quantile(sorted: &[u32], q: f64) -> f64 {
    let i = ((sorted.len().max(1) - 1) as f64 * q).round() as usize;
    f64::from(sorted.get(i).copied().unwrap_or(0)) / 1000.0
}

/// The benchmark's script, step by step as its report reads (long by
/// design: split, its steps would only pass their state along).
pub async fn run(a: Args) -> anyhow::Result<()> {
    let ledger: Shared = Arc::default();
    let hook = receiver(ledger.clone()).await?;
    let began = Instant::now();
    make(&a, hook).await?;
    println!(
        "{} streams and webhook subscriptions made through {} origins in {:.1} s",
        a.subscriptions,
        a.origins.len(),
        began.elapsed().as_secs_f64()
    );
    let stop = Arc::new(AtomicBool::new(false));
    let pacers = pace(&a, &ledger, &stop);
    // Every stream has had an append before the window opens.
    tokio::time::sleep(a.period + Duration::from_secs(2)).await;
    {
        let mut l = ledger.lock().expect("ledger");
        l.latencies_us.clear();
        l.timeline.clear();
        l.arrivals.clear();
        l.deliveries = 0;
    }
    let opened = Instant::now();
    let mut killed: Option<(Instant, SocketAddr)> = None;
    if let (Some(after), Some(command)) = (a.kill_after, &a.kill_command) {
        tokio::time::sleep(after).await;
        let victim = runner(&a.origins)
            .await
            .ok_or_else(|| anyhow::anyhow!("no origin runs the subscriptions"))?;
        let status = tokio::process::Command::new(command)
            .arg(victim.to_string())
            .status()
            .await?;
        anyhow::ensure!(status.success(), "{command} {victim}: {status}");
        killed = Some((Instant::now(), victim));
        println!(
            "killed the origin running the subscriptions, {victim}, {after:?} into the window"
        );
    }
    let left = Duration::from_secs(a.seconds).saturating_sub(opened.elapsed());
    tokio::time::sleep(left).await;
    stop.store(true, Ordering::Relaxed);
    let mut sent = 0;
    for t in pacers {
        sent += t.await??;
    }
    let window = opened.elapsed();
    let deadline = Instant::now() + Duration::from_secs(60);
    let uncovered = loop {
        let n: usize = ledger
            .lock()
            .expect("ledger")
            .waiting
            .values()
            .map(|q| q.len())
            .sum();
        if n == 0 || Instant::now() > deadline {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let l = ledger.lock().expect("ledger");
    let kill_at = killed.map(|(at, _)| at);
    let mut steady: Vec<u32> = l
        .timeline
        .iter()
        .filter(|(at, _)| kill_at.is_none_or(|k| *at + BEFORE < k))
        .map(|(_, us)| *us)
        .collect();
    steady.sort_unstable();
    let mut arrivals = l.arrivals.clone();
    arrivals.sort_unstable();
    let longest_gap = arrivals
        .windows(2)
        .map(|w| w[1] - w[0])
        .max()
        .unwrap_or_default();
    println!(
        "delivery latency (append answered -> receiver), {} subscriptions x 1 append / {:?}{}: {} appends, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        a.subscriptions,
        a.period,
        if kill_at.is_some() {
            ", answered at least 5 s before the kill"
        } else {
            ""
        },
        steady.len(),
        quantile(&steady, 0.5),
        quantile(&steady, 0.99),
        quantile(&steady, 1.0),
    );
    if let Some(k) = kill_at {
        let mut after: Vec<u32> = l
            .timeline
            .iter()
            .filter(|(at, _)| *at >= k)
            .map(|(_, us)| *us)
            .collect();
        after.sort_unstable();
        println!(
            "after the kill: {} appends, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; longest time without a delivery {:.2} s",
            after.len(),
            quantile(&after, 0.5),
            quantile(&after, 0.99),
            quantile(&after, 1.0),
            longest_gap.as_secs_f64(),
        );
    }
    println!(
        "paced appends {sent}, deliveries {} ({:.0}/s over {:.1} s), appends never covered after 60 s: {uncovered}",
        l.deliveries,
        l.deliveries as f64 / window.as_secs_f64(),
        window.as_secs_f64(),
    );
    anyhow::ensure!(
        uncovered == 0,
        "{uncovered} appends were never covered by a delivered wake"
    );
    Ok(())
}
