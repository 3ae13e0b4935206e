//! `wal-batching`: what one WAL per origin (decision 0028) saves in puts,
//! at the WAL itself: `--writers` closed-loop appenders spread over P
//! partitions, written once through one log for all of them (one WAL per
//! origin) and once through a log per partition (today's layout: each
//! partition its own writer), with the same batching code and commit
//! delay, in one run, for each P of `--partitions`. Reported per run:
//! appends/s, append p50/p99, appends per put, and the cost of those puts
//! per million appends on S3 Standard ($0.005 per 1,000 PUTs).
//!
//! It measures the WAL layer only (no HTTP, no store): the origin's
//! writer does not use this log yet. `loadtest/origin-wal-bench.sh` runs it
//! against SeaweedFS.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use origin::region::origin_wal::{OriginWal, WriterConfig};
use origin::region::Replay;

use crate::stats::{Summary, TaskResult};

#[derive(clap::Args)]
pub struct Args {
    /// The bucket and prefix (`s3://BUCKET/PREFIX`); each run writes
    /// under a prefix of its own below it.
    #[arg(long)]
    pub object_store: String,
    /// Partition counts to run.
    #[arg(long, value_delimiter = ',', default_value = "1,6,64")]
    pub partitions: Vec<u32>,
    /// Closed-loop appenders, spread evenly over the partitions.
    #[arg(long, default_value_t = 500)]
    pub writers: usize,
    /// Bytes per append.
    #[arg(long, default_value_t = 256)]
    pub body: usize,
    #[arg(long, default_value = "10ms", value_parser = shared::units::parse_duration)]
    pub commit_delay: Duration,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
}

/// S3 Standard's price of one PUT, in dollars.
const PUT_PRICE: f64 = 0.005 / 1000.0;

pub async fn run(args: Args) -> anyhow::Result<()> {
    println!(
        "{} writers, {} B appends, commit delay {:?}, {} s each",
        args.writers, args.body, args.commit_delay, args.seconds
    );
    for &p in &args.partitions {
        for per_partition in [false, true] {
            let label = if per_partition {
                format!("a log per partition, {p} partitions")
            } else {
                format!("one log per origin, {p} partitions")
            };
            let prefix = format!(
                "{}/{}-{p}-{}",
                args.object_store.trim_end_matches('/'),
                if per_partition { "partition" } else { "origin" },
                std::process::id()
            );
            let (summary, puts, appends) = one(&args, &prefix, p, per_partition).await?;
            let per_put = appends as f64 / puts.max(1) as f64;
            println!(
                "{}  appends/put {:.1}  ${:.3} per million appends",
                summary.line(&label),
                per_put,
                PUT_PRICE * 1e6 / per_put
            );
        }
    }
    Ok(())
}

/// One run: the summary, and the puts and appends of its window.
async fn one(
    args: &Args,
    prefix: &str,
    partitions: u32,
    per_partition: bool,
) -> anyhow::Result<(Summary, u64, u64)> {
    let store = shell::objects::open(prefix)?;
    let config = WriterConfig {
        commit_delay: args.commit_delay,
        ..WriterConfig::default()
    };
    let logs: Vec<Arc<OriginWal>> = (0..if per_partition { partitions } else { 1 })
        .map(|i| {
            Arc::new(OriginWal::open(
                Arc::clone(&store),
                &format!("bench-{i}"),
                "http://bench.invalid",
                config.clone(),
            ))
        })
        .collect();
    let log_of = |p: u32| &logs[if per_partition { p as usize } else { 0 }];
    for p in 0..partitions {
        log_of(p).claim(p, &mut |_: Replay| Ok(())).await?;
    }
    let (measuring, stop) = (
        Arc::new(AtomicBool::new(false)),
        Arc::new(AtomicBool::new(false)),
    );
    let body = Bytes::from(vec![b'x'; args.body]);
    let tasks: Vec<tokio::task::JoinHandle<TaskResult>> = (0..args.writers)
        .map(|w| {
            let p = (w % partitions as usize) as u32;
            let (log, measuring, stop, body) = (
                Arc::clone(log_of(p)),
                Arc::clone(&measuring),
                Arc::clone(&stop),
                body.clone(),
            );
            tokio::spawn(async move {
                let (mut lat, mut errors, mut first) = (Vec::new(), 0, None);
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let outcome = log.append(p, body.clone()).await;
                    if measuring.load(Ordering::Relaxed) {
                        match outcome {
                            Ok(_) => {
                                lat.push(started.elapsed().as_micros().min(u32::MAX as u128) as u32)
                            }
                            Err(e) => {
                                errors += 1;
                                first.get_or_insert_with(|| e.to_string());
                            }
                        }
                    }
                }
                (lat, errors, first)
            })
        })
        .collect();
    let counts = || {
        logs.iter()
            .map(|l| l.counts())
            .fold((0, 0), |(p, a), (lp, la)| (p + lp, a + la))
    };
    let mut marks = Vec::new();
    let summary = crate::stats::measure_marked(
        tasks,
        &measuring,
        &stop,
        Duration::from_secs(args.warmup),
        Duration::from_secs(args.seconds),
        || marks.push(counts()),
    )
    .await?;
    let (before, after) = (marks[0], marks[1]);
    Ok((summary, after.0 - before.0, after.1 - before.1))
}
