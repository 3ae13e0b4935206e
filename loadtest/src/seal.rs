//! Sealing under load, and catch-up from object storage, in one run:
//! 1. appends with sealing off (`--object-store none`): the baseline p99;
//! 2. the same appends into an origin that seals into s3s-fs: the append
//!    p99 while chunks are sealed, and the seal throughput (MB/s stored);
//! 3. a 64 MiB stream, sealed and dropped from local disk, read from the
//!    start after a restart (cold: every chunk from s3s-fs) and again (warm:
//!    from the origin's chunk cache).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::append::{self, connect, send};
use crate::compare::start;

/// The binaries a benchmark with object storage starts.
#[derive(clap::Args)]
pub struct Binaries {
    /// The origin binary to start.
    #[arg(long, default_value = "target/release/origin")]
    pub origin: PathBuf,
    /// The s3s-fs binary.
    #[arg(long, default_value = "s3s-fs")]
    pub s3s_fs: PathBuf,
}

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub bin: Binaries,
    #[command(flatten)]
    pub workload: append::Workload,
    /// Size of the catch-up stream, in MiB.
    #[arg(long, default_value_t = 64)]
    pub catchup_mib: usize,
}

const MIB: usize = 1 << 20;

pub(crate) async fn start_s3s(bin: &Path, root: &Path) -> anyhow::Result<(Child, String)> {
    std::fs::create_dir_all(root.join("chunks"))?;
    let mut child = Command::new(bin)
        .args(["--host", "127.0.0.1", "--port", "0"])
        .args(["--access-key", "bench", "--secret-key", "bench-secret"])
        .arg(root)
        .env("NO_COLOR", "1")
        .env("RUST_LOG", "info")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?;
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let endpoint = loop {
        let line = lines
            .next_line()
            .await?
            .ok_or_else(|| anyhow::anyhow!("s3s-fs printed no address"))?;
        if let Some(at) = line.find("http://") {
            break line[at..].trim().to_owned();
        }
    };
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    Ok((child, endpoint))
}

