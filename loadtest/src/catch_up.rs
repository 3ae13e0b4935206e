//! `catch-up`: closed-loop readers replaying one stream from the start
//! (`readers::catch_up`) against any server, optionally prefilled through
//! another address first. `loadtest/follower-bench.sh` runs it against a
//! region's owner and its follower (reads from the follower's replica, and
//! forwarded with replicas off) in one run.

use std::net::SocketAddr;
use std::time::Duration;

use crate::readers::{catch_up, prefill, CatchUp};

#[derive(clap::Args)]
pub struct Args {
    /// Where the readers read.
    #[arg(long)]
    pub addr: SocketAddr,
    #[arg(long, default_value = "/v1/stream/catch-up")]
    pub path: String,
    /// Closed-loop readers, one connection each.
    #[arg(long, default_value_t = 32)]
    pub readers: usize,
    /// The stream's size in MiB: a pass that reads less counts as an error.
    #[arg(long, default_value_t = 8)]
    pub mib: usize,
    /// Create and fill the stream through this address first.
    #[arg(long)]
    pub prefill: Option<SocketAddr>,
    /// Bytes per append of the prefill.
    #[arg(long, default_value_t = 65536)]
    pub body: usize,
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
    #[arg(long, default_value = "catch-up")]
    pub label: String,
}

pub async fn run(a: Args) -> anyhow::Result<()> {
    if let Some(through) = a.prefill {
        prefill(through, &a.path, a.mib, a.body).await?;
        println!("prefilled {} with {} MiB through {through}", a.path, a.mib);
        return Ok(());
    }
    let r = catch_up(&CatchUp {
        addr: a.addr,
        path: a.path.clone(),
        readers: a.readers,
        expect_bytes: Some((a.mib as u64) << 20),
        warmup: Duration::from_secs(a.warmup),
        seconds: Duration::from_secs(a.seconds),
    })
    .await?;
    println!(
        "{}  {:.0} MB/s",
        r.summary.line(&a.label),
        r.per_second() / 1e6
    );
    Ok(())
}
