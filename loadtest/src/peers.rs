//! `ds-load peers`: our origin beside its peers and the physical ceiling, in
//! one run on one machine, with the same client and the same workloads, and
//! one table at the end.
//!
//! The peers are Ursula 0.11.5 (in memory and on its disk WAL), Electric's
//! Rust server `durable-streams` 0.1.5 (on its WAL) and the Node reference
//! server `@durable-streams/server` (in memory and file-backed); the ceiling
//! is `ds-load ceiling`. Each system runs alone: started, loaded with every
//! workload, stopped, its data deleted; for the pooled workload it is
//! started afresh once per stream count (see `peers/pooled.rs`). A system
//! whose program is missing is skipped with a note, so the command runs
//! anywhere (CI has only the ceiling and the origin).
//!
//! Numbers are compared within a durability class only: durable systems
//! (an acknowledged append survives power loss) with durable ones, in-memory
//! ones with in-memory ones. The origin has no in-memory mode; its `async`
//! mode (acknowledged once written to the OS) stands in that class.
//!
//! The edge read proxy is not part of this run yet: catch-up and tails go
//! to each server directly.

mod pooled;
pub(crate) mod systems;
mod table;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use systems::{Class, Kind, Programs, Running, System, SYSTEMS};
use table::{Row, Workload};

use crate::append;
use crate::procfs::cpu_seconds;
use crate::readers::{self, TailMode};

#[derive(clap::Args)]
pub struct Args {
    /// Systems to run, by name or prefix (ceiling, origin, origin-sync,
    /// origin-async, edge, edge-sync, ursula, ursula-disk, ursula-memory,
    /// electric, node, node-file, node-memory), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub systems: Vec<String>,
    /// Workloads to run (append, append-producer, catch-up, long-poll, sse,
    /// pooled), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "all")]
    pub workloads: Vec<String>,
    /// Seconds measured per workload, after the warm-up.
    #[arg(long, default_value_t = 5)]
    pub seconds: u64,
    #[arg(long, default_value_t = 1)]
    pub warmup: u64,
    /// Appends: streams, one closed-loop writer each.
    #[arg(long, default_value_t = 500)]
    pub streams: usize,
    /// Appends (and pooled appends): bytes per append.
    #[arg(long, default_value_t = 256)]
    pub body: usize,
    /// Pooled: connections shared by all the streams.
    #[arg(long, default_value_t = 256)]
    pub pool_connections: usize,
    /// Pooled: stream counts N, a row each (the system started afresh for
    /// each), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,100000,1000000")]
    pub pool_streams: Vec<usize>,
    /// Catch-up: clients reading the stream from the start, again and again.
    #[arg(long, default_value_t = 8)]
    pub readers: usize,
    /// Catch-up: size of the prefilled stream, in MiB.
    #[arg(long, default_value_t = 16)]
    pub catchup_mib: usize,
    /// Catch-up: bytes per append while prefilling.
    #[arg(long, default_value_t = 65536)]
    pub fill_body: usize,
    /// Tails: waiters on the one stream (long-poll and SSE each).
    #[arg(long, default_value_t = 100)]
    pub tailers: usize,
    /// Tails: appends per second by the one writer.
    #[arg(long, default_value_t = 20)]
    pub rate: u32,
    /// Our origin binary.
    #[arg(long, default_value = "target/release/origin")]
    pub origin: PathBuf,
    /// The Ursula 0.11.5 binary; default ~/.cache/ds-peers/ursula/bin/ursula.
    #[arg(long, env = "DS_URSULA")]
    pub ursula: Option<PathBuf>,
    /// Electric's `durable-streams-server` (crates.io `durable-streams`
    /// 0.1.5); default ~/.cache/ds-peers/electric/bin/durable-streams-server.
    #[arg(long, env = "DS_ELECTRIC")]
    pub electric: Option<PathBuf>,
    /// The Node harness folder (server.mjs, package.json, node_modules).
    #[arg(long, default_value = "loadtest/peers")]
    pub node_dir: PathBuf,
    /// The Node.js executable.
    #[arg(long, default_value = "node")]
    pub node: PathBuf,
    /// Size of the ceiling's GET answers (its catch-up "pass").
    #[arg(long, default_value_t = 1 << 20)]
    pub ceiling_get_bytes: usize,
    /// Scratch space for the systems' data; a fresh folder in it per run.
    #[arg(long, default_value_os_t = std::env::temp_dir())]
    pub scratch: PathBuf,
    /// Also write the table (with its notes) to this file.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Fail (exit non-zero) when a system that is installed fails to start,
    /// or a workload fails or counts errors: the smoke run in CI.
    #[arg(long)]
    pub strict: bool,
}

