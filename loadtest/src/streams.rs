//! `ds-load streams`: what one origin pays per stream, and how it comes back
//! with many of them.
//!
//! One origin, a fresh data folder, a fixed file-descriptor limit. The run:
//! create N small streams over a pool of keep-alive connections (`PUT` with
//! a body), append to each, and read the origin's memory and descriptors
//! before and after (and the most descriptors it held, sampled every 100
//! ms); then kill it with SIGKILL, start it again on the same data, time it
//! from spawn to the first answer for a stream, and read every stream back
//! byte for byte (`GET ?offset=-1`, checking `Stream-Next-Offset` and the
//! body); with `--restart-sigterm` the same after a SIGTERM. It exits
//! non-zero unless every stream reads back as written after every restart.
//! Before the kill it also times `--list-pages` pages of the listing
//! (`GET /_streams`, `--list-limit` streams each, from random cursors;
//! `streams/listing.rs`): the memory figures include the listing's index.
//!
//! The figures are the ones a deployment with many small streams is sized
//! by: bytes of memory per stream, descriptors per stream (a limit of 4096
//! with a descriptor per stream ends at about 4000 streams), recovery time
//! at N streams. What goes into each stream is in `streams/content.rs`.

mod content;
mod listing;
mod origin;
mod report;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;

use crate::pool::{self, Tally};
use crate::procfs::PeakFds;
use content::{Append, Create, Verify};
use origin::Launch;
use report::{Figures, Restart, Snapshot};