pub(crate) fn origin_cmd(bin: &Path, data: &Path, store: &str, endpoint: &str) -> Command {
    let mut cmd = Command::new(bin);
    cmd.args(["--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .args(["--object-store", store])
        .env("AWS_ENDPOINT_URL", endpoint)
        .env("AWS_ACCESS_KEY_ID", "bench")
        .env("AWS_SECRET_ACCESS_KEY", "bench-secret")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ALLOW_HTTP", "true")
        .env("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", "false");
    cmd
}

pub(crate) async fn metric(addr: SocketAddr, name: &str) -> anyhow::Result<f64> {
    let mut c = connect(addr).await?;
    let resp = c
        .send_request(Request::get("/metrics").body(Full::new(Bytes::new()))?)
        .await?;
    let text = String::from_utf8(resp.into_body().collect().await?.to_bytes().to_vec())?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
        .unwrap_or(0.0))
}

pub(crate) async fn stop(mut child: Child) {
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
    let _ = child.wait().await;
}

/// Reads a stream from the start to its end; returns the bytes read.
pub(crate) async fn read_all(addr: SocketAddr, path: &str) -> anyhow::Result<usize> {
    let mut c = connect(addr).await?;
    let mut offset = "-1".to_owned();
    let mut total = 0;
    loop {
        let req = Request::get(format!("{path}?offset={offset}&max_bytes={}", 8 * MIB))
            .body(Full::new(Bytes::new()))?;
        c.ready().await?;
        let resp = c.send_request(req).await?;
        anyhow::ensure!(resp.status() == 200, "read at {offset}: {}", resp.status());
        let h = resp.headers();
        let done = h.contains_key("stream-up-to-date");
        offset = h
            .get("stream-next-offset")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned();
        total += resp.into_body().collect().await?.to_bytes().len();
        if done {
            return Ok(total);
        }
    }
}

/// The benchmark's script, step by step as its report reads (long by
/// design: split, its steps would only pass their state along).
pub async fn run(args: Args) -> anyhow::Result<()> {
    let root = std::env::temp_dir().join(format!("ds-seal-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let (s3s, endpoint) = start_s3s(&args.bin.s3s_fs, &root.join("s3")).await?;
    let w = &args.workload;
    println!(
        "workload: {} streams x 1 closed-loop writer, {} B appends, {} s measured after {} s warm-up; durable (fdatasync); object storage: s3s-fs on loopback",
        w.streams, w.body, w.seconds, w.warmup
    );
    let load = |addr| append::Args {
        addr,
        prefix: "/v1/stream/seal-".into(),
        workload: w.clone(),
        producer: false,
        create: true,
        label: String::new(),
    };

    let (plain, addr) = start(&mut origin_cmd(
        &args.bin.origin,
        &root.join("a"),
        "none",
        &endpoint,
    ))
    .await?;
    let base = append::run(&load(addr)).await?;
    println!("{}", base.line("appends, sealing off"));
    stop(plain).await;

    let (sealing, addr) = start(&mut origin_cmd(
        &args.bin.origin,
        &root.join("b"),
        "s3://chunks/bench",
        &endpoint,
    ))
    .await?;
    let started = Instant::now();
    let with = append::run(&load(addr)).await?;
    let load_time = started.elapsed();
    let sealed_during = metric(addr, "ds_origin_sealed_bytes_total").await?;
    println!("{}", with.line("appends, sealing into s3s-fs"));
    while metric(addr, "ds_origin_unsealed_bytes").await? > 0.0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let all_time = started.elapsed();
    let sealed = metric(addr, "ds_origin_sealed_bytes_total").await?;
    println!(
        "sealed while appending: {:.0} MB/s ({:.0} MB in {:.1} s); including the catch-up after the load: {:.0} MB/s ({:.0} MB in {:.1} s)",
        sealed_during / 1e6 / load_time.as_secs_f64(),
        sealed_during / 1e6,
        load_time.as_secs_f64(),
        sealed / 1e6 / all_time.as_secs_f64(),
        sealed / 1e6,
        all_time.as_secs_f64()
    );
    println!(
        "append p99 with sealing / without: {:.2}x ({:.2} ms / {:.2} ms); throughput {:.0} / {:.0} req/s",
        with.p99_us as f64 / base.p99_us.max(1) as f64,
        with.p99_us as f64 / 1000.0,
        base.p99_us as f64 / 1000.0,
        with.rps(),
        base.rps()
    );

    // Catch-up of a sealed stream: cold after a restart, then warm.
    let path = "/v1/stream/catchup";
    let mut c = connect(addr).await?;
    let put = Request::put(path)
        .header("content-type", "application/octet-stream")
        .body(Full::new(Bytes::new()))?;
    anyhow::ensure!(send(&mut c, put).await? < 300, "create the catch-up stream");
    let chunk = Bytes::from(vec![b'c'; MIB]);
    for _ in 0..args.catchup_mib {
        let post = Request::post(path)
            .header("content-type", "application/octet-stream")
            .body(Full::new(chunk.clone()))?;
        anyhow::ensure!(
            send(&mut c, post).await? < 300,
            "append to the catch-up stream"
        );
    }
    let close = Request::post(path)
        .header("stream-closed", "true")
        .body(Full::new(Bytes::new()))?;
    send(&mut c, close).await?;
    while metric(addr, "ds_origin_unsealed_bytes").await? > 0.0 {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(c);
    stop(sealing).await;
    let (sealing, addr) = start(&mut origin_cmd(
        &args.bin.origin,
        &root.join("b"),
        "s3://chunks/bench",
        &endpoint,
    ))
    .await?;
    for label in ["cold (chunks from s3s-fs)", "warm (chunk cache)"] {
        let t = Instant::now();
        let n = read_all(addr, path).await?;
        let secs = t.elapsed().as_secs_f64();
        anyhow::ensure!(n == args.catchup_mib * MIB, "read {n} bytes");
        println!(
            "catch-up of {} MiB, {label}: {:.0} MB/s ({:.3} s)",
            args.catchup_mib,
            n as f64 / 1e6 / secs,
            secs
        );
    }
    println!(
        "chunk cache: {} misses, {} hits",
        metric(addr, "ds_origin_chunk_cache_misses_total").await?,
        metric(addr, "ds_origin_chunk_cache_hits_total").await?
    );
    stop(sealing).await;
    drop(s3s);
    let _ = std::fs::remove_dir_all(&root);
    Ok(())
}
