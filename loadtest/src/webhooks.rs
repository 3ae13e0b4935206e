//! `webhooks`: subscriptions' cost and delivery latency, in one run
//! (the subscriptions' benchmark). Starts an origin (development flags, so it may
//! call a receiver on loopback) and a receiver of its own here, then:
//!
//! 1. Delivery: `--subscriptions` webhook subscriptions, each linking one
//!    stream of its own, and one append per stream per `--period`: the
//!    latency from each append's answer to the receiver's receipt of a
//!    wake that covers it (p50/p99), and that every append was covered.
//! 2. Cost: closed-loop durable appends to `--streams` other streams, in
//!    three slices per round (`--rounds`, each slice `--seconds` long):
//!    bare (nothing else running); beside the paced appends with no
//!    subscription (the same appends, no deliveries); and beside the paced
//!    appends with the subscriptions active (the appends and their
//!    deliveries). Reported: the median ratio of the last to each of the
//!    others: against the second, what the subscriptions themselves cost.
//!
//! The receiver answers `{"done": true}` (the wake's snapshot is acked);
//! it does not verify signatures (the end-to-end tests do, with another
//! library), so its cost is the HTTP alone.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

use crate::append::{self, connect, send};
use crate::compare::{origin_command, start};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "target/release/origin")]
    pub origin: PathBuf,
    /// Webhook subscriptions, one stream each.
    #[arg(long, default_value_t = 1000)]
    pub subscriptions: usize,
    /// Each subscribed stream gets one append per period.
    #[arg(long, default_value = "1s", value_parser = shared::units::parse_duration)]
    pub period: Duration,
    /// Streams of the closed-loop throughput slices.
    #[arg(long, default_value_t = 500)]
    pub streams: usize,
    /// Seconds per throughput slice and of the latency window.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Pairs of slices (without, with).
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
}

/// Appends answered and not yet seen covered by a delivery, per stream:
/// (end offset, when answered); and the highest tail delivered.
#[derive(Default)]
pub(crate) struct Ledger {
    pub(crate) waiting: HashMap<String, VecDeque<(String, Instant)>>,
    delivered: HashMap<String, String>,
    pub(crate) latencies_us: Vec<u32>,
    pub(crate) deliveries: u64,
    /// When each delivery arrived (for the longest gap between two).
    pub(crate) arrivals: Vec<Instant>,
    /// Each covered append's answer time and latency.
    pub(crate) timeline: Vec<(Instant, u32)>,
}

pub(crate) type Shared = Arc<Mutex<Ledger>>;

fn micros(d: Duration) -> u32 {
    d.as_micros().min(u128::from(u32::MAX)) as u32
}

/// Notes an append's answer (or, if a delivery covered it already, a
/// latency of zero).
pub(crate) fn answered(ledger: &Shared, stream: &str, end: String, at: Instant) {
    let mut l = ledger.lock().expect("ledger");
    if l.delivered.get(stream).is_some_and(|d| *d >= end) {
        l.latencies_us.push(0);
        l.timeline.push((at, 0));
        return;
    }
    l.waiting
        .entry(stream.to_owned())
        .or_default()
        .push_back((end, at));
}

/// Notes a delivery: every append it covers is delivered now.
fn received(ledger: &Shared, body: &[u8]) {
    let now = Instant::now();
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) else {
        return;
    };
    let mut l = ledger.lock().expect("ledger");
    l.deliveries += 1;
    l.arrivals.push(now);
    for s in v["streams"].as_array().into_iter().flatten() {
        let (Some(path), Some(tail)) = (s["path"].as_str(), s["tail_offset"].as_str()) else {
            continue;
        };
        let l = &mut *l;
        let d = l.delivered.entry(path.to_owned()).or_default();
        if tail > d.as_str() {
            *d = tail.to_owned();
        }
        if let Some(q) = l.waiting.get_mut(path) {
            while q.front().is_some_and(|(end, _)| end.as_str() <= tail) {
                let (_, at) = q.pop_front().expect("front");
                l.latencies_us.push(micros(now - at));
                l.timeline.push((at, micros(now - at)));
            }
        }
    }
}

pub(crate) async fn receiver(ledger: Shared) -> anyhow::Result<SocketAddr> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let ledger = ledger.clone();
            tokio::spawn(async move {
                let service =
                    hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
                        let ledger = ledger.clone();
                        async move {
                            let body = req.into_body().collect().await?.to_bytes();
                            received(&ledger, &body);
                            Ok::<_, hyper::Error>(Response::new(Full::new(Bytes::from_static(
                                b"{\"done\":true}",
                            ))))
                        }
                    });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(sock), service)
                    .await;
            });
        }
    });
    Ok(addr)
}

