//! One run, two servers: the bare-hyper ceiling and the origin, loaded by the
//! same client with the same workload, one after the other, on this machine.
//! Prints each result and the origin's share of the ceiling.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::append;
use crate::procfs::cpu_seconds;

#[derive(clap::Args)]
pub struct Args {
    /// The origin binary to start.
    #[arg(long, default_value = "target/release/origin")]
    pub origin: PathBuf,
    #[command(flatten)]
    pub workload: append::Workload,
    /// Also run with producer headers.
    #[arg(long)]
    pub producer: bool,
    /// Measure this many rounds, each loading the ceiling and the origin one
    /// after the other (alternating which goes first), and report the median
    /// of the rounds' ratios: this machine's speed drifts by tens of percent
    /// over a minute, and a ratio of neighbouring runs cancels the drift.
    #[arg(long, default_value_t = 1)]
    pub rounds: usize,
    /// Instead of whole runs one after the other, alternate the two servers
    /// in slices of this many seconds (`--rounds` pairs of slices; see
    /// `interleave.rs`): the steadiest comparison on a noisy machine.
    #[arg(long)]
    pub interleave: Option<f64>,
    /// Load this origin binary where the ceiling would be: an A/B of two
    /// builds under the same client (the report's "ceiling" is then this
    /// baseline build, and the ratio is new / baseline).
    #[arg(long)]
    pub baseline: Option<PathBuf>,
}

/// The first `HOST:PORT` of a server's log line, bare, as `addr=HOST:PORT`
/// (ours) or as `http://HOST:PORT` (Electric's).
pub fn address_in(line: &str) -> Option<SocketAddr> {
    line.split_whitespace().find_map(|w| {
        let w = w.strip_prefix("addr=").unwrap_or(w);
        w.strip_prefix("http://").unwrap_or(w).parse().ok()
    })
}

/// Starts a server process and reads its address from its first line.
pub async fn start(cmd: &mut Command) -> anyhow::Result<(Child, SocketAddr)> {
    let mut child = cmd
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "warn,origin=info,edge=info")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines
        .next_line()
        .await?
        .ok_or_else(|| anyhow::anyhow!("origin printed nothing"))?;
    let addr = address_in(&first).ok_or_else(|| anyhow::anyhow!("no address in {first:?}"))?;
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, addr))
}

/// Runs the workload and reports the server's CPU time per request as well.
async fn measure(
    label: &str,
    args: &append::Args,
    pid: u32,
) -> anyhow::Result<crate::stats::Summary> {
    let before = cpu_seconds(pid);
    let r = append::run(args).await?;
    let cpu = cpu_seconds(pid) - before;
    let total = (args.workload.warmup + args.workload.seconds) as f64 * r.rps();
    println!(
        "{}  server CPU {:.0} us/request",
        r.line(label),
        cpu * 1e6 / total.max(1.0)
    );
    Ok(r)
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    // Both servers are processes of their own, so neither shares a runtime
    // with the load client.
    let data = std::env::temp_dir().join(format!("ds-bench-{}", std::process::id()));
    let baseline_data = data.with_extension("baseline");
    let (mut ceiling, ceiling_addr) = match &args.baseline {
        Some(bin) => start(&mut origin_command(bin, &baseline_data)).await?,
        None => start(Command::new(std::env::current_exe()?).arg("ceiling")).await?,
    };
    let (mut origin, origin_addr) = start(&mut origin_command(&args.origin, &data)).await?;
    let servers = Servers {
        ceiling: (ceiling_addr, ceiling.id().unwrap_or(0)),
        origin: (origin_addr, origin.id().unwrap_or(0)),
    };
    let measured = match args.interleave {
        Some(slice) => interleaved(&args, &servers, slice).await,
        None => whole_runs(&args, &servers).await,
    };
    let _ = ceiling.start_kill();
    let _ = ceiling.wait().await;
    let _ = origin.start_kill();
    let _ = origin.wait().await;
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_dir_all(&baseline_data);
    tokio::time::sleep(Duration::from_millis(10)).await;
    measured
}

/// What the first server is: the ceiling, or the `--baseline` build.
fn peer_label(args: &Args) -> &'static str {
    match args.baseline {
        Some(_) => "baseline (origin, durable)",
        None => "ceiling (bare hyper, 204)",
    }
}

/// An origin on a free port over a fresh data directory.
pub fn origin_command(bin: &std::path::Path, data: &std::path::Path) -> Command {
    let _ = std::fs::remove_dir_all(data);
    let mut cmd = Command::new(bin);
    cmd.args(["--listen", "127.0.0.1:0", "--data"]).arg(data);
    cmd
}

/// Each server's address and process id.
struct Servers {
    ceiling: (SocketAddr, u32),
    origin: (SocketAddr, u32),
}

