//! Rollback time (`rollback-bench`, decision 0029): a rollback forks the
//! replaced incarnation at the point and copies nothing, so it should cost
//! the same whatever the stream holds. Two streams on one origin sealing
//! into s3s-fs, `--small-mib` (1 MiB) and `--large-mib` (4 GiB), filled and
//! sealed; then `--rollbacks` rollbacks of each, interleaved (so the
//! machine's drift hits both alike), each one byte below the last point:
//! p50/p99 of both and their ratio, and the bytes object storage gained
//! (s3s-fs's folder before and after, once sealing is idle). The large
//! stream is read back whole at the end (its length checked).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;

use crate::append::{connect, send, with_host, Sender};
use crate::compare::start;
use crate::fork::{folder_bytes, ms};
use crate::seal::{metric, origin_cmd, read_all, start_s3s, stop};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub bin: crate::seal::Binaries,
    /// The small stream's size, in MiB.
    #[arg(long, default_value_t = 1)]
    pub small_mib: usize,
    /// The large stream's size, in MiB.
    #[arg(long, default_value_t = 4096)]
    pub large_mib: usize,
    /// Rollbacks of each stream.
    #[arg(long, default_value_t = 200)]
    pub rollbacks: usize,
}

const MIB: usize = 1 << 20;

async fn fill(c: &mut Sender, path: &str, mib: usize) -> anyhow::Result<()> {
    let create = Request::put(path)
        .header("content-type", "application/octet-stream")
        .body(Full::new(Bytes::new()))?;
    anyhow::ensure!(send(c, create).await? == 201, "creating {path}");
    let step = mib.min(4);
    let body = Bytes::from(vec![b's'; step * MIB]);
    let mut done = 0;
    while done < mib / step {
        let req = Request::post(path)
            .header("content-type", "application/octet-stream")
            .body(Full::new(body.clone()))?;
        match send(c, req).await? {
            s if s < 300 => done += 1,
            // Sealing behind (`--max-unsealed`): wait for it, as a client does.
            503 => tokio::time::sleep(Duration::from_millis(200)).await,
            s => anyhow::bail!("append to {path}: {s}"),
        }
    }
    Ok(())
}

async fn incarnation(c: &mut Sender, path: &str) -> anyhow::Result<String> {
    let req = with_host(Request::head(path).body(Full::new(Bytes::new()))?);
    c.ready().await?;
    let resp = c.send_request(req).await?;
    let token = resp.headers()["stream-incarnation"].to_str()?.to_owned();
    resp.into_body().collect().await?;
    Ok(token)
}

/// One rollback of `path` (incarnation `token`) to `to`: its time and the
/// new incarnation.
async fn rollback(
    c: &mut Sender,
    path: &str,
    token: &str,
    to: u64,
) -> anyhow::Result<(Duration, String)> {
    let req = with_host(
        Request::post(format!("{path}/incarnation/{token}/restore"))
            .header("stream-restore-offset", format!("{to:016x}"))
            .body(Full::new(Bytes::new()))?,
    );
    let t = Instant::now();
    c.ready().await?;
    let resp = c.send_request(req).await?;
    let status = resp.status().as_u16();
    let token = resp
        .headers()
        .get("stream-incarnation")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    resp.into_body().collect().await?;
    let took = t.elapsed();
    anyhow::ensure!(status == 200, "rollback of {path} to {to}: {status}");
    Ok((took, token))
}

async fn sealed(addr: SocketAddr, chunks: f64) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(1800);
    while metric(addr, "ds_origin_chunks_sealed_total").await? < chunks {
        anyhow::ensure!(Instant::now() < deadline, "sealing did not finish");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("ds-rollback-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let s3_root = dir.join("s3");
    let (s3, endpoint) = start_s3s(&args.bin.s3s_fs, &s3_root).await?;
    let mut cmd = origin_cmd(
        &args.bin.origin,
        &dir.join("origin"),
        "s3://chunks/bench",
        &endpoint,
    );
    let (child, addr) = start(&mut cmd).await?;
    let mut c = connect(addr).await?;
    let (small, large) = ("/v1/stream/rollback-small", "/v1/stream/rollback-large");
    let filled = Instant::now();
    fill(&mut c, small, args.small_mib).await?;
    fill(&mut c, large, args.large_mib).await?;
    sealed(addr, ((args.small_mib + args.large_mib) / 4) as f64).await?;
    println!(
        "streams of {} MiB and {} MiB filled and sealed in {:.1} s",
        args.small_mib,
        args.large_mib,
        filled.elapsed().as_secs_f64()
    );
    let stored_before = folder_bytes(&s3_root);
    let mut tokens = [
        incarnation(&mut c, small).await?,
        incarnation(&mut c, large).await?,
    ];
    let mut ends = [(args.small_mib * MIB) as u64, (args.large_mib * MIB) as u64];
    let (mut took_small, mut took_large) = (Vec::new(), Vec::new());
    for i in 0..args.rollbacks {
        // Alternate which goes first.
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            let path = [small, large][k];
            ends[k] -= 1;
            let (took, token) = rollback(&mut c, path, &tokens[k], ends[k]).await?;
            tokens[k] = token;
            [&mut took_small, &mut took_large][k].push(took);
        }
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let stored = folder_bytes(&s3_root).saturating_sub(stored_before);
    let read = read_all(addr, large).await?;
    anyhow::ensure!(
        read as u64 == ends[1],
        "the large stream read back {read} bytes, not {}",
        ends[1]
    );
    println!(
        "{} rollbacks of each, interleaved, one at a time",
        args.rollbacks
    );
    println!("| stream | rollback p50 | rollback p99 |");
    println!("|---|---|---|");
    for (label, mib, took) in [
        ("small", args.small_mib, &took_small),
        ("large", args.large_mib, &took_large),
    ] {
        println!(
            "| {label} ({mib} MiB) | {:.2} ms | {:.2} ms |",
            ms(took, 0.5),
            ms(took, 0.99)
        );
    }
    println!(
        "large/small p50: {:.2}; object storage gained {stored} B over {} rollbacks",
        ms(&took_large, 0.5) / ms(&took_small, 0.5),
        2 * args.rollbacks
    );
    stop(child).await;
    drop(s3);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