async fn request(addr: SocketAddr, method: &str, path: &str, body: Vec<u8>) -> anyhow::Result<u16> {
    let mut s = connect(addr).await?;
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("content-type", "application/json")
        .body(Full::new(Bytes::from(body)))?;
    send(&mut s, req).await
}

/// Creates the subscriptions (and their streams), or deletes them.
async fn subscriptions(
    origin: SocketAddr,
    hook: SocketAddr,
    n: usize,
    create: bool,
) -> anyhow::Result<()> {
    for i in 0..n {
        let sub = format!("/v1/stream/__ds/subscriptions/bench-{i}");
        if create {
            let body = serde_json::json!({
                "type": "webhook", "streams": [format!("hooks/{i}")],
                "webhook": {"url": format!("http://{hook}/hook")}, "lease_ttl_ms": 10_000,
            });
            let status = request(origin, "PUT", &sub, body.to_string().into_bytes()).await?;
            anyhow::ensure!(status == 201 || status == 200, "creating {sub}: {status}");
        } else {
            request(origin, "DELETE", &sub, Vec::new()).await?;
        }
    }
    Ok(())
}

/// One append per subscribed stream per period, spread evenly, until
/// `stop`; each answer is noted in the ledger.
fn paced(
    origin: SocketAddr,
    n: usize,
    period: Duration,
    ledger: Shared,
    stop: Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<anyhow::Result<u64>>> {
    const WORKERS: usize = 20;
    (0..WORKERS)
        .map(|w| {
            let (ledger, stop) = (ledger.clone(), stop.clone());
            tokio::spawn(async move {
                let mine: Vec<usize> = (w..n).step_by(WORKERS).collect();
                let mut s = connect(origin).await?;
                let (mut pace, mut sent) = (Pace::new(mine, period, &stop), 0u64);
                while let Some(i) = pace.next().await {
                    let path = format!("/v1/stream/hooks/{i}");
                    let req = Request::post(&path)
                        .header("content-type", "application/octet-stream")
                        .header(hyper::header::HOST, "127.0.0.1")
                        .body(Full::new(Bytes::from_static(b"event")))?;
                    s.ready().await?;
                    let resp = s.send_request(req).await?;
                    let at = Instant::now();
                    anyhow::ensure!(
                        resp.status().is_success(),
                        "appending to {path}: {}",
                        resp.status()
                    );
                    let end = resp
                        .headers()
                        .get("stream-next-offset")
                        .and_then(|v| v.to_str().ok())
                        .map(str::to_owned);
                    resp.into_body().collect().await?;
                    if let Some(end) = end {
                        answered(&ledger, &format!("hooks/{i}"), end, at);
                        sent += 1;
                    }
                }
                anyhow::Ok(sent)
            })
        })
        .collect()
}

/// Each of a worker's streams in turn, one every `period / len`, until
/// `stop`.
pub(crate) struct Pace<'a> {
    mine: Vec<usize>,
    next: usize,
    tick: tokio::time::Interval,
    stop: &'a AtomicBool,
}

