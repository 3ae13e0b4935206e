//! The origin binary in object durability on SeaweedFS: `kill -9` and the
//! data directory deleted lose no acknowledged append; another origin on
//! the same bucket and prefix follows the live owner (forwarding) and
//! takes a dead one's partition over.

use std::ffi::OsStr;
use std::path::Path;

use crate::common::process::{spawn_with_env, Proc};
use crate::common::seaweed::Seaweed;

pub fn start(weed: &Seaweed, data: &Path, prefix: &str, node: &str) -> Proc {
    start_with(weed, data, prefix, node, &[])
}

pub fn start_with(weed: &Seaweed, data: &Path, prefix: &str, node: &str, more: &[&str]) -> Proc {
    let url = Seaweed::url(prefix);
    spawn_with_env(&[], &region_args(data, &url, node, more), &weed.env())
}

/// The arguments of a region origin: its data, the bucket's `url`, object
/// durability, its `node` id, then `more`.
pub fn region_args<'a>(
    data: &'a Path,
    url: &'a str,
    node: &'a str,
    more: &'a [&'a str],
) -> Vec<&'a OsStr> {
    let mut args: Vec<&OsStr> = vec![
        OsStr::new("--data"),
        data.as_os_str(),
        OsStr::new("--object-store"),
        OsStr::new(url),
        OsStr::new("--durability"),
        OsStr::new("object"),
        OsStr::new("--node-id"),
        OsStr::new(node),
    ];
    args.extend(more.iter().map(OsStr::new));
    // DS_TEST_REGION_WAL=partition runs a test's region with a WAL per
    // partition (unless the test chose); unset, the binary's default.
    if let Some(layout) = region_wal() {
        if !more.contains(&"--region-wal") {
            args.extend([OsStr::new("--region-wal"), OsStr::new(layout)]);
        }
    }
    args
}

/// The layout `DS_TEST_REGION_WAL` asks for, if any.
pub fn region_wal() -> Option<&'static str> {
    static LAYOUT: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    LAYOUT
        .get_or_init(|| std::env::var("DS_TEST_REGION_WAL").ok())
        .as_deref()
}

/// The layout a test's region has: `DS_TEST_REGION_WAL`'s, or the one
/// `--region-wal auto` gives a new bucket (one WAL per origin).
pub fn layout() -> &'static str {
    region_wal().unwrap_or("origin")
}

