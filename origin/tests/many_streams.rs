//! Many streams on one origin under a low descriptor limit: it stays up,
//! its open descriptors stay under the limit, a SIGKILL restart recovers
//! every stream byte-exact, and files open only on demand.
//!
//! The scale CI affords (`MANY_STREAMS`, default 20,000 streams, under
//! `ulimit -n 256`); the million-stream run is `ds-load streams` (see
//! `loadtest/RESULTS.md`). A small checkpoint size and log retention make
//! the run pass through checkpoints, cleaning (small streams promoted into
//! their own files) and segment deletion.

use crate::common;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::process::{count_files, Proc};
use futures::StreamExt;

const NOFILE: u32 = 256;

fn spawn_origin(data: &Path) -> Proc {
    let limit = format!("--nofile={NOFILE}:{NOFILE}");
    let args: [&std::ffi::OsStr; 8] = [
        "--data".as_ref(),
        data.as_os_str(),
        "--checkpoint-bytes".as_ref(),
        "512KiB".as_ref(),
        "--log-retain-bytes".as_ref(),
        "6MiB".as_ref(),
        "--object-store".as_ref(),
        "none".as_ref(),
    ];
    common::process::spawn(&["prlimit", &limit], &args)
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count())
}

/// The deterministic body of stream `i`'s `n`th write.
fn body(i: usize, n: usize) -> String {
    format!(
        "stream {i} write {n} {}\n",
        "x".repeat((i * 7 + n * 13) % 90)
    )
}

fn stream_count() -> usize {
    std::env::var("MANY_STREAMS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000)
}

/// Runs `f` for every stream index, `concurrency` at a time.
async fn for_each<F, Fut>(n: usize, concurrency: usize, f: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    futures::stream::iter(0..n)
        .map(f)
        .buffer_unordered(concurrency)
        .collect::<Vec<()>>()
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_under_a_low_descriptor_limit_survive_sigkill() {
    let n = stream_count();
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let proc = spawn_origin(dir.path());
    let pid = proc.child.id();
    let base = format!("http://{}", proc.addr);

    // Descriptors are sampled all along.
    let peak = Arc::new(AtomicUsize::new(0));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (Arc::clone(&peak), Arc::clone(&sampling));
        std::thread::spawn(move || {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(open_fds(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(20));
            }
        })
    };

    let url = |i: usize| format!("{base}/v1/stream/many/s{i}");
    for_each(n, 48, |i| {
        let (client, url) = (client.clone(), url(i));
        async move {
            let r = client
                .put(&url)
                .header("content-type", "text/plain")
                .body(body(i, 0))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201, "create {i}");
        }
    })
    .await;
    // The creates' log (about 4 MB for 20,000 streams) is within the
    // retention: every stream's bytes are still only in the log.
    let files = count_files(&dir.path().join("streams"));
    if n <= 20_000 {
        assert_eq!(
            files, 0,
            "small streams stay in the log: {files} stream files"
        );
    }
    for round in 1..=2 {
        for_each(n, 48, |i| {
            let (client, url) = (client.clone(), url(i));
            async move {
                let r = client
                    .post(&url)
                    .header("content-type", "text/plain")
                    .body(body(i, round))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 204, "append {round} to {i}");
            }
        })
        .await;
    }
    sampling.store(false, Ordering::Relaxed);
    sampler.join().unwrap();
    let peak = peak.load(Ordering::Relaxed);
    assert!(
        peak < NOFILE as usize,
        "open descriptors peaked at {peak} (limit {NOFILE})"
    );
    // The appends took the log past its retention: cleaning promoted the
    // streams of the oldest segments into their own files.
    let files = count_files(&dir.path().join("streams"));
    assert!(
        files > 0,
        "cleaning the log promoted streams into their own files"
    );

    drop(proc); // SIGKILL
    let proc = spawn_origin(dir.path());
    let base = format!("http://{}", proc.addr);
    // Recovered once it answers; it opened no stream file for that.
    let r = client.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let at_start = open_fds(proc.child.id());
    assert!(
        at_start < 48,
        "a restart opens no stream file: {at_start} descriptors open"
    );
    let url = |i: usize| format!("{base}/v1/stream/many/s{i}");
    let wrong = Arc::new(AtomicUsize::new(0));
    for_each(n, 48, |i| {
        let (client, url, wrong) = (client.clone(), url(i), Arc::clone(&wrong));
        async move {
            let r = client.get(format!("{url}?offset=-1")).send().await.unwrap();
            assert_eq!(r.status(), 200, "read {i}");
            let got = r.text().await.unwrap();
            let expected: String = (0..=2).map(|k| body(i, k)).collect();
            if got != expected {
                wrong.fetch_add(1, Ordering::Relaxed);
                eprintln!("stream {i}: {got:?} != {expected:?}");
            }
        }
    })
    .await;
    assert_eq!(wrong.load(Ordering::Relaxed), 0, "streams read back wrong");
    let after = open_fds(proc.child.id());
    assert!(
        after < NOFILE as usize,
        "{after} descriptors open after the reads (limit {NOFILE})"
    );
    eprintln!("{n} streams: peak {peak} descriptors, {files} stream files, {at_start} open after the restart, {after} after its reads");
}