#[derive(clap::Args)]
pub struct Args {
    /// The origin binary.
    #[arg(long, default_value = "target/release/origin")]
    pub origin: PathBuf,
    /// One more argument for the origin, after `--listen` and `--data`
    /// (repeat for each word: `--origin-arg=--durability --origin-arg=async`).
    #[arg(long = "origin-arg", allow_hyphen_values = true)]
    pub origin_args: Vec<String>,
    /// The origin's RLIMIT_NOFILE, soft and hard (above this shell's hard
    /// limit only as root).
    #[arg(long, default_value_t = 4096)]
    pub nofile: u64,
    /// Streams to create.
    #[arg(long, default_value_t = 1_000_000)]
    pub streams: usize,
    /// Keep-alive connections shared by all the requests.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Bytes per write: the create's body and each append.
    #[arg(long, default_value_t = 100)]
    pub body: usize,
    /// Appends per stream after its create.
    #[arg(long, default_value_t = 1)]
    pub appends: usize,
    /// Also restart after SIGTERM (then read everything back again).
    #[arg(long)]
    pub restart_sigterm: bool,
    /// How long a start may take until the origin answers.
    #[arg(long, default_value_t = 600)]
    pub ready_timeout_secs: u64,
    /// Scratch space; a fresh folder in it per run (deleted unless the run
    /// failed).
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    pub scratch: PathBuf,
    /// Listing pages to time before the kill (0: none).
    #[arg(long, default_value_t = 1000)]
    pub list_pages: usize,
    /// Streams per listing page.
    #[arg(long, default_value_t = 100)]
    pub list_limit: usize,
    /// Also write the table to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// This process's command line, for the report.
fn command_line() -> String {
    let mut words = vec!["ds-load".to_string()];
    words.extend(std::env::args().skip(1).map(|w| {
        if w.is_empty() || w.contains(|c: char| c.is_whitespace() || c == '\'') {
            format!("'{}'", w.replace('\'', r"'\''"))
        } else {
            w
        }
    }));
    words.join(" ")
}

/// Sends `job`'s requests for every stream over the pool.
async fn over_pool(addr: std::net::SocketAddr, args: &Args, job: Arc<dyn pool::Job>) -> Tally {
    pool::run(addr, args.connections, args.streams, job).await
}

/// The benchmark's script, step by step as its report reads (long by
/// design: split, its steps would only pass their state along).
pub async fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.streams > 0, "--streams must be at least 1");
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_millis();
    let dir = args
        .scratch
        .join(format!("ds-streams-{}-{stamp}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let launch = Launch {
        binary: args.origin.clone(),
        data: dir.join("data"),
        nofile: args.nofile,
        extra: args.origin_args.clone(),
        log: dir.join("origin.log"),
    };
    // The `default` account is open without a key under /v1/stream/.
    let prefix = format!("/v1/stream/s{}-{stamp}-", std::process::id());
    let within = Duration::from_secs(args.ready_timeout_secs);

    let first = launch.spawn(within).await?;
    eprintln!("log: {}", launch.log.display());
    let sampler = PeakFds::start(first.pid, Duration::from_millis(100));
    // Serving (a 404 for a stream that is not there), so the start figures
    // are of an origin that has opened its data.
    first.first_answer(&format!("{prefix}none"), within).await?;
    let start = Snapshot::of(first.pid);
    eprintln!(
        "origin {} (pid {}) up: RSS {}, {} fds; creating {} streams",
        first.addr,
        first.pid,
        crate::procfs::mib(start.rss),
        start.fds,
        args.streams
    );
    let creates = over_pool(
        first.addr,
        &args,
        Arc::new(Create {
            prefix: prefix.clone(),
            body: args.body,
        }),
    )
    .await;
    eprintln!(
        "  {} creates/s, {} failed",
        creates.per_second() as u64,
        creates.failures()
    );
    let appended = append_rounds(first.addr, &args, &prefix).await;
    let mut first = first;
    let after = Snapshot::of(first.pid);
    let listing = match args.list_pages {
        0 => None,
        n => {
            let pages =
                listing::measure(first.addr, &prefix, args.streams, n, args.list_limit).await?;
            eprintln!(
                "  listing: {} pages of {}: p50 {:.2} ms, p99 {:.2} ms, {} failed",
                pages.pages,
                pages.limit,
                pages.p50.as_secs_f64() * 1e3,
                pages.p99.as_secs_f64() * 1e3,
                pages.failures
            );
            Some(pages)
        }
    };
    let peak_fds = sampler.stop(first.pid);
    let exited = first.exited();
    if let Some(status) = &exited {
        eprintln!(
            "  the origin had exited ({status}); see {}",
            launch.log.display()
        );
    }
    eprintln!(
        "  after: RSS {}, {} fds (peak {peak_fds}); SIGKILL and start again",
        crate::procfs::mib(after.rss),
        after.fds
    );
    first.kill().await;

    let verify = Arc::new(Verify {
        prefix: prefix.clone(),
        body: args.body,
        appends: args.appends,
    });
    let mut restarts = Vec::new();
    let (restart, mut running) = restart_and_read(&launch, "SIGKILL", None, &args, &verify).await;
    restarts.push(restart);
    if args.restart_sigterm {
        if let Some(r) = running.take() {
            eprintln!("  SIGTERM and start again");
            let stopped = r.terminate(Duration::from_secs(60)).await;
            let (restart, next) = match stopped {
                Ok(took) => restart_and_read(&launch, "SIGTERM", Some(took), &args, &verify).await,
                Err(e) => (
                    Restart {
                        how: "SIGTERM",
                        stopped_in: None,
                        ready: Err(format!("{e:#}")),
                        recovered: None,
                        after: Snapshot::default(),
                        peak_fds: 0,
                        verify: None,
                    },
                    None,
                ),
            };
            restarts.push(restart);
            running = next;
        }
    }
    if let Some(r) = running {
        r.kill().await;
    }

    let figures = Figures {
        command: command_line(),
        origin: args.origin.clone(),
        origin_args: args.origin_args.clone(),
        data: launch.data.clone(),
        nofile: args.nofile,
        streams: args.streams,
        connections: args.connections,
        body: args.body,
        appends: args.appends,
        start,
        creates,
        appended,
        after,
        exited,
        peak_fds,
        restarts,
        listing,
    };
    let table = figures.render();
    println!("{table}");
    if let Some(out) = &args.out {
        std::fs::write(out, &table).with_context(|| format!("writing {}", out.display()))?;
    }
    anyhow::ensure!(
        !figures.failed(),
        "not every stream read back as written after every restart; the data and the origin's log are in {}",
        dir.display()
    );
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The appends, a round at a time: round `k` writes piece `k` of every
/// stream, so a stream's writes arrive in order whichever connection has it.
async fn append_rounds(addr: std::net::SocketAddr, args: &Args, prefix: &str) -> Tally {
    let mut total = Tally::default();
    for k in 1..=args.appends {
        let round = over_pool(
            addr,
            args,
            Arc::new(Append {
                prefix: prefix.to_string(),
                body: args.body,
                k,
            }),
        )
        .await;
        total.items += round.items;
        total.errors += round.errors;
        total.mismatches += round.mismatches;
        total.elapsed += round.elapsed;
        total.first_failure = total.first_failure.or(round.first_failure);
    }
    eprintln!(
        "  {} appends/s, {} failed",
        total.per_second() as u64,
        total.failures()
    );
    total
}

/// Starts the origin again on the same data, times it to its first answer
/// to a read of the last stream created (whatever the status: a lost stream
/// shows in the reads that follow), and reads every stream back. Hands back the
/// origin, still running, when it came up.
async fn restart_and_read(
    launch: &Launch,
    how: &'static str,
    stopped_in: Option<Duration>,
    args: &Args,
    verify: &Arc<Verify>,
) -> (Restart, Option<origin::Running>) {
    let within = Duration::from_secs(args.ready_timeout_secs);
    let mut restart = Restart {
        how,
        stopped_in,
        ready: Err("not started".into()),
        recovered: None,
        after: Snapshot::default(),
        peak_fds: 0,
        verify: None,
    };
    let running = match launch.spawn(within).await {
        Ok(r) => r,
        Err(e) => {
            restart.ready = Err(format!("{e:#}"));
            return (restart, None);
        }
    };
    let sampler = PeakFds::start(running.pid, Duration::from_millis(100));
    let last = verify.path(args.streams - 1);
    restart.ready = running
        .first_answer(&last, within)
        .await
        .map_err(|e| format!("{e:#}"));
    restart.recovered = running.recovered_line(Duration::from_secs(1)).await;
    restart.after = Snapshot::of(running.pid);
    if let Ok((took, status)) = &restart.ready {
        eprintln!(
            "  after {how}: first answer (HTTP {status}) {:.0} ms after spawn; reading {} streams back",
            took.as_secs_f64() * 1e3,
            args.streams
        );
        let started = Instant::now();
        let read = over_pool(running.addr, args, verify.clone()).await;
        eprintln!(
            "  read back in {:.1} s: {} mismatches, {} errors",
            started.elapsed().as_secs_f64(),
            read.mismatches,
            read.errors
        );
        restart.verify = Some(read);
    }
    restart.peak_fds = sampler.stop(running.pid);
    (restart, Some(running))
}
