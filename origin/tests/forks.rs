//! Forks against a real origin, with a real S3-compatible server (s3s-fs)
//! where sealed chunks matter: a fork shares its source's sealed chunks
//! (no object is written for the inherited range), objects go only once
//! nothing can read them, soft-deleted sources and chains survive restarts
//! (from a checkpoint, and from the log after SIGKILL). The conformance
//! suite's Fork groups cover the protocol's statuses; these cover storage.

use crate::common;
use std::time::{Duration, Instant};

use common::s3::{wait_gone, S3sFs};
use common::{header, stream_path, Api, TestOrigin};
use origin::http::HttpConfig;
use origin::objects::instrumented::Objects;
use origin::objects::keys;
use origin::store::StoreConfig;
use shared::offset::{Offset, CHUNK_BYTES};

const MIB: usize = 1024 * 1024;

fn store_config(server: &S3sFs) -> impl FnOnce(std::path::PathBuf) -> StoreConfig {
    let settings = server.settings();
    move |data| {
        let mut c = StoreConfig::new(data);
        c.object_store = Some(S3sFs::URL.to_owned());
        c.object_store_settings = settings;
        // Garbage goes at once (the grace period is for readers mid-fetch).
        c.gc_grace = Duration::ZERO;
        c
    }
}

/// An origin on `dir` sealing into `server`.
pub(crate) async fn start_sealing(dir: &std::path::Path, server: &S3sFs) -> TestOrigin {
    TestOrigin::start_in(dir.to_owned(), HttpConfig::default(), store_config(server)).await
}

pub(crate) fn pattern(seed: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (seed * 31 + j % 251) as u8).collect()
}