impl<'a> Pace<'a> {
    pub(crate) fn new(mine: Vec<usize>, period: Duration, stop: &'a AtomicBool) -> Pace<'a> {
        let mut tick = tokio::time::interval(period / mine.len().max(1) as u32);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        Pace {
            mine,
            next: 0,
            tick,
            stop,
        }
    }

    /// The next stream's number, at its time; none once stopped.
    pub(crate) async fn next(&mut self) -> Option<usize> {
        if self.mine.is_empty() {
            return None;
        }
        self.tick.tick().await;
        if self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let i = self.mine[self.next % self.mine.len()];
        self.next += 1;
        Some(i)
    }
}

/// The paced appenders, running.
struct Pacers {
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<anyhow::Result<u64>>>,
}

impl Pacers {
    /// Starts them, and lets them run for 2 s (every stream has appends
    /// answered) before the caller measures.
    async fn start(origin: SocketAddr, a: &Args, ledger: &Shared) -> Pacers {
        let stop = Arc::new(AtomicBool::new(false));
        let tasks = paced(
            origin,
            a.subscriptions,
            a.period,
            ledger.clone(),
            stop.clone(),
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        Pacers { stop, tasks }
    }

    /// Stops them; answers how many appends they made.
    async fn finish(self) -> anyhow::Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        let mut sent = 0;
        for t in self.tasks {
            sent += t.await??;
        }
        Ok(sent)
    }
}

async fn throughput(
    origin: SocketAddr,
    streams: usize,
    seconds: u64,
    label: &str,
) -> anyhow::Result<f64> {
    let r = append::run(&append::Args {
        addr: origin,
        prefix: "/v1/stream/bench-".into(),
        workload: append::Workload {
            streams,
            body: 256,
            seconds,
            warmup: 1,
        },
        producer: false,
        create: true,
        label: label.into(),
    })
    .await?;
    println!("{}", r.line(label));
    Ok(r.rps())
}

/// The benchmark's script, step by step as its report reads (long by
/// design: split, its steps would only pass their state along).
pub async fn run(a: Args) -> anyhow::Result<()> {
    let data = std::env::temp_dir().join(format!("ds-webhooks-{}", std::process::id()));
    let mut cmd = origin_command(&a.origin, &data);
    cmd.args([
        "--webhook-allow-http",
        "true",
        "--webhook-allow",
        "127.0.0.0/8",
    ]);
    let (mut origin, addr) = start(&mut cmd).await?;
    let ledger: Shared = Arc::default();
    let hook = receiver(ledger.clone()).await?;
    for i in 0..a.subscriptions {
        let mut s = connect(addr).await?;
        let req = Request::put(format!("/v1/stream/hooks/{i}"))
            .header("content-type", "application/octet-stream")
            .body(Full::new(Bytes::new()))?;
        let status = send(&mut s, req).await?;
        anyhow::ensure!(status < 300, "creating hooks/{i}: {status}");
    }
    let (mut to_bare, mut to_paced) = (Vec::new(), Vec::new());
    let mut latency_window = None;
    for round in 0..a.rounds {
        let bare = throughput(addr, a.streams, a.seconds, "appends alone").await?;
        // The same paced appends, no subscription.
        let pacers = Pacers::start(addr, &a, &ledger).await;
        let paced_only = throughput(
            addr,
            a.streams,
            a.seconds,
            "appends beside paced appends, no subscription",
        )
        .await?;
        pacers.finish().await?;
        *ledger.lock().expect("ledger") = Ledger::default();
        subscriptions(addr, hook, a.subscriptions, true).await?;
        let pacers = Pacers::start(addr, &a, &ledger).await;
        {
            let mut l = ledger.lock().expect("ledger");
            l.latencies_us.clear();
            l.deliveries = 0;
        }
        let started = Instant::now();
        let with = throughput(
            addr,
            a.streams,
            a.seconds,
            "appends beside paced appends, subscriptions active",
        )
        .await?;
        let (lat, deliveries) = {
            let l = ledger.lock().expect("ledger");
            (l.latencies_us.clone(), l.deliveries)
        };
        let window = started.elapsed();
        let sent = pacers.finish().await?;
        // Every paced append is covered once its wakes arrive.
        let deadline = Instant::now() + Duration::from_secs(30);
        while ledger
            .lock()
            .expect("ledger")
            .waiting
            .values()
            .any(|q| !q.is_empty())
            && Instant::now() < deadline
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let uncovered: usize = ledger
            .lock()
            .expect("ledger")
            .waiting
            .values()
            .map(VecDeque::len)
            .sum();
        subscriptions(addr, hook, a.subscriptions, false).await?;
        to_bare.push(with / bare);
        to_paced.push(with / paced_only);
        println!(
            "round {round}: with subscriptions / alone {:.3}, / beside the same appends without subscriptions {:.3}; paced appends {sent}, deliveries in the window {deliveries} ({:.0}/s), uncovered after 30 s: {uncovered}",
            with / bare,
            with / paced_only,
            deliveries as f64 / window.as_secs_f64()
        );
        anyhow::ensure!(
            uncovered == 0,
            "{uncovered} appends were never covered by a delivered wake"
        );
        latency_window.get_or_insert(lat);
    }
    let mut lat = latency_window.unwrap_or_default();
    lat.sort_unstable();
    let q = |x: f64| {
        lat.get(((lat.len().max(1) - 1) as f64 * x).round() as usize)
            .copied()
            .unwrap_or(0)
    };
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let shown = |v: &[f64]| v.iter().map(|r| format!("{r:.3}")).collect::<Vec<_>>();
    println!(
        "delivery latency (append answered -> receiver), {} subscriptions x 1 append / {:?}: {} appends, p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms",
        a.subscriptions,
        a.period,
        lat.len(),
        f64::from(q(0.5)) / 1000.0,
        f64::from(q(0.99)) / 1000.0,
        f64::from(lat.last().copied().unwrap_or(0)) / 1000.0,
    );
    println!(
        "durable appends at {} streams with subscriptions active: / beside the same appends without subscriptions median {:.3} {:?}; / alone median {:.3} {:?}",
        a.streams,
        median(&mut to_paced.clone()),
        shown(&to_paced),
        median(&mut to_bare.clone()),
        shown(&to_bare),
    );
    let _ = origin.kill().await;
    let _ = std::fs::remove_dir_all(&data);
    Ok(())
}