fn selected<T>(
    all: &[T],
    wanted: &[String],
    name: impl Fn(&T) -> &str,
) -> anyhow::Result<Vec<usize>> {
    if wanted.iter().any(|w| w == "all") {
        return Ok((0..all.len()).collect());
    }
    let mut picked = Vec::new();
    for w in wanted {
        let hits: Vec<usize> = (0..all.len())
            .filter(|&i| name(&all[i]) == w || name(&all[i]).starts_with(&format!("{w}-")))
            .collect();
        anyhow::ensure!(!hits.is_empty(), "unknown name {w:?}");
        picked.extend(hits);
    }
    picked.sort_unstable();
    picked.dedup();
    Ok(picked)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let systems = selected(SYSTEMS, &args.systems, |s| s.name)?;
    let workloads = selected(&Workload::ALL, &args.workloads, |w| w.name())?;
    let programs = Programs {
        origin: args.origin.clone(),
        edge: args.origin.with_file_name("edge"),
        ursula: systems::peer_program(&args.ursula, "ursula/bin/ursula"),
        electric: systems::peer_program(&args.electric, "electric/bin/durable-streams-server"),
        node_dir: args.node_dir.clone(),
        node: args.node.clone(),
        ceiling_get_bytes: args.ceiling_get_bytes,
    };
    let scratch = args
        .scratch
        .join(format!("ds-peers-{}", std::process::id()));
    let mut results = Results {
        rows: Vec::new(),
        notes: vec![format!(
            "load average before the run: {}; {} CPUs",
            load_average(),
            std::thread::available_parallelism().map_or(0, |n| n.get())
        )],
        failures: 0,
    };
    for &s in &systems {
        let system = &SYSTEMS[s];
        if let Some(why) = programs.missing(system) {
            eprintln!("== {}: skipped: {why}", system.name);
            results
                .notes
                .push(format!("{}: skipped: {why}", system.name));
            continue;
        }
        let dir = scratch.join(system.name);
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let (pooled, shared): (Vec<Workload>, Vec<Workload>) = workloads
            .iter()
            .map(|&w| Workload::ALL[w])
            .filter(|w| system.kind != Kind::Ceiling || w.runs_on_ceiling())
            .partition(|&w| w == Workload::Pooled);
        // A system that failed to start keeps its folder (with its log).
        let mut keep = false;
        if !shared.is_empty() {
            eprintln!("== {}: starting", system.name);
            match systems::start(system, &programs, &dir).await {
                Ok(running) => {
                    for workload in shared {
                        let row = measure(workload, system, &running, &args).await;
                        results.record(system, workload.name(), workload.unit(), row);
                    }
                    running.stop().await;
                }
                Err(e) => {
                    eprintln!("== {}: failed to start: {e:#}", system.name);
                    results.failures += 1;
                    results
                        .notes
                        .push(format!("{}: failed to start: {e:#}", system.name));
                    keep = true;
                }
            }
        }
        if !keep && !pooled.is_empty() {
            for &n in &args.pool_streams {
                let row = pooled::measure(system, &programs, &dir, n, &args).await;
                keep |= row.is_err();
                results.record(system, &format!("pooled N={n}"), "appends/s", row);
            }
        }
        if !keep {
            let _ = std::fs::remove_dir_all(&dir);
        }
    }
    // Only when empty: the folders of systems that failed to start stay.
    let _ = std::fs::remove_dir(&scratch);
    let Results {
        rows,
        notes,
        failures,
    } = results;
    let report = report(&args, &rows, &notes);
    println!("{report}");
    if let Some(out) = &args.out {
        std::fs::write(out, &report).with_context(|| format!("writing {}", out.display()))?;
    }
    anyhow::ensure!(
        !args.strict || failures == 0,
        "{failures} failures (a system that did not start, a workload that failed or counted errors)"
    );
    Ok(())
}

/// The rows so far, the notes for the report, and how many things failed.
struct Results {
    rows: Vec<Row>,
    notes: Vec<String>,
    failures: usize,
}

impl Results {
    /// Keeps a measurement (printing its line) or notes why there is none.
    fn record(&mut self, system: &System, label: &str, unit: &str, measured: anyhow::Result<Row>) {
        match measured {
            Ok(row) => {
                eprintln!(
                    "   {label:<16} {:>12.1} {unit:<9} p50 {:.2} ms  p99 {:.2} ms  errors {}",
                    row.throughput,
                    row.p50_us as f64 / 1000.0,
                    row.p99_us as f64 / 1000.0,
                    row.errors
                );
                self.failures += usize::from(row.errors > 0);
                if let (n @ 1.., Some(e)) = (row.errors, &row.first_error) {
                    self.notes.push(format!(
                        "{} {label}: {n} failed requests; the first got: {e}",
                        system.name
                    ));
                }
                self.rows.push(row);
            }
            Err(e) => {
                eprintln!("   {label}: failed: {e:#}");
                self.failures += 1;
                self.notes
                    .push(format!("{} {label}: failed: {e:#}", system.name));
            }
        }
    }
}

