//! Forks in a region of several partitions (`fork-region`): a fork whose
//! path falls in its source's partition shares the source's bytes (as on
//! one origin); one whose path falls in another partition copies the
//! prefix into its own (decision 0016), so it costs with the prefix's
//! size. For each `--sizes-kib` source: `--forks` forks of each kind at
//! the source's end, one at a time and interleaved (the machine's drift
//! hits both alike), p50/p99 of each and their ratio; one of each read
//! back whole, its length checked.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;

use crate::append::{connect, send, Sender};
use crate::seal::read_all;

#[derive(clap::Args)]
pub struct Args {
    /// An edge (or origin) of the region.
    #[arg(long)]
    pub addr: SocketAddr,
    /// The region's partition count.
    #[arg(long, default_value_t = 6)]
    pub partitions: u32,
    /// Source sizes, in KiB.
    #[arg(long, value_delimiter = ',', default_value = "1,1024,16384")]
    pub sizes_kib: Vec<usize>,
    /// Forks of each kind per source.
    #[arg(long, default_value_t = 40)]
    pub forks: usize,
}

fn part(path: &str, partitions: u32) -> u32 {
    shared::partition::of_stream(path, partitions)
}

/// The `n`-th path named `{stem}{i}` that is (or is not) in partition `p`.
fn path_in(stem: &str, p: u32, partitions: u32, same: bool, n: usize) -> String {
    (0..)
        .map(|i| format!("/v1/stream/{stem}{i}"))
        .filter(|s| (part(s, partitions) == p) == same)
        .nth(n)
        .expect("paths are endless")
}

fn ms(d: &[Duration], q: f64) -> f64 {
    let mut v: Vec<f64> = d.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

async fn timed_fork(c: &mut Sender, path: &str, from: &str) -> anyhow::Result<Duration> {
    let req = Request::put(path)
        .header("stream-forked-from", from)
        .body(Full::new(Bytes::new()))?;
    let t = Instant::now();
    let status = send(c, req).await?;
    anyhow::ensure!(status == 201, "PUT {path}: {status}");
    Ok(t.elapsed())
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let run = std::process::id();
    let mut c = connect(args.addr).await?;
    println!(
        "{} forks of each kind per source, one at a time, interleaved; {} partitions",
        args.forks, args.partitions
    );
    println!("| source | within p50 | within p99 | across p50 | across p99 | across/within p50 |");
    println!("|---|---|---|---|---|---|");
    for kib in &args.sizes_kib {
        let source = format!("/v1/stream/fr-{run}-source-{kib}");
        let p = part(&source, args.partitions);
        let create = Request::put(source.as_str())
            .header("content-type", "application/octet-stream")
            .body(Full::new(Bytes::new()))?;
        anyhow::ensure!(send(&mut c, create).await? == 201, "creating the source");
        let piece = 1024 * 1024;
        let mut left = kib * 1024;
        while left > 0 {
            let n = left.min(piece);
            let req = Request::post(source.as_str())
                .header("content-type", "application/octet-stream")
                .body(Full::new(Bytes::from(vec![b's'; n])))?;
            anyhow::ensure!(send(&mut c, req).await? < 300, "append to the source");
            left -= n;
        }
        let stem = format!("fr-{run}-{kib}-");
        let (mut within, mut across) = (Vec::new(), Vec::new());
        for i in 0..args.forks {
            let w = path_in(&format!("{stem}w"), p, args.partitions, true, i);
            let a = path_in(&format!("{stem}a"), p, args.partitions, false, i);
            if i % 2 == 0 {
                within.push(timed_fork(&mut c, &w, &source).await?);
                across.push(timed_fork(&mut c, &a, &source).await?);
            } else {
                across.push(timed_fork(&mut c, &a, &source).await?);
                within.push(timed_fork(&mut c, &w, &source).await?);
            }
        }
        for kind in ["w", "a"] {
            let path = path_in(&format!("{stem}{kind}"), p, args.partitions, kind == "w", 0);
            let read = read_all(args.addr, &path).await?;
            anyhow::ensure!(read == kib * 1024, "{path} read back {read} bytes");
        }
        println!(
            "| {kib} KiB | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.1} |",
            ms(&within, 0.5),
            ms(&within, 0.99),
            ms(&across, 0.5),
            ms(&across, 0.99),
            ms(&across, 0.5) / ms(&within, 0.5),
        );
    }
    Ok(())
}
