//! Restart time: fill an origin with a given amount of log, stop it (SIGKILL,
//! the worst case, and SIGTERM), start it again, and time how long it takes
//! until it answers.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use tokio::process::Command;

use crate::append::{connect, send};
use crate::compare::start;

/// Where the streams are.
const PREFIX: &str = "/v1/stream/restart-";

#[derive(clap::Args)]
pub struct Args {
    #[arg(long, default_value = "target/release/origin")]
    pub origin: PathBuf,
    /// Total bytes appended before the restart.
    #[arg(long, default_value_t = 1 << 30)]
    pub bytes: u64,
    #[arg(long, default_value_t = 16)]
    pub streams: usize,
    /// Size of each append.
    #[arg(long, default_value_t = 1 << 20)]
    pub body: usize,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let data = std::env::temp_dir().join(format!("ds-restart-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&data);
    let origin_cmd = || {
        let mut c = Command::new(&args.origin);
        c.args(["--listen", "127.0.0.1:0", "--data"]).arg(&data);
        c
    };
    let (mut child, addr) = start(&mut origin_cmd()).await?;
    let filled = Instant::now();
    let per_stream = args.bytes / args.streams as u64;
    let body = Bytes::from(vec![b'z'; args.body]);
    let mut tasks = Vec::new();
    for s in 0..args.streams {
        let body = body.clone();
        tasks.push(tokio::spawn(async move {
            let mut sender = connect(addr).await?;
            // Under the default prefix: the account `default`, open without
            // a key (a path such as `/restart/s0` names the account
            // `restart`, which needs one).
            let path = format!("{PREFIX}{s}");
            send(
                &mut sender,
                Request::put(&path)
                    .header("content-type", "application/octet-stream")
                    .body(Full::new(Bytes::new()))?,
            )
            .await?;
            let mut written = 0;
            while written < per_stream {
                let req = Request::post(&path)
                    .header("content-type", "application/octet-stream")
                    .body(Full::new(body.clone()))?;
                anyhow::ensure!(send(&mut sender, req).await? < 300, "append failed");
                written += body.len() as u64;
            }
            anyhow::Ok(written)
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    println!(
        "filled {:.2} GiB in {} streams in {:.1} s ({:.0} MB/s durable)",
        total as f64 / (1u64 << 30) as f64,
        args.streams,
        filled.elapsed().as_secs_f64(),
        total as f64 / 1e6 / filled.elapsed().as_secs_f64()
    );

    for (how, graceful) in [("SIGKILL", false), ("SIGTERM", true)] {
        if graceful {
            let pid = child.id().expect("pid");
            std::process::Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status()?;
        } else {
            child.start_kill()?;
        }
        child.wait().await?;
        let began = Instant::now();
        let (next, addr) = start(&mut origin_cmd()).await?;
        // Ready = answers a HEAD on the last stream with its full length.
        let mut sender = connect(addr).await?;
        let req =
            Request::head(format!("{PREFIX}{}", args.streams - 1)).body(Full::new(Bytes::new()))?;
        let status = send(&mut sender, req).await?;
        let took = began.elapsed();
        anyhow::ensure!(status == 200, "HEAD after restart: {status}");
        println!(
            "restart after {how}: {:.0} ms until the first answer",
            took.as_secs_f64() * 1000.0
        );
        child = next;
    }
    let _ = child.start_kill();
    let _ = child.wait().await;
    let _ = std::fs::remove_dir_all(&data);
    tokio::time::sleep(Duration::from_millis(10)).await;
    Ok(())
}
