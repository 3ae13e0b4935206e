//! `compare-forward`: appends forwarded by the edge against the forwarding
//! ceiling, a bare hyper reverse proxy (`proxy`), measured two ways:
//!
//! - **interleaved**: both in front of the same durable origin, in
//!   alternating slices (`interleave.rs`), which cancels the machine's
//!   drift; then the same workload straight to the origin, for the cost of
//!   a hop at all;
//! - **sequential**: a fresh origin with one hop in front, the edge and then
//!   the bare proxy, back to back, each a whole run (warm-up, then
//!   `--seconds`). Where the origin is the bottleneck, interleaving hides
//!   the hop's cost (the origin's queue is shared by both sides' slices);
//!   whole runs on shared cores show it.

use std::path::PathBuf;
use std::time::Duration;

use tokio::process::Command;

use crate::append;
use crate::compare::start;
use crate::procfs::cpu_seconds;

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "target/release/origin")]
    pub origin: PathBuf,
    #[arg(long, default_value = "target/release/edge")]
    pub edge: PathBuf,
    #[command(flatten)]
    pub workload: append::Workload,
    /// Pairs of slices.
    #[arg(long, default_value_t = 20)]
    pub rounds: usize,
    /// Seconds per slice.
    #[arg(long, default_value_t = 1.0)]
    pub slice: f64,
    /// Skip the sequential runs.
    #[arg(long)]
    pub interleaved_only: bool,
}

/// Which hop stands in front of the origin.
#[derive(Clone, Copy)]
enum Hop {
    Edge,
    Proxy,
}

/// Starts the origin on an empty data directory `data`.
async fn start_origin(
    args: &Args,
    data: &std::path::Path,
) -> anyhow::Result<(tokio::process::Child, std::net::SocketAddr)> {
    let _ = std::fs::remove_dir_all(data);
    start(
        Command::new(&args.origin)
            .args(["--listen", "127.0.0.1:0", "--data"])
            .arg(data),
    )
    .await
}

/// Starts `hop` in front of the origin at `origin_url`.
async fn start_hop(
    args: &Args,
    hop: Hop,
    origin_url: &str,
) -> anyhow::Result<(tokio::process::Child, std::net::SocketAddr)> {
    match hop {
        Hop::Edge => {
            start(
                Command::new(&args.edge)
                    .args(["--listen", "127.0.0.1:0", "--origin"])
                    .arg(origin_url),
            )
            .await
        }
        Hop::Proxy => {
            start(
                Command::new(std::env::current_exe()?)
                    .args(["proxy", "--origin"])
                    .arg(origin_url),
            )
            .await
        }
    }
}

/// One whole run through `hop` in front of a fresh origin.
async fn whole_run(args: &Args, hop: Hop) -> anyhow::Result<crate::stats::Summary> {
    let data = std::env::temp_dir().join(format!(
        "ds-forward-seq-{}-{}",
        std::process::id(),
        hop as u8
    ));
    let (mut origin, origin_addr) = start_origin(args, &data).await?;
    let hopped = start_hop(args, hop, &format!("http://{origin_addr}")).await;
    let summary = match &hopped {
        Ok((_, addr)) => Some(
            append::run(&append::Args {
                addr: *addr,
                prefix: "/v1/stream/forward-seq-".into(),
                workload: args.workload.clone(),
                producer: false,
                create: true,
                label: String::new(),
            })
            .await,
        ),
        Err(_) => None,
    };
    if let Ok((mut child, _)) = hopped {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    let _ = origin.start_kill();
    let _ = origin.wait().await;
    let _ = std::fs::remove_dir_all(&data);
    summary.ok_or_else(|| anyhow::anyhow!("the hop did not start"))?
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let data = std::env::temp_dir().join(format!("ds-forward-{}", std::process::id()));
    let (mut origin, origin_addr) = start_origin(&args, &data).await?;
    let origin_url = format!("http://{origin_addr}");
    let (mut proxy, proxy_addr) = start_hop(&args, Hop::Proxy, &origin_url).await?;
    let (mut edge, edge_addr) = start_hop(&args, Hop::Edge, &origin_url).await?;
    let pids = [proxy.id().unwrap_or(0), edge.id().unwrap_or(0)];
    let cpu = pids.map(cpu_seconds);
    let sides = [
        crate::interleave::Side {
            label: "bare proxy".into(),
            addr: proxy_addr,
        },
        crate::interleave::Side {
            label: "edge".into(),
            addr: edge_addr,
        },
    ];
    let run = crate::interleave::run(
        &sides,
        &args.workload,
        args.rounds.max(1),
        Duration::from_secs_f64(args.slice),
        Duration::from_millis(250),
    )
    .await;
    let cpu = [cpu_seconds(pids[0]) - cpu[0], cpu_seconds(pids[1]) - cpu[1]];
    let direct = match &run {
        Ok(_) => {
            let a = append::Args {
                addr: origin_addr,
                prefix: "/v1/stream/forward-direct-".into(),
                workload: args.workload.clone(),
                producer: false,
                create: true,
                label: String::new(),
            };
            Some(append::run(&a).await)
        }
        Err(_) => None,
    };
    for child in [&mut edge, &mut proxy, &mut origin] {
        let _ = child.start_kill();
        let _ = child.wait().await;
    }
    let _ = std::fs::remove_dir_all(&data);
    let run = run?;
    let [p, e] = &run.summaries;
    println!(
        "workload: {} streams x 1 closed-loop writer, {} B bodies; origin durable; {} pairs of {} s slices",
        args.workload.streams,
        args.workload.body,
        args.rounds.max(1),
        args.slice
    );
    println!("{}", p.line("bare proxy -> origin"));
    println!("{}", e.line("edge -> origin"));
    if let Some(d) = direct {
        println!("{}", d?.line("origin direct"));
    }
    let mut ratios = run.pair_ratios.clone();
    ratios.sort_by(f64::total_cmp);
    anyhow::ensure!(!ratios.is_empty(), "no slice pair was measured");
    println!(
        "interleaved: edge / bare proxy: {:.0} % of the totals; slice pairs: median {:.0} %; proxy CPU {:.1} s, edge CPU {:.1} s",
        100.0 * e.rps() / p.rps(),
        100.0 * ratios[ratios.len() / 2],
        cpu[0],
        cpu[1]
    );
    if args.interleaved_only {
        return Ok(());
    }
    let edge_run = whole_run(&args, Hop::Edge).await?;
    let proxy_run = whole_run(&args, Hop::Proxy).await?;
    println!("{}", edge_run.line("sequential: edge -> fresh origin"));
    println!(
        "{}",
        proxy_run.line("sequential: bare proxy -> fresh origin")
    );
    println!(
        "sequential: edge / bare proxy: {:.0} %",
        100.0 * edge_run.rps() / proxy_run.rps()
    );
    Ok(())
}