/// A key made through the admin API at `base` (admin token
/// `admin-secret`) from `body`: the record, with the secret as `key`.
pub async fn make_key(
    client: &reqwest::Client,
    base: &str,
    body: &'static str,
) -> serde_json::Value {
    client
        .post(format!("{base}/_admin/keys"))
        .bearer_auth("admin-secret")
        .body(body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

pub async fn wait_serving(client: &reqwest::Client, base: &str) {
    for _ in 0..600 {
        if client.get(format!("{base}/healthz")).send().await.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the origin at {base} did not serve");
}

/// Until the origin at `base` serves the partition itself.
pub async fn wait_owner(client: &reqwest::Client, base: &str) {
    for _ in 0..600 {
        if serving(client, base).await == Some(true) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the origin at {base} did not take the partition");
}

pub use crate::common::region_roles::serving;

/// Creates a binary stream at `url`; returns the status.
pub async fn create(client: &reqwest::Client, url: &str) -> reqwest::StatusCode {
    client
        .put(url)
        .header("content-type", "application/octet-stream")
        .send()
        .await
        .unwrap()
        .status()
}

/// An edge in this process in front of `origins` (the first in use), until
/// dropped.
pub struct InProcessEdge {
    pub base: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl InProcessEdge {
    pub async fn start(origins: &[String]) -> InProcessEdge {
        let mut config =
            edge::config::EdgeConfig::new(origins[0].parse().unwrap(), 64 << 20).unwrap();
        config.more_origins = origins[1..].iter().map(|o| o.parse().unwrap()).collect();
        let edge = edge::server::Edge::new(config).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(edge.serve(listener, async move {
            let _ = stopped.await;
        }));
        InProcessEdge {
            base,
            stop: Some(stop),
        }
    }
}

impl Drop for InProcessEdge {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

pub async fn append(
    client: &reqwest::Client,
    url: &str,
    seq: u64,
    body: String,
) -> reqwest::StatusCode {
    client
        .post(url)
        .header("content-type", "application/octet-stream")
        .header("producer-id", "writer")
        .header("producer-epoch", "0")
        .header("producer-seq", seq.to_string())
        .body(body)
        .send()
        .await
        .unwrap()
        .status()
}

pub async fn read_all(client: &reqwest::Client, url: &str) -> String {
    let resp = client.get(format!("{url}?offset=-1")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_machine_and_its_disk_loses_no_acknowledged_append() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    let a = start(&weed, &first, "lost-disk", "a");
    let base = format!("http://{}", a.addr);
    wait_owner(&client, &base).await;
    let stream = format!("{base}/v1/stream/kept");
    assert_eq!(create(&client, &stream).await, 201);
    let mut acknowledged = String::new();
    for seq in 0..50 {
        let body = format!("[{seq:03}]");
        let status = append(&client, &stream, seq, body.clone()).await;
        assert!(status.is_success(), "append {seq}: {status}");
        acknowledged.push_str(&body);
    }
    // The machine goes, and its disk with it.
    drop(a);
    std::fs::remove_dir_all(&first).unwrap();

    let second = dir.path().join("second");
    let b = start(&weed, &second, "lost-disk", "a");
    let base = format!("http://{}", b.addr);
    wait_owner(&client, &base).await;
    let stream = format!("{base}/v1/stream/kept");
    assert_eq!(read_all(&client, &stream).await, acknowledged);
    // A retry of the last append is known (producer state moved too).
    let again = append(&client, &stream, 49, "[049]".into()).await;
    assert_eq!(again, 204, "a duplicate is answered as one");
    let status = append(&client, &stream, 50, "[050]".into()).await;
    assert!(status.is_success());
    acknowledged.push_str("[050]");

    // Another origin on the bucket follows the live owner: it answers
    // every stream by forwarding, writes included.
    let c = start(&weed, &dir.path().join("third"), "lost-disk", "c");
    let base_c = format!("http://{}", c.addr);
    wait_serving(&client, &base_c).await;
    let stream_c = format!("{base_c}/v1/stream/kept");
    let mut forwarded = None;
    for _ in 0..200 {
        if serving(&client, &base_c).await == Some(false) {
            let status = append(&client, &stream_c, 51, "[051]".into()).await;
            if status == 200 {
                forwarded = Some(status);
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(
        forwarded,
        Some(reqwest::StatusCode::OK),
        "c forwards to the owner"
    );
    acknowledged.push_str("[051]");
    assert_eq!(read_all(&client, &stream_c).await, acknowledged);
    assert_eq!(read_all(&client, &stream).await, acknowledged);
    assert_eq!(serving(&client, &base).await, Some(true));
    let metrics = crate::common::metrics_at(&client, &base_c).await;
    assert!(crate::common::metric_in(&metrics, "ds_origin_region_forwarded_total").unwrap() >= 2);
}

/// Commits pipelined: with every put made 20 ms slower, puts overlap (their
/// summed time exceeds the wall time), and `kill -9` with puts in flight
/// and the disk deleted still keeps every acknowledged append, in order,
/// with at most the one unanswered append of each writer after them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_commits_keep_every_acknowledged_append_in_order() {
    const WRITERS: usize = 20;
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    let slow = ["--object-put-delay", "20ms"];
    let a = start_with(&weed, &first, "pipelined", "a", &slow);
    let base = format!("http://{}", a.addr);
    wait_owner(&client, &base).await;
    for w in 0..WRITERS {
        assert_eq!(
            create(&client, &format!("{base}/v1/stream/p{w}")).await,
            201
        );
    }
    let started = std::time::Instant::now();
    let acked: std::sync::Arc<Vec<std::sync::atomic::AtomicU64>> =
        std::sync::Arc::new((0..WRITERS).map(|_| Default::default()).collect());
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (client, acked) = (client.clone(), acked.clone());
            let url = format!("{base}/v1/stream/p{w}");
            tokio::spawn(async move {
                loop {
                    let seq = acked[w].load(std::sync::atomic::Ordering::SeqCst);
                    let sent = client
                        .post(&url)
                        .header("content-type", "application/octet-stream")
                        .header("producer-id", "writer")
                        .header("producer-epoch", "0")
                        .header("producer-seq", seq.to_string())
                        .body(format!("[{seq}]"))
                        .send()
                        .await;
                    // The origin is killed: the last append has no answer.
                    match sent {
                        Ok(r) if r.status() == 200 => {
                            acked[w].fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                        }
                        Ok(r) => panic!("writer {w}, append {seq}: {}", r.status()),
                        Err(_) => return,
                    };
                }
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let metrics = crate::common::metrics_at(&client, &base).await;
    let elapsed = started.elapsed();
    let put_seconds: f64 = metrics
        .lines()
        .find_map(|l| {
            l.strip_prefix(
                "ds_origin_object_store_request_duration_seconds_sum{operation=\"wal_put\",outcome=\"ok\"} ",
            )?
            .parse()
            .ok()
        })
        .expect("the WAL puts' time in /metrics");
    assert!(
        put_seconds > elapsed.as_secs_f64(),
        "puts did not overlap: {put_seconds} s of puts in {elapsed:?}"
    );
    // The machine goes while appends wait for their puts.
    drop(a);
    for w in writers {
        w.await.unwrap();
    }
    std::fs::remove_dir_all(&first).unwrap();
    // Another machine takes over once a's lease runs out.
    let b = start_with(
        &weed,
        &dir.path().join("second"),
        "pipelined",
        "b",
        &["--lease", "1s", "--lease-renew", "250ms"],
    );
    let base = format!("http://{}", b.addr);
    wait_owner(&client, &base).await;
    for w in 0..WRITERS {
        let text = read_all(&client, &format!("{base}/v1/stream/p{w}")).await;
        let seqs: Vec<u64> = text
            .trim_start_matches('[')
            .trim_end_matches(']')
            .split("][")
            .filter(|s| !s.is_empty())
            .map(|s| s.parse().unwrap())
            .collect();
        assert_eq!(
            seqs,
            (0..seqs.len() as u64).collect::<Vec<_>>(),
            "writer {w}: in order, once"
        );
        let n = acked[w].load(std::sync::atomic::Ordering::SeqCst);
        assert!(n > 0, "writer {w} appended");
        assert!(
            seqs.len() as u64 == n || seqs.len() as u64 == n + 1,
            "writer {w}: acknowledged {n}, kept {}",
            seqs.len()
        );
    }
}
