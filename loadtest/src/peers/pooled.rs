//! The pooled workload inside `ds-load peers`: for each stream count `N`,
//! the system is started afresh (its own data folder), the `N` streams are
//! created over the pool, its memory is read, and the pool appends.
//!
//! A fresh start per `N` keeps the memory figure about the `N` streams
//! alone: on the system that ran the other workloads (and the smaller `N`s)
//! it would include their streams and their data.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::Context;

use super::systems::{self, Programs, Running, System};
use super::table::{PoolFigures, Row, Workload};
use super::Args;
use crate::pooled::{self, Pooled};
use crate::procfs::{cpu_seconds, rss_bytes};

/// The row for `N` streams, on a fresh start of `system` in `dir`.
pub async fn measure(
    system: &'static System,
    programs: &Programs,
    dir: &Path,
    n: usize,
    args: &Args,
) -> anyhow::Result<Row> {
    let fresh = dir.join(format!("pooled-{n}"));
    std::fs::create_dir_all(&fresh).with_context(|| format!("creating {}", fresh.display()))?;
    // On failure to start, the folder (with its log) stays for a look.
    let running = systems::start(system, programs, &fresh)
        .await
        .context("starting it afresh")?;
    let row = measure_one(system, &running, n, args).await;
    running.stop().await;
    let _ = std::fs::remove_dir_all(&fresh);
    row
}

/// The memory of every process of the system.
fn rss_of(running: &Running) -> u64 {
    running.pids().into_iter().map(rss_bytes).sum()
}

async fn measure_one(
    system: &'static System,
    running: &Running,
    n: usize,
    args: &Args,
) -> anyhow::Result<Row> {
    let p = Pooled {
        addr: running.addr,
        prefix: format!("{}pooled-{n}-", running.prefix),
        streams: n,
        connections: args.pool_connections,
        body: args.body,
        warmup: Duration::from_secs(args.warmup),
        seconds: Duration::from_secs(args.seconds),
    };
    let rss_start = rss_of(running);
    let created = pooled::create(&p).await;
    let rss_after = rss_of(running);
    eprintln!(
        "   pooled N={n}: {} creates over {} connections in {:.1} s ({:.0}/s, {} failed); RSS {} -> {}",
        created.items,
        p.used_connections(),
        created.elapsed.as_secs_f64(),
        created.per_second(),
        created.failures(),
        crate::procfs::mib(rss_start),
        crate::procfs::mib(rss_after),
    );
    let pid = running.pid();
    let cpu_before = cpu_seconds(pid);
    let started = Instant::now();
    let appended = pooled::append(&p).await?;
    let server_cores = (cpu_seconds(pid) - cpu_before) / started.elapsed().as_secs_f64().max(1e-3);
    let first_error = match (&created.first_failure, &appended.first_error) {
        (Some(c), _) => Some(format!("creating: {c}")),
        (None, Some(a)) => Some(format!("appending: {a}")),
        (None, None) => None,
    };
    Ok(Row {
        workload: Workload::Pooled,
        system,
        throughput: appended.rps(),
        p50_us: appended.p50_us,
        p99_us: appended.p99_us,
        errors: created.failures() + appended.errors,
        server_cores,
        first_error,
        pool: Some(PoolFigures {
            streams: n,
            creates_per_s: created.per_second(),
            rss_start_bytes: rss_start,
            rss_bytes: rss_after,
        }),
    })
}
