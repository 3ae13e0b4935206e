//! Checkpoints in the bucket (`region::checkpoint`): the serving origin
//! writes an image of every stream and deletes the WAL below it; an origin
//! that starts on an empty disk after `kill -9` rebuilds every stream from
//! the image and the WAL after it, and answers as the old owner did.

use std::collections::BTreeMap;

use futures::StreamExt;

use super::origins::{start_with, wait_owner};
use crate::common::seaweed::Seaweed;

/// Small thresholds: a checkpoint every few commits, looked for each second.
const OFTEN: [&str; 4] = [
    "--region-checkpoint-objects",
    "16",
    "--region-checkpoint-interval",
    "1s",
];

/// The WAL numbers and checkpoint numbers in the bucket under `prefix`.
pub async fn bucket(weed: &Seaweed, prefix: &str) -> (Vec<u64>, Vec<u64>) {
    let store = weed.store(prefix);
    let numbers = |dir: &'static str| {
        let store = std::sync::Arc::clone(&store);
        async move {
            let prefix = object_store::path::Path::from(format!("region/partitions/0000/{dir}"));
            let mut out: Vec<u64> = store
                .list(Some(&prefix))
                .filter_map(|m| async move {
                    m.ok()
                        .and_then(|m| m.location.filename()?.parse::<u64>().ok())
                })
                .collect()
                .await;
            out.sort_unstable();
            out
        }
    };
    if super::origins::layout() != "origin" {
        return (numbers("wal").await, numbers("checkpoints").await);
    }
    // One WAL per origin (one origin writes here): its log's numbers, and
    // the numbers its partition's checkpoints stand at.
    let logs = object_store::path::Path::from("region/logs");
    let wal: Vec<u64> = store
        .list(Some(&logs))
        .filter_map(|m| async move {
            m.ok()
                .and_then(|m| m.location.filename()?.parse::<u64>().ok())
        })
        .collect()
        .await;
    let stands = object_store::path::Path::from("region/partitions/0000/stands");
    let mut checkpoints: Vec<u64> = store
        .list(Some(&stands))
        .filter_map(|m| async move {
            let name = m.ok()?.location.filename()?.to_owned();
            name.split_once('-')?.1.parse::<u64>().ok()
        })
        .collect()
        .await;
    checkpoints.sort_unstable();
    let mut wal = wal;
    wal.sort_unstable();
    (wal, checkpoints)
}