/// Runs one workload against a running system; fresh stream names each time.
async fn measure(
    workload: Workload,
    system: &'static System,
    running: &Running,
    args: &Args,
) -> anyhow::Result<Row> {
    let (warmup, seconds) = (
        Duration::from_secs(args.warmup),
        Duration::from_secs(args.seconds),
    );
    let path = |name: &str| format!("{}{name}", running.prefix);
    let pid = running.pid();
    // The catch-up stream is filled before the clock starts.
    let expect = if workload == Workload::CatchUp {
        let bytes = if system.kind == Kind::Ceiling {
            0
        } else {
            readers::prefill(
                running.addr,
                &path("catch-up"),
                args.catchup_mib,
                args.fill_body,
            )
            .await
            .context("prefilling")?
        };
        (system.kind != Kind::Ceiling).then_some(bytes)
    } else {
        None
    };
    let cpu_before = cpu_seconds(pid);
    let started = std::time::Instant::now();
    let (throughput, summary) = match workload {
        Workload::Append | Workload::AppendProducer => {
            let producer = workload == Workload::AppendProducer;
            let r = append::run(&append::Args {
                addr: running.addr,
                prefix: path(if producer { "append-p-" } else { "append-" }),
                workload: append::Workload {
                    streams: args.streams,
                    body: args.body,
                    seconds: args.seconds,
                    warmup: args.warmup,
                },
                producer,
                create: true,
                label: String::new(),
            })
            .await?;
            (r.rps(), r)
        }
        Workload::CatchUp => {
            let r = readers::catch_up(&readers::CatchUp {
                addr: running.addr,
                path: path("catch-up"),
                readers: args.readers,
                expect_bytes: expect,
                warmup,
                seconds,
            })
            .await?;
            (r.per_second() / 1e6, r.summary)
        }
        Workload::Pooled => anyhow::bail!("the pooled workload starts its own system (pooled.rs)"),
        Workload::LongPoll | Workload::Sse => {
            let r = readers::tail(&readers::Tail {
                addr: running.addr,
                path: path(workload.name()),
                mode: if workload == Workload::Sse {
                    TailMode::Sse
                } else {
                    TailMode::LongPoll
                },
                tailers: args.tailers,
                rate: args.rate,
                warmup,
                seconds,
            })
            .await?;
            (r.per_second(), r.summary)
        }
    };
    let server_cores = (cpu_seconds(pid) - cpu_before) / started.elapsed().as_secs_f64().max(1e-3);
    Ok(Row {
        workload,
        system,
        throughput,
        p50_us: summary.p50_us,
        p99_us: summary.p99_us,
        errors: summary.errors,
        server_cores,
        first_error: summary.first_error,
        pool: None,
    })
}

/// The table with what it measured and under which settings.
fn report(args: &Args, rows: &[Row], notes: &[String]) -> String {
    let mut out = table::render(rows);
    out.push_str(&format!(
        "\nWorkloads ({} s measured after {} s warm-up each): append = {} streams x 1 closed-loop writer, {} B \
         bodies (append-producer: the same with Producer-Id/Epoch/Seq); catch-up = {} clients reading a {} MiB \
         stream from the start again and again (p50/p99 per request); long-poll and sse = {} waiters on one \
         stream, one writer at {} appends/s, latency from send to receipt; pooled = {} connections appending \
         {} B bodies round-robin across N streams (connection c to streams c, c+C, c+2C, ...), on a fresh start \
         of the system per N, after creating the N streams over the same connections (creates/s; not part of \
         the appends), RSS of the system's processes after the creates (per stream: its growth over the \
         creates / N, the pool's connections included: the ceiling's row is what they alone cost), errors = failed creates + failed appends. Server CPU: the server process's CPU time \
         over the workload (100 % = one core).\n\nDurability:\n",
        args.seconds,
        args.warmup,
        args.streams,
        args.body,
        args.readers,
        args.catchup_mib,
        args.tailers,
        args.rate,
        args.pool_connections,
        args.body,
    ));
    for s in SYSTEMS {
        if rows.iter().any(|r| std::ptr::eq(r.system, s)) {
            out.push_str(&format!(
                "- {} ({}): {}\n",
                s.name,
                s.class.label(),
                s.durability
            ));
        }
    }
    if rows
        .iter()
        .any(|r| r.system.class == Class::Ceiling && r.workload == Workload::CatchUp)
    {
        out.push_str(&format!(
            "- the ceiling's catch-up pass is one GET of {} B\n",
            args.ceiling_get_bytes
        ));
    }
    out.push_str("\nNotes:\n");
    for n in notes {
        out.push_str(&format!("- {n}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn systems_are_picked_by_name_or_family() {
        let names = |wanted: &[&str]| -> Vec<&str> {
            let wanted: Vec<String> = wanted.iter().map(|w| w.to_string()).collect();
            selected(SYSTEMS, &wanted, |s| s.name)
                .expect("known")
                .into_iter()
                .map(|i| SYSTEMS[i].name)
                .collect()
        };
        assert_eq!(
            names(&["ceiling", "origin"]),
            ["ceiling", "origin-sync", "origin-async"]
        );
        assert_eq!(names(&["ursula-disk"]), ["ursula-disk"]);
        assert_eq!(names(&["all"]).len(), SYSTEMS.len());
        assert!(selected(SYSTEMS, &["ursul".to_string()], |s| s.name).is_err());
    }
}
