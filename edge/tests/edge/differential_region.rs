//! The differential test's region setup: two origin processes in object
//! durability on SeaweedFS (one owns the partition, the other forwards to
//! it) and an edge given both; halfway through a seed the owner is killed
//! with `kill -9` and its disk deleted, and the rest of the seed runs
//! against the origin that took over. The origin binary is the one built
//! beside this test binary (`cargo test --workspace` builds it; alone,
//! `cargo build -p origin` first).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::region_roles::serving as serves;
use crate::common::seaweed::Seaweed;
use crate::common::*;

/// One origin process of the region.
pub struct OriginProc {
    child: Child,
    addr: SocketAddr,
    data: PathBuf,
}

impl Drop for OriginProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct RegionStack {
    origins: Vec<OriginProc>,
    /// The origin the test's own requests go to: the follower first, the
    /// one that took over after.
    pub origin_base: String,
    pub edge_base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    _dir: tempfile::TempDir,
    _weed: Seaweed,
}

/// The origin binary built beside this test binary.
fn origin_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("test binary");
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let bin = dir.join("origin");
    assert!(
        bin.exists(),
        "no origin binary at {} (cargo build -p origin first)",
        bin.display()
    );
    bin
}

pub fn spawn(weed: &Seaweed, data: PathBuf, prefix: &str, node: &str) -> OriginProc {
    let mut child = Command::new(origin_binary())
        .args(["--listen", "127.0.0.1:0", "--data"])
        .arg(&data)
        .args(["--object-store", &Seaweed::url(prefix)])
        .args(["--durability", "object", "--node-id", node])
        .args(["--lease", "2s", "--lease-renew", "500ms"])
        .envs(weed.env())
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn origin");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = lines.next().expect("a first line").expect("text");
    let addr = first
        .split_whitespace()
        .find_map(|w| w.strip_prefix("addr=").and_then(|a| a.parse().ok()))
        .unwrap_or_else(|| panic!("no address in {first}"));
    std::thread::spawn(move || for _ in lines.map_while(Result::ok) {});
    OriginProc { child, addr, data }
}

pub fn base(p: &OriginProc) -> String {
    format!("http://{}", p.addr)
}

impl RegionStack {
    pub async fn start(seed: u64) -> RegionStack {
        let weed = Seaweed::start();
        let dir = tempfile::tempdir().expect("tempdir");
        let prefix = format!("differential-{seed}");
        let a = spawn(&weed, dir.path().join("a"), &prefix, "a");
        let http = client();
        wait_until(&http, &base(&a), true).await;
        let b = spawn(&weed, dir.path().join("b"), &prefix, "b");
        wait_until(&http, &base(&b), false).await;
        let mut config = edge::config::EdgeConfig::new(base(&a).parse().expect("url"), 64 << 20)
            .expect("config");
        config.more_origins = vec![base(&b).parse().expect("url")];
        let (edge_addr, _, stop, _) = serve_edge(config).await;
        RegionStack {
            origin_base: base(&b),
            edge_base: format!("http://{edge_addr}"),
            origins: vec![a, b],
            stop: Some(stop),
            _dir: dir,
            _weed: weed,
        }
    }

    /// `kill -9` of the owner and its disk deleted; returns once the other
    /// origin serves and the edge reaches it.
    pub async fn take_over(&mut self, http: &reqwest::Client) -> Duration {
        let losses = self.edge_metric(http, "ds_edge_feed_losses_total").await;
        let mut owner = self.origins.remove(0);
        let killed = Instant::now();
        owner.child.kill().expect("kill -9");
        let _ = owner.child.wait();
        std::fs::remove_dir_all(&owner.data).expect("delete the owner's disk");
        wait_until(http, &self.origin_base, true).await;
        let took = killed.elapsed();
        // The edge moves on from the dead origin at its first failed
        // connection (a request with a body fails with it: a bodiless one
        // goes to the next origin at once).
        for _ in 0..3 {
            let _ = http.get(format!("{}/healthz", self.edge_base)).send().await;
            let _ = http
                .head(format!("{}/v1/stream/differential-warm-up", self.edge_base))
                .send()
                .await;
        }
        // The new owner answers the feed where the old one left it
        // (decision 0017): the edge follows it again with nothing lost.
        let deadline = Instant::now() + Duration::from_secs(60);
        while self.edge_metric(http, "ds_edge_feed_live").await != 1 {
            assert!(Instant::now() < deadline, "the edge's feed never came back");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert_eq!(
            self.edge_metric(http, "ds_edge_feed_losses_total").await,
            losses,
            "the edge lost its invalidation feed across the takeover"
        );
        took
    }

    async fn edge_metric(&self, http: &reqwest::Client, name: &str) -> u64 {
        let text = http
            .get(format!("{}/metrics", self.edge_base))
            .send()
            .await
            .expect("the edge's metrics")
            .text()
            .await
            .expect("text");
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in the edge's metrics"))
    }
}

impl Drop for RegionStack {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// Until the origin at `base` serves (`owner`) or follows.
pub async fn wait_until(http: &reqwest::Client, base: &str, owner: bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while serves(http, base).await != Some(owner) {
        assert!(Instant::now() < deadline, "{base} never got its role");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