pub(crate) async fn wait_sealed(api: &Api, chunks: i64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while api.metric("ds_origin_chunks_sealed_total").await < chunks {
        assert!(Instant::now() < deadline, "{chunks} chunks were not sealed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Reads a whole stream, following `Stream-Next-Offset`.
pub(crate) async fn read_whole(api: &Api, path: &str) -> Vec<u8> {
    read_at(api, path, "-1".to_owned()).await
}

/// Reads a stream from `offset` to its end.
async fn read_at(api: &Api, path: &str, mut offset: String) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let r = api
            .get(&format!("{path}?offset={offset}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "read {path} at {offset}");
        offset = header(&r, "stream-next-offset").unwrap();
        let done = header(&r, "stream-up-to-date").is_some();
        out.extend_from_slice(&r.bytes().await.unwrap());
        if done {
            return out;
        }
    }
}

async fn fork(api: &Api, path: &str, source: &str) -> reqwest::Response {
    let r = api
        .put(path)
        .header("stream-forked-from", source)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "fork {path} of {source}");
    r
}

async fn status(req: reqwest::RequestBuilder) -> u16 {
    req.send().await.unwrap().status().as_u16()
}

async fn token(api: &Api, path: &str) -> String {
    let r = api.head(path).send().await.unwrap();
    assert_eq!(r.status(), 200, "HEAD {path}");
    header(&r, "stream-incarnation").unwrap()
}

async fn exists(objects: &Objects, key: &object_store::path::Path) -> bool {
    objects.get(key).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_reads_its_sources_sealed_chunks_and_writes_no_object_for_them() {
    let server = S3sFs::start();
    let dir = tempfile::tempdir().unwrap();
    let start = || start_sealing(dir.path(), &server);
    let api = Api::on(start().await);
    let source = stream_path("fork-source");
    let mut all = Vec::new();
    api.create(&source, "application/octet-stream").await;
    for i in 0..3 {
        let part = pattern(i, 4 * MIB);
        api.append(&source, "application/octet-stream", part.clone())
            .await;
        all.extend_from_slice(&part);
    }
    let tail_part = pattern(9, 1000);
    api.append(&source, "application/octet-stream", tail_part.clone())
        .await;
    all.extend_from_slice(&tail_part);
    wait_sealed(&api, 3).await;
    let before = server.object_files();
    assert_eq!(before.len(), 3, "the source's three chunks: {before:?}");

    let forked = stream_path("fork-of-sealed");
    let r = fork(&api, &forked, &source).await;
    assert_eq!(
        header(&r, "stream-next-offset").unwrap(),
        Offset(all.len() as u64).to_string()
    );
    assert_eq!(server.object_files(), before, "a fork writes no object");
    assert_eq!(read_whole(&api, &forked).await, all);

    // The fork's own chunk URLs over the inherited range: immutable, and
    // the source's bytes.
    let fork_token = token(&api, &forked).await;
    let r = api
        .get(&format!(
            "{forked}/incarnation/{fork_token}/chunk/{}",
            Offset(CHUNK_BYTES)
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "stream-immutable").as_deref(), Some("true"));
    assert_eq!(
        r.bytes().await.unwrap(),
        all[4 * MIB..8 * MIB],
        "the chunk is the source's"
    );

    // The fork's appends complete the chunk across its fork point: that
    // one is the fork's own, and holds the source's bytes below the point.
    let own = pattern(7, 4 * MIB - 1000);
    api.append(&forked, "application/octet-stream", own.clone())
        .await;
    wait_sealed(&api, 4).await;
    let objects = server.objects();
    let straddle = keys::chunk(&forked, &fork_token, Offset(3 * CHUNK_BYTES));
    let mut expected = tail_part.clone();
    expected.extend_from_slice(&own);
    assert_eq!(objects.get(&straddle).await.unwrap(), expected);
    for k in 0..3 {
        let inherited = keys::chunk(&forked, &fork_token, Offset(k * CHUNK_BYTES));
        assert!(!exists(&objects, &inherited).await, "no copy of chunk {k}");
    }
    assert_eq!(server.object_files().len(), 4);

    // After a restart (no cache, every byte from where it lives).
    api.origin.stop().await;
    let api = Api::on(start().await);
    all.extend_from_slice(&own);
    assert_eq!(read_whole(&api, &forked).await, all);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_are_collected_only_once_no_fork_can_read_them() {
    let server = S3sFs::start();
    let dir = tempfile::tempdir().unwrap();
    let start = || start_sealing(dir.path(), &server);
    let api = Api::on(start().await);
    let objects = server.objects();
    let source = stream_path("gc-source");
    let unrelated = stream_path("gc-unrelated");
    let mut all = Vec::new();
    api.create(&source, "application/octet-stream").await;
    api.create(&unrelated, "application/octet-stream").await;
    for i in 0..2 {
        let part = pattern(i, 4 * MIB);
        api.append(&source, "application/octet-stream", part.clone())
            .await;
        all.extend_from_slice(&part);
    }
    api.append(&unrelated, "application/octet-stream", pattern(5, 4 * MIB))
        .await;
    wait_sealed(&api, 3).await;
    let source_token = token(&api, &source).await;
    let source_chunk = keys::chunk(&source, &source_token, Offset(0));
    let unrelated_chunk = keys::chunk(&unrelated, &token(&api, &unrelated).await, Offset(0));

    // A chain: source ← middle (+"B") ← leaf (+"C").
    let middle = stream_path("gc-middle");
    let leaf = stream_path("gc-leaf");
    fork(&api, &middle, &source).await;
    api.append(&middle, "application/octet-stream", "B").await;
    fork(&api, &leaf, &middle).await;
    api.append(&leaf, "application/octet-stream", "C").await;
    let mut expected = all.clone();
    expected.extend_from_slice(b"BC");

    // Deleting the source and the middle soft-deletes both.
    assert_eq!(status(api.delete(&source)).await, 204);
    assert_eq!(status(api.delete(&middle)).await, 204);
    for path in [&source, &middle] {
        assert_eq!(status(api.head(path)).await, 410, "HEAD {path}");
        assert_eq!(status(api.delete(path)).await, 410, "DELETE {path}");
        let again = api
            .put(path)
            .header("content-type", "application/octet-stream");
        assert_eq!(status(again).await, 409, "PUT {path}");
    }
    // The janitor works in order: once the unrelated stream's chunk is
    // collected, anything queued before it would have been too.
    assert_eq!(status(api.delete(&unrelated)).await, 204);
    wait_gone(&objects, &unrelated_chunk).await;
    assert!(
        exists(&objects, &source_chunk).await,
        "the leaf still reads it"
    );
    assert_eq!(read_whole(&api, &leaf).await, expected);

    // From a checkpoint: the same.
    api.origin.stop().await;
    let api = Api::on(start().await);
    assert_eq!(status(api.head(&source)).await, 410);
    assert_eq!(status(api.head(&middle)).await, 410);
    assert_eq!(read_whole(&api, &leaf).await, expected);

    // The last reader goes: the whole chain goes with it.
    assert_eq!(status(api.delete(&leaf)).await, 204);
    for path in [&leaf, &middle, &source] {
        assert_eq!(status(api.head(path)).await, 404, "HEAD {path}");
    }
    // Every chunk of the chain goes (the janitor deletes them one by one:
    // the source's first going says nothing of the others).
    wait_gone(&objects, &source_chunk).await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !server.object_files().is_empty() {
        assert!(
            std::time::Instant::now() < deadline,
            "never collected: {:?}",
            server.object_files()
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    // The paths are free again.
    api.create(&source, "text/plain").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn soft_deletes_and_chains_are_replayed_after_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let spawn = || common::process::spawn(&[], &["--data".as_ref(), dir.path().as_os_str()]);
    let proc = spawn();
    let base = format!("http://{}", proc.addr);
    let client = common::client();
    let put = |path: &str| client.put(format!("{base}{path}"));
    let l0 = "/v1/stream/replay/l0";
    let (l1, l2, l3) = (
        "/v1/stream/replay/l1",
        "/v1/stream/replay/l2",
        "/v1/stream/replay/l3",
    );
    let created = put(l0)
        .header("content-type", "text/plain")
        .body("A")
        .send();
    assert_eq!(created.await.unwrap().status(), 201);
    for (path, source, own) in [(l1, l0, "B"), (l2, l1, "C"), (l3, l2, "D")] {
        let r = put(path)
            .header("stream-forked-from", source)
            .body(own)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "fork {path}");
    }
    for path in [l1, l2] {
        let r = client.delete(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 204);
    }
    drop(proc); // SIGKILL: all of it is in the log only

    let proc = spawn();
    let base = format!("http://{}", proc.addr);
    let get = |path: &str| client.get(format!("{base}{path}?offset=-1")).send();
    let read = |path: &'static str| async move {
        let r = get(path).await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    };
    assert_eq!(read(l3).await, (200, "ABCD".to_owned()));
    assert_eq!(read(l0).await, (200, "A".to_owned()));
    assert_eq!(read(l1).await.0, 410);
    assert_eq!(read(l2).await.0, 410);
    let r = client.delete(format!("{base}{l3}")).send().await.unwrap();
    assert_eq!(r.status(), 204);
    for path in [l3, l2, l1] {
        assert_eq!(read(path).await.0, 404, "{path} went with its last fork");
    }
    assert_eq!(
        read(l0).await,
        (200, "A".to_owned()),
        "l0 was never deleted"
    );
}

/// A source's retention may pass its fork's point: the fork then reads
/// from its own retention (the source's, up to the fork point) and still
/// seals the chunk across its fork point (the source's bytes of it that
/// retention dropped are no one's to read).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_outlives_its_sources_retention() {
    let server = S3sFs::start();
    let dir = tempfile::tempdir().unwrap();
    let api = Api::on(start_sealing(dir.path(), &server).await);
    let objects = server.objects();
    let source = stream_path("retained-source");
    api.create(&source, "application/octet-stream").await;
    api.append(&source, "application/octet-stream", pattern(1, 4 * MIB))
        .await;
    api.append(&source, "application/octet-stream", pattern(2, MIB))
        .await;
    let forked = stream_path("retained-fork");
    fork(&api, &forked, &source).await;
    api.append(&source, "application/octet-stream", pattern(3, 4 * MIB))
        .await;
    wait_sealed(&api, 2).await;
    let source_token = token(&api, &source).await;

    let at = Offset(8 * MIB as u64);
    let r = api
        .put(&format!("{source}/snapshot/{at}"))
        .body("snap")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = api
        .put(&format!("{source}/snapshot/{at}/retain"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    wait_gone(
        &objects,
        &keys::chunk(&source, &source_token, Offset(CHUNK_BYTES)),
    )
    .await;

    let head = api.head(&forked).send().await.unwrap();
    assert_eq!(
        header(&head, "stream-retained-offset").unwrap(),
        Offset(5 * MIB as u64).to_string(),
        "the fork reads from its fork point now"
    );
    let r = api
        .get(&format!("{forked}?offset={}", Offset(4 * MIB as u64)))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 410);

    let own = pattern(4, 3 * MIB);
    api.append(&forked, "application/octet-stream", own.clone())
        .await;
    wait_sealed(&api, 3).await;
    let fork_token = token(&api, &forked).await;
    let sealed = objects
        .get(&keys::chunk(&forked, &fork_token, Offset(CHUNK_BYTES)))
        .await
        .unwrap();
    assert_eq!(sealed.len(), 4 * MIB);
    assert_eq!(sealed[MIB..], own[..], "the fork's own bytes, sealed");
    assert_eq!(read_from(&api, &forked, 5 * MIB as u64).await, own);
}

async fn read_from(api: &Api, path: &str, from: u64) -> Vec<u8> {
    read_at(api, path, Offset(from).to_string()).await
}

/// Chains are bounded (a read walks them): past `max_fork_depth` a fork
/// answers 400 and nothing is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fork_chains_stop_at_their_bound() {
    let dir = tempfile::tempdir().unwrap();
    let api = Api::on(
        TestOrigin::start_in(dir.path().to_owned(), HttpConfig::default(), |data| {
            let mut c = StoreConfig::new(data);
            c.max_fork_depth = 3;
            c
        })
        .await,
    );
    let mut chain = vec![stream_path("depth-0")];
    api.create_with(&chain[0], "text/plain", "0").await;
    for level in 1..=3 {
        let path = stream_path(&format!("depth-{level}"));
        fork(&api, &path, chain.last().unwrap()).await;
        api.append(&path, "text/plain", level.to_string()).await;
        chain.push(path);
    }
    assert_eq!(read_whole(&api, chain.last().unwrap()).await, b"0123");
    let too_deep = stream_path("depth-4");
    let r = api
        .put(&too_deep)
        .header("stream-forked-from", chain.last().unwrap())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 400);
    assert_eq!(status(api.head(&too_deep)).await, 404);
}

/// A delete that removes soft-deleted sources with the last fork, replayed
/// from the log after SIGKILL: the next checkpoint drops the sources too,
/// so they do not come back after the restart after that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sources_removed_with_their_last_fork_stay_removed_across_replays() {
    let dir = tempfile::tempdir().unwrap();
    let spawn = || common::process::spawn(&[], &["--data".as_ref(), dir.path().as_os_str()]);
    let client = common::client();
    let (source, forked) = ("/v1/stream/zombie/source", "/v1/stream/zombie/fork");

    let proc = spawn();
    let base = format!("http://{}", proc.addr);
    let r = client
        .put(format!("{base}{source}"))
        .body("S")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = client
        .put(format!("{base}{forked}"))
        .header("stream-forked-from", source)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = client
        .delete(format!("{base}{source}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    proc.terminate(); // a checkpoint holds the soft-deleted source

    let proc = spawn();
    let base = format!("http://{}", proc.addr);
    let r = client
        .delete(format!("{base}{forked}"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    drop(proc); // SIGKILL: the removal is in the log only

    for restart in 0..2 {
        let proc = spawn();
        let base = format!("http://{}", proc.addr);
        for path in [source, forked] {
            let r = client.head(format!("{base}{path}")).send().await.unwrap();
            assert_eq!(r.status(), 404, "{path} after restart {restart}");
        }
        proc.terminate(); // the replay's checkpoint, then one from it alone
    }
    let proc = spawn();
    let base = format!("http://{}", proc.addr);
    let r = client
        .put(format!("{base}{source}"))
        .body("again")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "the path is free");
}

/// A fork without a snapshot of its own starts from its source's, when
/// that is at or before the fork point: `HEAD` names it, and both snapshot
/// URLs serve the source's object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_bootstraps_from_its_sources_snapshot() {
    let api = Api::start().await;
    let source = stream_path("snap-source");
    let all: Vec<u8> = (0..100u8).collect();
    api.create_with(&source, "application/octet-stream", all.clone())
        .await;
    let at = Offset(50);
    let r = api
        .put(&format!("{source}/snapshot/{at}"))
        .body("state@50")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let digest = header(&r, "stream-snapshot-digest").unwrap();
    let r = api
        .put(&format!("{source}/snapshot/{at}/retain"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);

    let forked = stream_path("snap-fork");
    fork(&api, &forked, &source).await;
    let head = api.head(&forked).send().await.unwrap();
    assert_eq!(
        header(&head, "stream-snapshot-offset").unwrap(),
        at.to_string()
    );
    assert_eq!(header(&head, "stream-snapshot-digest").unwrap(), digest);
    assert_eq!(
        header(&head, "stream-retained-offset").unwrap(),
        at.to_string()
    );
    let latest = api.get(&format!("{forked}/snapshot")).send().await.unwrap();
    assert_eq!(latest.status(), 200);
    assert_eq!(latest.bytes().await.unwrap(), "state@50");
    let fork_token = token(&api, &forked).await;
    let cacheable = api
        .get(&format!("{forked}/incarnation/{fork_token}/snapshot/{at}"))
        .send()
        .await
        .unwrap();
    assert_eq!(cacheable.status(), 200);
    assert_eq!(cacheable.bytes().await.unwrap(), "state@50");
    assert_eq!(read_from(&api, &forked, 50).await, all[50..]);

    // A snapshot of the fork's own takes over.
    let own = Offset(100);
    let r = api
        .put(&format!("{forked}/snapshot/{own}"))
        .body("fork@100")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let latest = api.get(&format!("{forked}/snapshot")).send().await.unwrap();
    assert_eq!(latest.bytes().await.unwrap(), "fork@100");
    let head = api.head(&source).send().await.unwrap();
    assert_eq!(
        header(&head, "stream-snapshot-offset").unwrap(),
        at.to_string(),
        "the source's is its own"
    );
}