/// The median, least and greatest of some ratios, in percent.
fn spread(ratios: &[f64]) -> (f64, f64, f64) {
    let mut sorted = ratios.to_vec();
    sorted.sort_by(f64::total_cmp);
    (
        100.0 * sorted[sorted.len() / 2],
        100.0 * sorted[0],
        100.0 * sorted[sorted.len() - 1],
    )
}

/// `--interleave`: both servers in alternating slices (see `interleave.rs`).
async fn interleaved(args: &Args, servers: &Servers, slice: f64) -> anyhow::Result<()> {
    let pids = [servers.ceiling.1, servers.origin.1];
    let sides = [
        crate::interleave::Side {
            label: peer_label(args).into(),
            addr: servers.ceiling.0,
        },
        crate::interleave::Side {
            label: "origin".into(),
            addr: servers.origin.0,
        },
    ];
    let cpu = pids.map(cpu_seconds);
    let run = crate::interleave::run(
        &sides,
        &args.workload,
        args.rounds.max(1),
        Duration::from_secs_f64(slice),
        Duration::from_millis(250),
    )
    .await?;
    let cpu = [cpu_seconds(pids[0]) - cpu[0], cpu_seconds(pids[1]) - cpu[1]];
    let [c, o] = &run.summaries;
    println!(
        "interleaved: {} pairs of {slice} s slices (each after 250 ms uncounted)",
        args.rounds.max(1)
    );
    println!("{}", c.line(peer_label(args)));
    println!("{}", o.line("origin (durable)"));
    let (median, min, max) = spread(&run.pair_ratios);
    println!(
        "origin / ceiling: {:.0} % of the totals; slice pairs: median {median:.0} % (min {min:.0} %, max {max:.0} %); server CPU over the run: ceiling {:.1} s, origin {:.1} s",
        100.0 * o.rps() / c.rps(),
        cpu[0],
        cpu[1]
    );
    Ok(())
}

/// Whole runs, one server after the other (`--rounds` pairs, alternating
/// which goes first), then the producer run if asked.
async fn whole_runs(args: &Args, servers: &Servers) -> anyhow::Result<()> {
    let (ceiling_pid, origin_pid) = (servers.ceiling.1, servers.origin.1);
    let base = append::Args {
        addr: servers.ceiling.0,
        prefix: "/v1/stream/bench-".into(),
        workload: args.workload.clone(),
        producer: false,
        create: true,
        label: String::new(),
    };
    println!(
        "workload: {} streams x 1 closed-loop writer, {} B bodies, {} s measured after {} s warm-up; origin durable (fdatasync before every ack)",
        args.workload.streams, args.workload.body, args.workload.seconds, args.workload.warmup
    );
    let origin_args = append::Args {
        addr: servers.origin.0,
        ..base.clone()
    };
    let mut ratios = Vec::with_capacity(args.rounds);
    let mut ceiling_result = None;
    for round in 0..args.rounds.max(1) {
        let (c, o) = if round % 2 == 0 {
            let c = measure(peer_label(args), &base, ceiling_pid).await?;
            (
                c,
                measure("origin (durable)", &origin_args, origin_pid).await?,
            )
        } else {
            let o = measure("origin (durable)", &origin_args, origin_pid).await?;
            (measure(peer_label(args), &base, ceiling_pid).await?, o)
        };
        let ratio = o.rps() / c.rps();
        println!("origin / ceiling: {:.0} %", 100.0 * ratio);
        ratios.push(ratio);
        ceiling_result = Some(c);
    }
    if ratios.len() > 1 {
        let (median, min, max) = spread(&ratios);
        println!(
            "origin / ceiling over {} rounds: median {median:.0} % (min {min:.0} %, max {max:.0} %)",
            ratios.len()
        );
    }
    let ceiling_result = ceiling_result.expect("at least one round");
    if args.producer {
        let with = append::Args {
            addr: servers.origin.0,
            producer: true,
            prefix: "/v1/stream/bench-p-".into(),
            ..base.clone()
        };
        let p = measure("origin (durable, producer headers)", &with, origin_pid).await?;
        println!(
            "origin+producer / ceiling: {:.0} %",
            100.0 * p.rps() / ceiling_result.rps()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_are_found_in_every_servers_first_line() {
        let addr: SocketAddr = "127.0.0.1:4437".parse().expect("addr");
        for line in [
            "ceiling listening on 127.0.0.1:4437",
            "INFO origin: origin listening on 127.0.0.1:4437 addr=127.0.0.1:4437",
            "durable-streams-server listening on http://127.0.0.1:4437 (data: /tmp/x)",
        ] {
            assert_eq!(address_in(line), Some(addr), "{line}");
        }
        assert_eq!(address_in("listening on port 4437"), None);
    }
}