/// What the origin at `base` answers for `path`: the headers a client
/// keeps and every byte from the start (in as many reads as it takes).
async fn answer(client: &reqwest::Client, base: &str, path: &str) -> BTreeMap<String, String> {
    let url = format!("{base}/v1/stream/{path}");
    let head = client.head(&url).send().await.unwrap();
    let mut out = BTreeMap::new();
    out.insert("status".into(), head.status().to_string());
    for name in [
        "content-type",
        "stream-next-offset",
        "stream-closed",
        "stream-ttl",
        "stream-expires-at",
        "stream-incarnation",
        "stream-snapshot-offset",
        "stream-retained-offset",
        "stream-forked-from",
        "stream-fork-offset",
    ] {
        if let Some(v) = head.headers().get(name) {
            out.insert(name.into(), v.to_str().unwrap().to_owned());
        }
    }
    if !head.status().is_success() {
        return out;
    }
    let mut offset = "-1".to_owned();
    let mut body = Vec::new();
    for _ in 0..100 {
        let r = client
            .get(format!("{url}?offset={offset}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "read {path} at {offset}");
        offset = r.headers()["stream-next-offset"]
            .to_str()
            .unwrap()
            .to_owned();
        let done = r.headers().contains_key("stream-up-to-date");
        body.extend_from_slice(&r.bytes().await.unwrap());
        if done {
            break;
        }
    }
    out.insert(
        "body".into(),
        format!("{} bytes, sha {}", body.len(), {
            use sha2::Digest;
            hex::encode(sha2::Sha256::digest(&body))
        }),
    );
    out
}

async fn send(req: reqwest::RequestBuilder) -> u16 {
    req.send().await.unwrap().status().as_u16()
}

/// An append that succeeded (200, or 204 for one that closes).
fn ok(status: u16) -> bool {
    status == 200 || status == 204
}

fn producer(req: reqwest::RequestBuilder, seq: u64) -> reqwest::RequestBuilder {
    req.header("producer-id", "p")
        .header("producer-epoch", "0")
        .header("producer-seq", seq.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_carries_every_stream_and_the_wal_below_it_goes() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let first = dir.path().join("first");
    let prefix = "checkpoints";
    let mut a = start_with(&weed, &first, prefix, "a", &OFTEN);
    let base = format!("http://{}", a.addr);
    wait_owner(&client, &base).await;
    let url = |p: &str| format!("{base}/v1/stream/{p}");
    let binary = "application/octet-stream";

    // Every kind of state a stream keeps.
    assert_eq!(
        send(client.put(url("plain")).header("content-type", binary)).await,
        201
    );
    for seq in 0..40 {
        let body = format!("<{seq:03}>");
        assert!(ok(send(
            producer(client.post(url("plain")), seq)
                .header("content-type", binary)
                .body(body)
        )
        .await));
    }
    assert_eq!(
        send(
            client
                .put(url("json"))
                .header("content-type", "application/json")
        )
        .await,
        201
    );
    for n in 0..10 {
        let s = send(
            client
                .post(url("json"))
                .header("content-type", "application/json")
                .body(format!("{{\"n\":{n}}}")),
        )
        .await;
        assert!(s == 200 || s == 204, "{s}");
    }
    assert_eq!(
        send(client.put(url("closed")).header("content-type", binary)).await,
        201
    );
    assert!(ok(send(
        client
            .post(url("closed"))
            .header("content-type", binary)
            .header("stream-closed", "true")
            .body("last")
    )
    .await));
    assert_eq!(
        send(
            client
                .put(url("ttl"))
                .header("content-type", binary)
                .header("stream-ttl", "3600")
                .body("short-lived")
        )
        .await,
        201
    );
    assert_eq!(
        send(
            client
                .put(url("fork"))
                .header("stream-forked-from", "/v1/stream/plain")
        )
        .await,
        201
    );
    assert!(ok(send(
        client
            .post(url("fork"))
            .header("content-type", binary)
            .body("fork's own")
    )
    .await));
    assert_eq!(
        send(
            client
                .put(format!("{}/snapshot/{:016x}", url("plain"), 20))
                .header("content-type", "text/plain")
                .body("state at 20")
        )
        .await,
        204
    );
    // Past one chunk: its first 4 MiB are sealed, the rest is in the image.
    assert_eq!(
        send(client.put(url("big")).header("content-type", binary)).await,
        201
    );
    for i in 0..5u8 {
        assert!(ok(send(
            client
                .post(url("big"))
                .header("content-type", binary)
                .body(vec![i; 1 << 20])
        )
        .await));
    }
    assert_eq!(
        send(
            client
                .put(url("gone"))
                .header("content-type", binary)
                .body("x")
        )
        .await,
        201
    );
    assert_eq!(send(client.delete(url("gone"))).await, 204);

    // A checkpoint, and the WAL below it deleted.
    let mut published = None;
    for _ in 0..600 {
        let (wal, checkpoints) = bucket(&weed, prefix).await;
        let metrics = crate::common::metrics_at(&client, &base).await;
        let deleted = crate::common::metric_in(
            &metrics,
            "ds_origin_region_checkpoint_deleted_objects_total",
        );
        if let Some(&c) = checkpoints.last() {
            if wal.iter().all(|&n| n >= c) && deleted >= Some(16) {
                published = Some(c);
                break;
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let Some(checkpoint) = published else {
        let log: Vec<String> = a.log.try_iter().collect();
        panic!(
            "no checkpoint with the WAL below it deleted: bucket {:?}\n{}",
            bucket(&weed, prefix).await,
            log.join("\n")
        );
    };
    // More after it: these come from the WAL, the rest from the image.
    for seq in 40..45 {
        assert!(ok(send(
            producer(client.post(url("plain")), seq)
                .header("content-type", binary)
                .body(format!("<{seq:03}>"))
        )
        .await));
    }
    let metrics = crate::common::metrics_at(&client, &base).await;
    assert!(crate::common::metric_in(&metrics, "ds_origin_region_checkpoints_total").unwrap() >= 1);

    let streams = ["plain", "json", "closed", "ttl", "fork", "big", "gone"];
    let mut before = Vec::new();
    for s in streams {
        before.push(answer(&client, &base, s).await);
    }
    assert_eq!(before[6]["status"], "404 Not Found");

    // The machine goes, and its disk with it.
    a.kill();
    std::fs::remove_dir_all(&first).unwrap();
    let (wal, _) = bucket(&weed, prefix).await;
    assert!(
        wal.iter().all(|&n| n >= checkpoint),
        "nothing below the checkpoint: {wal:?}"
    );

    let b = start_with(&weed, &dir.path().join("second"), prefix, "b", &OFTEN);
    let base = format!("http://{}", b.addr);
    wait_owner(&client, &base).await;
    for (s, was) in streams.iter().zip(&before) {
        assert_eq!(
            &answer(&client, &base, s).await,
            was,
            "{s} after the takeover"
        );
    }
    let url = |p: &str| format!("{base}/v1/stream/{p}");
    // Producer state moved: a retry is a duplicate, a gap is refused.
    assert_eq!(
        send(
            producer(client.post(url("plain")), 44)
                .header("content-type", binary)
                .body("<044>")
        )
        .await,
        204
    );
    assert_eq!(
        send(
            producer(client.post(url("plain")), 47)
                .header("content-type", binary)
                .body("<047>")
        )
        .await,
        409
    );
    assert!(ok(send(
        producer(client.post(url("plain")), 45)
            .header("content-type", binary)
            .body("<045>")
    )
    .await));
    // Closed stays closed; the snapshot is there; a stream created after
    // the image reads its own bytes only.
    assert_eq!(
        send(
            client
                .post(url("closed"))
                .header("content-type", binary)
                .body("more")
        )
        .await,
        409
    );
    let snapshot = client
        .get(format!("{}/snapshot", url("plain")))
        .send()
        .await
        .unwrap();
    assert_eq!(snapshot.status(), 200);
    assert_eq!(snapshot.text().await.unwrap(), "state at 20");
    assert_eq!(
        send(
            client
                .put(url("new"))
                .header("content-type", binary)
                .body("fresh")
        )
        .await,
        201
    );
    let r = client
        .get(format!("{}?offset=-1", url("new")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "fresh");
}
