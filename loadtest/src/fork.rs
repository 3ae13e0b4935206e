//! Fork creation time (`fork-bench`): a fork never copies its source's
//! bytes, so creating one should cost what creating an empty stream costs,
//! whatever the source holds. Two sources:
//! 1. `--sealed-mib` (1 GiB) appended to an origin that seals into s3s-fs,
//!    measured once every chunk is sealed;
//! 2. `--unsealed-mib` (64 MiB) in an origin without object storage, so
//!    all of it stays in the log and the stream's file.
//!
//! For each, `--forks` forks of the source at its end, one at a time, each
//! next to a plain create on the same origin (interleaved, so the machine's
//! drift hits both alike): p50/p99 of both and their ratio, the bytes
//! object storage gained per fork (s3s-fs's folder before and after, once
//! sealing is idle), and one fork read back whole (its length checked).

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;

use crate::append::{connect, send, Sender};
use crate::compare::start;
use crate::seal::{metric, origin_cmd, read_all, start_s3s, stop};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub bin: crate::seal::Binaries,
    /// The sealed source's size, in MiB.
    #[arg(long, default_value_t = 1024)]
    pub sealed_mib: usize,
    /// The unsealed source's size, in MiB.
    #[arg(long, default_value_t = 64)]
    pub unsealed_mib: usize,
    /// Forks (and as many plain creates) per source.
    #[arg(long, default_value_t = 200)]
    pub forks: usize,
}

const MIB: usize = 1 << 20;
const SOURCE: &str = "/v1/stream/fork-bench-source";

/// Bytes of the files under `dir`.
pub(crate) fn folder_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.metadata() {
            Ok(m) if m.is_dir() => folder_bytes(&e.path()),
            Ok(m) => m.len(),
            Err(_) => 0,
        })
        .sum()
}

pub(crate) fn ms(d: &[Duration], q: f64) -> f64 {
    let mut v: Vec<f64> = d.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * q).round() as usize]
}

async fn timed_put(c: &mut Sender, path: &str, from: Option<&str>) -> anyhow::Result<Duration> {
    let mut req = Request::put(path).header("content-type", "application/octet-stream");
    if let Some(from) = from {
        req = req.header("stream-forked-from", from);
    }
    let req = req.body(Full::new(Bytes::new()))?;
    let t = Instant::now();
    let status = send(c, req).await?;
    anyhow::ensure!(status == 201, "PUT {path}: {status}");
    Ok(t.elapsed())
}

/// Fills the source, then times forks against plain creates.
async fn case(
    label: &str,
    args: &Args,
    mut cmd: tokio::process::Command,
    mib: usize,
    objects: Option<&Path>,
) -> anyhow::Result<()> {
    let (child, addr) = start(&mut cmd).await?;
    let mut c = connect(addr).await?;
    let create = Request::put(SOURCE)
        .header("content-type", "application/octet-stream")
        .body(Full::new(Bytes::new()))?;
    anyhow::ensure!(send(&mut c, create).await? == 201, "creating the source");
    let body = Bytes::from(vec![b's'; 4 * MIB]);
    let filled = Instant::now();
    for _ in 0..mib / 4 {
        let req = Request::post(SOURCE)
            .header("content-type", "application/octet-stream")
            .body(Full::new(body.clone()))?;
        anyhow::ensure!(send(&mut c, req).await? < 300, "append to the source");
    }
    if objects.is_some() {
        let chunks = (mib / 4) as f64;
        let deadline = Instant::now() + Duration::from_secs(600);
        while metric(addr, "ds_origin_chunks_sealed_total").await? < chunks {
            anyhow::ensure!(Instant::now() < deadline, "sealing did not finish");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    println!(
        "{label}: source of {mib} MiB ready in {:.1} s",
        filled.elapsed().as_secs_f64()
    );
    let stored_before = objects.map_or(0, folder_bytes);
    let (mut forks, mut creates) = (Vec::new(), Vec::new());
    for i in 0..args.forks {
        let fork = format!("/v1/stream/fork-bench-fork-{i}");
        let plain = format!("/v1/stream/fork-bench-plain-{i}");
        // Alternate which goes first.
        if i % 2 == 0 {
            forks.push(timed_put(&mut c, &fork, Some(SOURCE)).await?);
            creates.push(timed_put(&mut c, &plain, None).await?);
        } else {
            creates.push(timed_put(&mut c, &plain, None).await?);
            forks.push(timed_put(&mut c, &fork, Some(SOURCE)).await?);
        }
    }
    // Anything a fork would have stored is written by now (sealing idle).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stored =
        objects.map(|o| (folder_bytes(o).saturating_sub(stored_before)) / args.forks as u64);
    let read = read_all(addr, "/v1/stream/fork-bench-fork-0").await?;
    anyhow::ensure!(
        read == mib * MIB,
        "a fork read back {read} bytes, not {}",
        mib * MIB
    );
    println!(
        "| {label} | {mib} MiB | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} ms | {:.2} | {} |",
        ms(&forks, 0.5),
        ms(&forks, 0.99),
        ms(&creates, 0.5),
        ms(&creates, 0.99),
        ms(&forks, 0.5) / ms(&creates, 0.5),
        stored.map_or("none configured".to_owned(), |b| format!("{b} B")),
    );
    stop(child).await;
    Ok(())
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("ds-fork-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let s3_root = dir.join("s3");
    let (s3, endpoint) = start_s3s(&args.bin.s3s_fs, &s3_root).await?;
    println!(
        "{} forks per source, each next to a plain create; one at a time",
        args.forks
    );
    println!("| source | size | fork p50 | fork p99 | create p50 | create p99 | fork/create p50 | object bytes per fork |");
    println!("|---|---|---|---|---|---|---|---|");
    let sealed = origin_cmd(
        &args.bin.origin,
        &dir.join("sealed"),
        "s3://chunks/bench",
        &endpoint,
    );
    case("sealed", &args, sealed, args.sealed_mib, Some(&s3_root)).await?;
    let unsealed = origin_cmd(&args.bin.origin, &dir.join("unsealed"), "none", &endpoint);
    case("unsealed", &args, unsealed, args.unsealed_mib, None).await?;
    drop(s3);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
