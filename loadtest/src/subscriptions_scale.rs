//! `subscriptions-scale`: what many subscriptions cost an origin that
//! holds them. One origin per run (`--links` each, e.g. `1,10`), each
//! measured before and after `--subscriptions` pull-wake subscriptions are
//! declared, each with a pattern of its own (`t{i}/*`) and `links` named
//! streams:
//!
//! - memory: resident bytes added per subscription (two runs with
//!   different link counts give the cost of a link apart);
//! - the engine's idle cost: the origin's CPU time over `--idle-seconds`
//!   with nothing to do, before and after (a sweep that walked every
//!   subscription each tick would show here);
//! - creates: `--creates` streams made where no pattern matches, before
//!   and after (a create matched against every pattern would show here),
//!   and then as many that each match one subscription's pattern (each
//!   links a stream: one journal append).
//!
//! Ratios against the same origin before its subscriptions, in one run.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;

use crate::compare::{origin_command, start};
use crate::pool::{self, Job};
use crate::procfs::{cpu_seconds, mib, rss_bytes};

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "target/release/origin")]
    pub origin: PathBuf,
    #[arg(long, default_value_t = 100_000)]
    pub subscriptions: usize,
    /// Named streams per subscription, one run each (comma-separated).
    #[arg(long, value_delimiter = ',', default_values_t = vec![1usize, 10])]
    pub links: Vec<usize>,
    /// Streams created per measurement.
    #[arg(long, default_value_t = 10_000)]
    pub creates: usize,
    #[arg(long, default_value_t = 10)]
    pub idle_seconds: u64,
    /// Requests in flight at once.
    #[arg(long, default_value_t = 64)]
    pub concurrency: usize,
    /// More flags for the origin (repeat it), `{run}` replaced by a name
    /// of each run's own: e.g. a region's `--object-store
    /// s3://bench/scale-{run} --durability object`
    /// (`loadtest/subscriptions-scale-region.sh`).
    #[arg(long = "origin-arg", allow_hyphen_values = true)]
    pub origin_args: Vec<String>,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    for links in &args.links {
        one(&args, *links).await?;
    }
    Ok(())
}

/// Items made by a function of their number.
struct Made<F>(F);

impl<F> Job for Made<F>
where
    F: Fn(usize) -> Request<Full<Bytes>> + Send + Sync,
{
    fn request(&self, i: usize) -> anyhow::Result<Request<Full<Bytes>>> {
        Ok((self.0)(i))
    }
}

/// Sends `count` requests made by `make(i)` over `connections`; answers
/// the requests per second, every one answered 2xx.
async fn drive(
    addr: SocketAddr,
    count: usize,
    connections: usize,
    make: impl Fn(usize) -> Request<Full<Bytes>> + Send + Sync + 'static,
) -> anyhow::Result<f64> {
    let tally = pool::run(
        addr,
        connections.min(count.max(1)),
        count,
        Arc::new(Made(make)),
    )
    .await;
    anyhow::ensure!(
        tally.failures() == 0,
        "{} of {count} failed: {:?}",
        tally.failures(),
        tally.first_failure
    );
    Ok(tally.per_second())
}

fn create(path: String) -> Request<Full<Bytes>> {
    Request::put(path)
        .header("content-type", "text/plain")
        .body(Full::new(Bytes::new()))
        .expect("request")
}

/// Runs `creates` and answers their rate and the origin's CPU time per
/// create, counted until the work they left behind (the engine matching
/// them) is done: until a 200 ms window in which the origin is nearly idle.
async fn creates_cost(
    addr: SocketAddr,
    pid: u32,
    count: usize,
    connections: usize,
    make: impl Fn(usize) -> Request<Full<Bytes>> + Send + Sync + 'static,
) -> anyhow::Result<(f64, f64)> {
    let before = cpu_seconds(pid);
    let rate = drive(addr, count, connections, make).await?;
    let window = Duration::from_millis(200);
    for _ in 0..150 {
        let at = cpu_seconds(pid);
        tokio::time::sleep(window).await;
        if cpu_seconds(pid) - at < 0.02 {
            break;
        }
    }
    let micros = (cpu_seconds(pid) - before) * 1e6 / count as f64;
    Ok((rate, micros))
}

/// The origin's CPU seconds per second while nothing is asked of it.
async fn idle_cpu(pid: u32, seconds: u64) -> f64 {
    let before = cpu_seconds(pid);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    (cpu_seconds(pid) - before) / seconds as f64
}

async fn one(args: &Args, links: usize) -> anyhow::Result<()> {
    let n = args.subscriptions;
    let data = std::env::temp_dir().join(format!("ds-subscriptions-scale-{}", std::process::id()));
    let mut cmd = origin_command(&args.origin, &data);
    let total_links = n.saturating_mul(links + 1).saturating_add(args.creates);
    cmd.args(["--max-subscriptions", &n.to_string()])
        .args(["--max-subscriptions-per-account", &n.to_string()])
        .args(["--max-subscription-links", &total_links.to_string()]);
    let run = format!("{}-{links}", std::process::id());
    cmd.args(args.origin_args.iter().map(|a| a.replace("{run}", &run)));
    let (mut child, addr) = start(&mut cmd).await?;
    let pid = child.id().expect("pid");
    let c = args.concurrency;
    // A region's origin answers 503 until it serves its partitions.
    let mut ready = Err(anyhow::anyhow!("not tried"));
    for _ in 0..600 {
        ready = drive(addr, 1, 1, |_| create("/v1/stream/wakes".into())).await;
        if ready.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ready?;

    let idle_before = idle_cpu(pid, args.idle_seconds).await;
    let creates_before = creates_cost(addr, pid, args.creates, c, |i| {
        create(format!("/v1/stream/free/a{i}"))
    })
    .await?;
    let rss_before = rss_bytes(pid);

    let declared = drive(addr, n, c, move |i| {
        let streams: Vec<String> = (0..links).map(|k| format!("\"t{i}/l{k}\"")).collect();
        let body = format!(
            r#"{{"type":"pull-wake","pattern":"t{i}/*","streams":[{}],"wake_stream":"wakes","lease_ttl_ms":30000}}"#,
            streams.join(",")
        );
        Request::put(format!("/v1/stream/__ds/subscriptions/s{i}"))
            .header("content-type", "application/json")
            .body(Full::new(Bytes::from(body)))
            .expect("request")
    })
    .await?;
    let rss_after = rss_bytes(pid);

    let idle_after = idle_cpu(pid, args.idle_seconds).await;
    let creates_after = creates_cost(addr, pid, args.creates, c, |i| {
        create(format!("/v1/stream/free/b{i}"))
    })
    .await?;
    let matched = creates_cost(addr, pid, args.creates.min(n), c, |i| {
        create(format!("/v1/stream/t{i}/new"))
    })
    .await?;

    let per_sub = rss_after.saturating_sub(rss_before) as f64 / n as f64;
    println!(
        "{n} subscriptions x {links} named streams ({} links): declared {declared:.0}/s; \
         resident {} -> {} ({per_sub:.0} B per subscription with its links)",
        n * links,
        mib(rss_before),
        mib(rss_after),
    );
    println!(
        "  idle CPU {idle_before:.4} -> {idle_after:.4} s/s; creates where no pattern matches \
         {:.0} -> {:.0}/s, CPU {:.0} -> {:.0} us each; creates each matching one pattern {:.0}/s, CPU {:.0} us each",
        creates_before.0, creates_after.0, creates_before.1, creates_after.1, matched.0, matched.1,
    );
    child.kill().await?;
    let _ = std::fs::remove_dir_all(&data);
    Ok(())
}
