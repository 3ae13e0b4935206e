//! `ds-load`: a lean load client and the bare-hyper ceiling server.
//!
//! On a 2-core machine k6 spends most of the CPU on itself; this client
//! spends a few microseconds per request, so the server under test gets the
//! machine. Subcommands:
//! - `ceiling`: a bare hyper server that answers every request at once (POST
//!   204, GET a fixed body): the physical limit of HTTP on this machine.
//! - `append`: N streams, one closed-loop writer each, fixed-size bodies.
//! - `compare-append`: starts the ceiling and the origin side by side, runs
//!   `append` against each in the same run, and prints the table and ratio.
//! - `bucket-proxy`: a region's bucket requests counted by kind
//!   (`region-idle-cost.sh`);
//! - `proxy`, `compare-forward`: a bare hyper reverse proxy, and appends
//!   forwarded through the edge against it (and straight to the origin).
//! - `restart-time`: fills an origin, kills it, and times the restart.
//! - `seal-bench`: append p99 with and without sealing into s3s-fs, seal
//!   throughput, and cold vs warm catch-up from object storage.
//! - `fork-bench`: fork creation time for a source with 1 GiB sealed and
//!   one with 64 MiB unsealed, next to plain creates, and the bytes object
//!   storage gains per fork.
//! - `rollback-bench`: rollback time for a 1 MiB and a 4 GiB stream,
//!   interleaved, and the bytes object storage gains per rollback.
//! - `fork-region`: in a region of several partitions (started by
//!   `loadtest/fork-region-bench.sh`), forks within the source's partition
//!   next to forks across partitions (which copy the prefix), by size.
//! - `sse-fanout`: SSE fan-out at N readers of one stream, the edge, the
//!   origin, the peers and the floor in one run (see `fanout.rs`), read by
//!   the lean client (`lean_sse`).
//! - `catchup-compare`: the edge's catch-up reads (see `edge.rs`).
//! - `catch-up`: closed-loop catch-up readers against any address (a
//!   region's follower: `loadtest/follower-bench.sh`).
//! - `many-tails`: many streams with one SSE reader each through the edge:
//!   connections to the origin, memory per tailed stream, delivery.
//! - `hostile-paths`: an edge's memory under distinct long paths.
//! - `conn-cost`: a server's memory per connection, silent, idle, tailing
//!   by SSE and parked in a long-poll (where a reader's cost goes).
//! - `peers`: the ceiling, the origin, Ursula, Electric's Rust server and the
//!   Node reference server in one run (appends, catch-up, long-poll and SSE
//!   tails, and pooled appends: a fixed pool of connections round-robin
//!   across 1,000 to 1,000,000 streams, with creates/s and memory), one table.
//! - `streams`: a million small streams on one origin under a fixed
//!   descriptor limit: memory and descriptors per stream, creates/s and
//!   appends/s, restart time after SIGKILL (and SIGTERM), and every stream
//!   read back byte for byte.
//! - `webhooks`: subscriptions' delivery latency, and durable appends with
//!   subscriptions active against without, in one run.
//! - `subscriptions-scale`: memory per subscription and per link, idle CPU
//!   and CPU per create at 100,000 subscriptions and 1,000,000 links.
//! - `wal-batching`: appends per put through one WAL per origin against a
//!   WAL per partition, at 1, 6 and 64 partitions (decision 0028).
//!
//! `readers` holds the read workloads (catch-up, tails) that `peers` runs,
//! `pooled` the pooled appends; `pool` shares a fixed set of connections
//! among numbered requests (creates, appends, reads) for `pooled` and
//! `streams`; `procfs` reads a server's CPU, memory and descriptors.

mod append;
mod bucket_proxy;
mod catch_up;
mod ceiling;
mod compare;
mod conn_cost;
mod edge;
mod fanout;
mod fanout_floor;
mod fanout_hyper;
mod fork;
mod fork_region;
mod forward;
mod hostile;
mod interleave;
mod lean_sse;
mod many_tails;
mod peers;
mod pool;
mod pooled;
mod procfs;
mod proxy;
mod readers;
mod restart;
mod rollback;
mod seal;
mod sse_framing;
mod stats;
mod streams;
mod subscriptions_scale;
mod wal_batching;
mod webhooks;
mod webhooks_region;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ds-load",
    about = "Lean load client for durable-streams servers"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    Ceiling(ceiling::Args),
    Append(append::Args),
    CompareAppend(compare::Args),
    RestartTime(restart::Args),
    SealBench(seal::Args),
    ForkBench(fork::Args),
    RollbackBench(rollback::Args),
    ForkRegion(fork_region::Args),
    SseFanout(fanout::FanoutArgs),
    /// The fan-out floor's writer (started by `sse-fanout --systems floor`).
    #[command(hide = true)]
    FloorWriter(fanout_floor::WriterArgs),
    ManyTails(many_tails::Args),
    CatchupCompare(edge::CatchupArgs),
    Peers(peers::Args),
    Proxy(proxy::Args),
    BucketProxy(bucket_proxy::Args),
    CompareForward(forward::Args),
    Streams(streams::Args),
    CatchUp(catch_up::Args),
    HostilePaths(hostile::Args),
    ConnCost(conn_cost::Args),
    Webhooks(webhooks::Args),
    WebhooksRegion(webhooks_region::Args),
    SubscriptionsScale(subscriptions_scale::Args),
    WalBatching(wal_batching::Args),
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().cmd {
        Cmd::Ceiling(a) => ceiling::run(a).await,
        Cmd::Append(a) => {
            let r = append::run(&a).await?;
            println!("{}", r.line(&a.label));
            Ok(())
        }
        Cmd::CompareAppend(a) => compare::run(a).await,
        Cmd::RestartTime(a) => restart::run(a).await,
        Cmd::SealBench(a) => seal::run(a).await,
        Cmd::ForkBench(a) => fork::run(a).await,
        Cmd::RollbackBench(a) => rollback::run(a).await,
        Cmd::ForkRegion(a) => fork_region::run(a).await,
        Cmd::SseFanout(a) => fanout::fanout(a).await,
        Cmd::FloorWriter(a) => fanout_floor::writer(a).await,
        Cmd::ManyTails(a) => many_tails::run(a).await,
        Cmd::CatchupCompare(a) => edge::catchup(a).await,
        Cmd::Peers(a) => peers::run(a).await,
        Cmd::Proxy(a) => proxy::run(a).await,
        Cmd::BucketProxy(a) => bucket_proxy::run(a).await,
        Cmd::CompareForward(a) => forward::run(a).await,
        Cmd::Streams(a) => streams::run(a).await,
        Cmd::CatchUp(a) => catch_up::run(a).await,
        Cmd::HostilePaths(a) => hostile::run(a).await,
        Cmd::ConnCost(a) => conn_cost::run(a).await,
        Cmd::Webhooks(a) => webhooks::run(a).await,
        Cmd::WebhooksRegion(a) => webhooks_region::run(a).await,
        Cmd::SubscriptionsScale(a) => subscriptions_scale::run(a).await,
        Cmd::WalBatching(a) => wal_batching::run(a).await,
    }
}
