//! `hostile-paths`: what distinct long paths cost an edge (finding 4 of the
//! open-internet issue). GETs under distinct first path segments of a given
//! length, each a closed account the origin refuses, all through one edge;
//! prints the answers by status and the edge's resident memory before and
//! after. The edge should remember no rate-limit budget for them and keep
//! its "is this public" verdicts within `--public-memory`.

use std::collections::BTreeMap;

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;

use crate::append::{connect, send};
use crate::edge::{Binaries, Pair};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub bins: Binaries,
    /// Requests, each under a first path segment of its own.
    #[arg(long, default_value_t = 20_000)]
    pub requests: usize,
    /// Bytes of each first path segment.
    #[arg(long, default_value_t = 4096)]
    pub segment: usize,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let pair = Pair::start(&args.bins).await?;
    let mut conn = connect(pair.edge_addr).await?;
    let get = |path: String| Request::get(path).body(Full::new(Bytes::new()));
    // Warm up the edge's own allocations first, so growth is the paths'.
    for i in 0..200 {
        send(&mut conn, get(format!("/warm{i}/s"))?).await?;
    }
    let before = pair.edge_rss_kib();
    let segment = "a".repeat(args.segment);
    let mut statuses = BTreeMap::new();
    let started = std::time::Instant::now();
    for i in 0..args.requests {
        let status = send(&mut conn, get(format!("/{segment}{i}/s"))?).await?;
        *statuses.entry(status).or_insert(0u64) += 1;
    }
    let after = pair.edge_rss_kib();
    println!(
        "{} GETs under distinct {} B first segments in {:.1} s: statuses {statuses:?}; edge RSS {:.1} -> {:.1} MiB (grew {:.1} MiB)",
        args.requests,
        args.segment,
        started.elapsed().as_secs_f64(),
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        after.saturating_sub(before) as f64 / 1024.0,
    );
    pair.stop().await;
    Ok(())
}
