//! `ds` against a region: two origins in object durability on one
//! SeaweedFS bucket, in process as the origin binary runs them. The first
//! owns the partition; the second follows and forwards. A producer killed
//! with `kill -9` mid-file through the follower, rerun, leaves each line
//! once, read back from either origin; a tail through the follower sees
//! an append made at the owner.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use origin::server::region::RegionOrigin;
use tokio::sync::oneshot;

use crate::common::seaweed::Seaweed;
use crate::common::{name, numbered_lines, Servers, WAIT};

/// One origin of the region, serving until dropped.
struct RegionNode {
    url: String,
    stop: Option<oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
}

impl RegionNode {
    async fn start(weed: &Seaweed, prefix: &str, node: &str) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let url = Seaweed::url(prefix);
        let data = dir.path().to_str().expect("a text path").to_owned();
        let cli = origin::config::Cli::parse_from([
            "origin",
            "--data",
            &data,
            "--object-store",
            &url,
            "--durability",
            "object",
            "--node-id",
            node,
        ]);
        let mut store = cli.store_config();
        store.object_store_settings = weed.settings();
        store.region.url = format!("http://{addr}");
        let origin = RegionOrigin::new(store, cli.http_config(), cli.membership_config())
            .expect("a region origin");
        let (stop, stopped) = oneshot::channel::<()>();
        tokio::spawn(Arc::clone(&origin).serve(listener, async move {
            let _ = stopped.await;
        }));
        RegionNode {
            url: format!("http://{addr}"),
            stop: Some(stop),
            _dir: dir,
        }
    }
}

impl Drop for RegionNode {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// Runs `ds` until it exits 0 (a region origin answers 503 while it joins).
async fn until_ok(s: &Servers, url: &str, args: &[&str]) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let ran = s.run(url, args).await;
        if ran.code == 0 {
            return ran.text();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "ds {args:?} at {url}: {}",
            ran.stderr
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_producer_killed_mid_file_in_a_region_appends_each_line_once() {
    // The loopback origin and edge of `Servers` are not used beyond `ds`'s
    // setup (its state folder); the region is two origins of its own.
    let s = Servers::start().await;
    // Blocks this worker while it starts (as the origin's region tests do).
    let weed = Seaweed::start();
    let prefix = name("cli-region");
    let owner = RegionNode::start(&weed, &prefix, "a").await;
    let stream = name("region");
    until_ok(&s, &owner.url, &["create", &stream, "-t", "text/plain"]).await;
    let follower = RegionNode::start(&weed, &prefix, "b").await;
    until_ok(&s, &follower.url, &["head", &stream]).await;

    // A tail through the follower sees what the owner takes.
    let mut tail = s
        .ds(&follower.url, &["read", &stream, "--follow"])
        .spawn()
        .expect("ds read");

    let dir = tempfile::tempdir().unwrap();
    const LINES: usize = 300;
    let (file, text) = numbered_lines(dir.path(), LINES);
    let line_len = (text.len() / LINES) as u64;
    let args = [
        "append",
        &stream,
        "--lines",
        "--file",
        file.to_str().unwrap(),
        "--producer",
        "importer",
    ];
    let path = format!("/v1/stream/{stream}");
    let length = |url: String| {
        let path = path.clone();
        async move {
            let r = reqwest::Client::new()
                .head(format!("{url}{path}"))
                .send()
                .await
                .expect("HEAD");
            let next = r.headers()["stream-next-offset"]
                .to_str()
                .unwrap()
                .to_owned();
            u64::from_str_radix(&next, 16).unwrap()
        }
    };
    let mut child = s.ds(&follower.url, &args).spawn().expect("ds append");
    let deadline = tokio::time::Instant::now() + WAIT;
    while length(owner.url.clone()).await < 40 * line_len {
        assert!(
            tokio::time::Instant::now() < deadline,
            "40 lines within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    child.start_kill().expect("SIGKILL");
    child.wait().await.expect("reaped");
    assert!(length(owner.url.clone()).await < text.len() as u64);
    let rerun = s.run(&follower.url, &args).await;
    rerun.ok();

    for url in [&owner.url, &follower.url] {
        let read = s.run(url, &["read", &stream, "--offset", "-1"]).await;
        assert_eq!(read.code, 0, "{}", read.stderr);
        assert!(
            read.stdout == text,
            "each line once, in order, read at {url}"
        );
    }
    // The tail got every line too, once.
    let mut out = tail.stdout.take().expect("stdout");
    let mut seen = Vec::new();
    crate::read_until(
        &mut out,
        &mut seen,
        format!("line-{:06}\n", LINES - 1).as_bytes(),
    )
    .await;
    assert!(seen == text, "the follower's tail holds each line once");
    tail.start_kill().expect("kill");
    tail.wait().await.expect("reaped");
    drop(follower);
    drop(owner);
}
