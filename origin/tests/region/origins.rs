//! The origin binary in object durability on SeaweedFS: `kill -9` and the
//! data directory deleted lose no acknowledged append; a second origin on
//! the same bucket and prefix takes the partition over, and the first then
//! acknowledges nothing more.

use std::ffi::OsStr;
use std::path::Path;

use crate::common::process::{spawn_with_env, Proc};
use crate::common::seaweed::Seaweed;

fn start(weed: &Seaweed, data: &Path, prefix: &str, node: &str) -> Proc {
    start_with(weed, data, prefix, node, &[])
}

fn start_with(weed: &Seaweed, data: &Path, prefix: &str, node: &str, more: &[&str]) -> Proc {
    let url = Seaweed::url(prefix);
    let mut args: Vec<&OsStr> = vec![
        OsStr::new("--data"),
        data.as_os_str(),
        OsStr::new("--object-store"),
        OsStr::new(&url),
        OsStr::new("--durability"),
        OsStr::new("object"),
        OsStr::new("--node-id"),
        OsStr::new(node),
    ];
    args.extend(more.iter().map(OsStr::new));
    spawn_with_env(&[], &args, &weed.env())
}

async fn wait_serving(client: &reqwest::Client, base: &str) {
    for _ in 0..600 {
        if client.get(format!("{base}/healthz")).send().await.is_ok() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the origin at {base} did not serve");
}

async fn append(
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

async fn read_all(client: &reqwest::Client, url: &str) -> String {
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
    wait_serving(&client, &base).await;
    let stream = format!("{base}/v1/stream/kept");
    let created = client
        .put(&stream)
        .header("content-type", "application/octet-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
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
    wait_serving(&client, &base).await;
    let stream = format!("{base}/v1/stream/kept");
    assert_eq!(read_all(&client, &stream).await, acknowledged);
    // A retry of the last append is known (producer state moved too).
    let again = append(&client, &stream, 49, "[049]".into()).await;
    assert_eq!(again, 204, "a duplicate is answered as one");
    let status = append(&client, &stream, 50, "[050]".into()).await;
    assert!(status.is_success());
    acknowledged.push_str("[050]");

    // Another origin on the bucket takes over: it serves everything, and
    // the one it took over from acknowledges nothing more.
    let c = start(&weed, &dir.path().join("third"), "lost-disk", "c");
    let base_c = format!("http://{}", c.addr);
    wait_serving(&client, &base_c).await;
    let stream_c = format!("{base_c}/v1/stream/kept");
    assert_eq!(read_all(&client, &stream_c).await, acknowledged);
    let fenced = client
        .post(&stream)
        .header("content-type", "application/octet-stream")
        .body("zombie")
        .send()
        .await
        .unwrap();
    assert_eq!(
        fenced.status(),
        503,
        "the old owner acknowledged after the fence"
    );
    assert!(fenced.headers().contains_key("retry-after"));
    let body: serde_json::Value = fenced.json().await.unwrap();
    assert_eq!(body["error"]["code"], "UNAVAILABLE");
    assert_eq!(append(&client, &stream_c, 51, "[051]".into()).await, 200);
    acknowledged.push_str("[051]");
    assert_eq!(read_all(&client, &stream_c).await, acknowledged);
    let metrics = crate::common::metrics_at(&client, &base).await;
    assert_eq!(
        crate::common::metric_in(&metrics, "ds_object_wal_fenced"),
        Some(1)
    );
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
    wait_serving(&client, &base).await;
    for w in 0..WRITERS {
        let created = client
            .put(format!("{base}/v1/stream/p{w}"))
            .header("content-type", "application/octet-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(created.status(), 201);
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
    let put_micros = crate::common::metric_in(&metrics, "ds_object_wal_put_micros_total").unwrap();
    assert!(
        put_micros as u128 > elapsed.as_micros(),
        "puts did not overlap: {put_micros} µs of puts in {elapsed:?}"
    );
    // The machine goes while appends wait for their puts.
    drop(a);
    for w in writers {
        w.await.unwrap();
    }
    std::fs::remove_dir_all(&first).unwrap();
    let b = start(&weed, &dir.path().join("second"), "pipelined", "b");
    let base = format!("http://{}", b.addr);
    wait_serving(&client, &base).await;
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
