//! Crash safety with a real process and SIGKILL.
//!
//! Writers append with producer headers while the origin is killed with
//! SIGKILL at random moments. A writer that did not get an answer sends the
//! same (epoch, seq) again after the restart, as a real producer would. In the
//! end every acknowledged append must be in the log exactly once, in order,
//! and nothing else may be: no loss, no duplicate, no reordering, no torn
//! bytes served.

use crate::common;
#[path = "crash/forks.rs"]
mod forks;
#[path = "crash/rollbacks.rs"]
mod rollbacks;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::process::{count_files, Proc};
use parking_lot::Mutex;

const CYCLES: usize = 6;

/// How large a crash run is.
#[derive(Clone, Copy)]
struct Scale {
    streams: usize,
    writers: usize,
    /// Acknowledged appends each cycle adds at least.
    min_acks_per_cycle: usize,
    /// Every third message is ~40 KB, so streams pass 4 MiB chunk
    /// boundaries (and the run checks that chunks were sealed).
    large: bool,
}

/// Few streams, large appends: 6 × 400 appends of ~13.5 KB on average put
/// ~5 MiB into each stream, past the first chunk boundary.
const FEW_LARGE: Scale = Scale {
    streams: 6,
    writers: 24,
    min_acks_per_cycle: 400,
    large: true,
};

/// Many small streams (their bytes stay in the log; small checkpoints
/// clean it into their files): each writer appends round-robin over its
/// share of the streams.
const MANY_SMALL: Scale = Scale {
    streams: 3_000,
    writers: 48,
    min_acks_per_cycle: 3_000,
    large: false,
};

impl Scale {
    fn per_writer(&self) -> u64 {
        (self.streams / self.writers).max(1) as u64
    }

    /// The stream writer `w` sends its `seq`th message to.
    fn stream_of(&self, w: usize, seq: u64) -> usize {
        (w + (seq % self.per_writer()) as usize * self.writers) % self.streams
    }

    /// The producer sequence number of that message in its stream (a
    /// producer's numbers are per stream: each of the writer's streams sees
    /// every `per_writer`th message of it).
    fn producer_seq(&self, seq: u64) -> u64 {
        seq / self.per_writer()
    }
}

fn acked_total(acked: &Mutex<Vec<Vec<u64>>>) -> usize {
    acked.lock().iter().map(Vec::len).sum()
}

fn spawn_origin(data: &Path) -> Proc {
    // Small segments so kills also land around checkpoints and rotations,
    // and a small log retention so small streams are cleaned into their own
    // files between kills.
    let args: [&std::ffi::OsStr; 6] = [
        "--data".as_ref(),
        data.as_os_str(),
        "--checkpoint-bytes".as_ref(),
        "256KiB".as_ref(),
        "--log-retain-bytes".as_ref(),
        "1MiB".as_ref(),
    ];
    common::process::spawn(&[], &args)
}

/// A tiny deterministic generator (seeded per run, printed on failure).
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn message(scale: Scale, writer: usize, seq: u64) -> String {
    // Varied sizes so records straddle pages and frames; every third message
    // is large, so streams pass 4 MiB chunk boundaries and kills also land
    // while chunks are sealed and dropped from local disk.
    let mut pad = (writer * 37 + seq as usize * 11) % 300;
    if scale.large && seq.is_multiple_of(3) {
        pad += 40_000;
    }
    format!("w{writer:02}-s{seq:06}-{}\n", "x".repeat(pad))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_appends_survive_sigkill_exactly_once() {
    crash_run(FEW_LARGE).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_appends_to_many_small_streams_survive_sigkill_exactly_once() {
    crash_run(MANY_SMALL).await;
}

async fn crash_run(scale: Scale) {
    let Scale {
        streams,
        writers,
        min_acks_per_cycle,
        ..
    } = scale;
    let dir = tempfile::tempdir().unwrap();
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("crash test seed {seed}");
    let mut rng = Rng(seed);
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap();

    // Per writer: the next seq to send (a seq without an answer is sent again).
    let next_seq: Arc<Mutex<Vec<u64>>> = Arc::new(Mutex::new(vec![0; writers]));
    // Per writer: seqs acknowledged (200, or 204 as a duplicate of an earlier apply).
    let acked: Arc<Mutex<Vec<Vec<u64>>>> = Arc::new(Mutex::new(vec![Vec::new(); writers]));
    // Forks made under the same kills (see `forks`).
    let forks_asked = Arc::new(Mutex::new(Vec::new()));
    let mut kills = 0;

    for cycle in 0..CYCLES {
        let mut proc = spawn_origin(dir.path());
        let base = format!("http://{}", proc.addr);
        if cycle == 0 {
            for s in 0..streams {
                let r = client
                    .put(format!("{base}/v1/stream/crash/s{s}"))
                    .header("content-type", "text/plain")
                    .send()
                    .await
                    .unwrap();
                assert_eq!(r.status(), 201);
            }
        }
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for w in 0..writers {
            let (client, base, stop, next_seq, acked) = (
                client.clone(),
                base.clone(),
                stop.clone(),
                next_seq.clone(),
                acked.clone(),
            );
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let seq = next_seq.lock()[w];
                    let resp = client
                        .post(format!(
                            "{base}/v1/stream/crash/s{}",
                            scale.stream_of(w, seq)
                        ))
                        .header("content-type", "text/plain")
                        .header("producer-id", format!("w{w}"))
                        .header("producer-epoch", "0")
                        .header("producer-seq", scale.producer_seq(seq).to_string())
                        .body(message(scale, w, seq))
                        .send()
                        .await;
                    match resp {
                        Ok(r) if r.status() == 200 || r.status() == 204 => {
                            acked.lock()[w].push(seq);
                            next_seq.lock()[w] = seq + 1;
                        }
                        Ok(r) => panic!("writer {w} seq {seq}: unexpected status {}", r.status()),
                        // The origin died under us: the same seq goes again.
                        Err(_) => return,
                    }
                }
            }));
        }
        tasks.push(tokio::spawn(forks::run(
            client.clone(),
            base.clone(),
            streams,
            cycle,
            stop.clone(),
            forks_asked.clone(),
        )));
        // Let the load run for a random while, then kill without warning.
        // A cycle also lasts until it got its share of acknowledgements, so
        // that a slow machine still carries the streams past chunk
        // boundaries (see the end).
        let run_ms = 150 + rng.next() % 700;
        tokio::time::sleep(Duration::from_millis(run_ms)).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while acked_total(&acked) < (cycle + 1) * min_acks_per_cycle {
            assert!(Instant::now() < deadline, "the load does not progress");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        proc.child.kill().expect("SIGKILL");
        proc.child.wait().unwrap();
        kills += 1;
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
    }
    assert!(kills >= 5);

    // Final restart: read every stream and check it against the acks.
    let proc = spawn_origin(dir.path());
    let base = format!("http://{}", proc.addr);
    let mut seen: HashMap<usize, Vec<u64>> = HashMap::new();
    for s in 0..streams {
        let mut offset = "-1".to_owned();
        let mut body = String::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let r = client
                .get(format!("{base}/v1/stream/crash/s{s}?offset={offset}"))
                .send()
                .await
                .unwrap();
            if r.status() != 200 {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                let log: Vec<String> = proc
                    .log
                    .try_iter()
                    .filter(|l| !l.contains(" INFO "))
                    .collect();
                panic!("reading stream {s} at {offset}: {status} {body} (seed {seed}); the origin's log:\n{}", log.join("\n"));
            }
            let next = common::header(&r, "stream-next-offset").unwrap();
            let done = common::header(&r, "stream-up-to-date").is_some();
            body.push_str(&r.text().await.unwrap());
            offset = next;
            if done {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "reading stream {s} does not finish"
            );
        }
        let mut last_in_stream: HashMap<usize, u64> = HashMap::new();
        for line in body.lines() {
            let (w, rest) = line
                .strip_prefix('w')
                .unwrap()
                .split_once("-s")
                .unwrap_or_else(|| panic!("garbage line {line:?}"));
            let w: usize = w.parse().unwrap();
            let seq: u64 = rest[..6].parse().unwrap();
            assert_eq!(
                format!("{line}\n"),
                message(scale, w, seq),
                "a message was changed"
            );
            assert_eq!(
                scale.stream_of(w, seq),
                s,
                "message {seq} of writer {w} in stream {s}"
            );
            let last = last_in_stream.insert(w, seq);
            assert!(
                last.is_none_or(|last| last < seq),
                "writer {w}: seq {seq} after a later one in stream {s} (seed {seed})"
            );
            seen.entry(w).or_default().push(seq);
        }
    }
    let asked = forks_asked.lock().clone();
    let forks_present = forks::verify(&client, &base, &asked).await;
    let forks_acked = asked.iter().filter(|a| a.acknowledged).count();
    assert!(
        forks_acked >= CYCLES,
        "too few forks were made: {forks_acked}"
    );
    eprintln!(
        "crash test: {} forks asked for, {forks_acked} acknowledged, {forks_present} present, each its source's prefix",
        asked.len()
    );
    // Each writer's messages are spread over its streams, in order within
    // each: together they must be 0, 1, 2, ...
    for got in seen.values_mut() {
        got.sort_unstable();
    }
    let (total, bytes) = {
        let acked = acked.lock();
        let mut total = 0;
        for w in 0..writers {
            let got = seen.remove(&w).unwrap_or_default();
            // Exactly once and in order: the log holds 0, 1, 2, ... with no gap
            // and no repeat (a retried seq never applies twice).
            let expected: Vec<u64> = (0..got.len() as u64).collect();
            assert_eq!(got, expected, "writer {w}: seqs in the log (seed {seed})");
            // Every acknowledged append is there.
            for &a in &acked[w] {
                assert!(
                    a < got.len() as u64,
                    "writer {w}: acknowledged seq {a} lost (seed {seed})"
                );
            }
            total += got.len();
        }
        assert!(
            total > writers * CYCLES,
            "the load made too little progress to mean anything: {total} appends"
        );
        // The load passed chunk boundaries: chunks were sealed (and dropped from
        // the stream files) between the kills or, when the kills came too close
        // together for an upload to finish, by this last start, which seals the
        // chunks that were complete and not yet sealed (so wait for it, within a
        // deadline, rather than count at once).
        let bytes: usize = (0..writers)
            .flat_map(|w| (0..acked[w].len() as u64).map(move |seq| message(scale, w, seq).len()))
            .sum();
        (total, bytes)
    };
    if !scale.large {
        eprintln!("crash test: {kills} kills, {total} appends to {streams} streams verified ({bytes} bytes)");
        return;
    }
    assert!(
        bytes / streams > 4 << 20,
        "the load did not reach a chunk boundary: {bytes} bytes in {streams} streams"
    );
    let objects = dir.path().join("objects");
    let deadline = Instant::now() + Duration::from_secs(60);
    let chunks = loop {
        let chunks = count_files(&objects);
        if chunks > 0 {
            break chunks;
        }
        assert!(
            Instant::now() < deadline,
            "no chunk was sealed; the test missed sealing"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    eprintln!("crash test: {kills} kills, {total} appends verified, {chunks} sealed chunks");
    drop(proc);
}

/// Writes a torn frame (a header promising more bytes than follow) and some
/// garbage right after the last whole frame of the newest WAL segment, as a
/// write cut short by a crash leaves it (over the zeros the segment was
/// filled with ahead of the writer, or at its end).
fn tear_wal_tail(data: &Path) {
    let wal = data.join("wal");
    let mut segments: Vec<_> = std::fs::read_dir(&wal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    segments.sort();
    let last = segments.last().expect("a WAL segment");
    let mut bytes = std::fs::read(last).unwrap();
    let mut end = 0;
    while let Ok(Some((_, used))) = origin::store::record::decode(&bytes[end..]) {
        end += used;
    }
    let mut torn = Vec::new();
    torn.extend_from_slice(&1000u32.to_le_bytes());
    torn.extend_from_slice(&0xdead_beefu32.to_le_bytes());
    torn.extend_from_slice(b"\x01\x02half a record that never finished");
    let tail = end + torn.len();
    if bytes.len() < tail {
        bytes.resize(tail, 0);
    }
    bytes[end..tail].copy_from_slice(&torn);
    std::fs::write(last, bytes).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_survives_sigkill_and_a_torn_tail_is_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let proc = spawn_origin(dir.path());
    let base = format!("http://{}", proc.addr);

    let json = format!("{base}/v1/stream/k/json");
    let r = client
        .put(&json)
        .header("content-type", "application/json")
        .header("stream-ttl", "3600")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let incarnation = common::header(&r, "stream-incarnation").unwrap();
    let r = post_json(&client, &json, 3, 0, r#"[{"a": 1}, {"b": [2, 3]}]"#).await;
    assert_eq!(r.status(), 200);
    let (off, next) = (
        common::header(&r, "stream-offset").unwrap(),
        common::header(&r, "stream-next-offset").unwrap(),
    );

    let closed = format!("{base}/v1/stream/k/closed");
    let r = client
        .put(&closed)
        .header("content-type", "text/plain")
        .body("bye")
        .header("stream-closed", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let seq = format!("{base}/v1/stream/k/seq");
    client
        .put(&seq)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    let r = client
        .post(&seq)
        .header("content-type", "text/plain")
        .header("stream-seq", "b")
        .body("1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let deleted = format!("{base}/v1/stream/k/deleted");
    client.put(&deleted).body("gone").send().await.unwrap();
    assert_eq!(client.delete(&deleted).send().await.unwrap().status(), 204);

    drop(proc); // SIGKILL
    tear_wal_tail(dir.path());
    let proc = spawn_origin(dir.path());
    let base2 = format!("http://{}", proc.addr);
    let json = json.replace(&base, &base2);
    let closed = closed.replace(&base, &base2);
    let seq = seq.replace(&base, &base2);
    let deleted = deleted.replace(&base, &base2);

    let r = client.head(&json).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(common::header(&r, "stream-ttl").as_deref(), Some("3600"));
    assert_eq!(
        common::header(&r, "stream-incarnation").as_deref(),
        Some(incarnation.as_str())
    );
    assert_eq!(
        common::header(&r, "stream-next-offset").as_deref(),
        Some(next.as_str())
    );
    let body = client
        .get(format!("{json}?offset=-1"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        body, "{\"a\":1}\n{\"b\":[2,3]}\n",
        "no torn bytes are served"
    );
    // The producer's state survived: the same request is a duplicate with
    // the original offsets, and the next seq applies.
    let retry = post_json(&client, &json, 3, 0, r#"[{"a": 1}, {"b": [2, 3]}]"#).await;
    assert_eq!(retry.status(), 204);
    assert_eq!(common::header(&retry, "stream-offset"), Some(off));
    assert_eq!(common::header(&retry, "stream-next-offset"), Some(next));
    let stale = post_json(&client, &json, 2, 1, "1").await;
    assert_eq!(stale.status(), 403);

    let r = client
        .get(format!("{closed}?offset=-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(common::header(&r, "stream-closed").as_deref(), Some("true"));
    assert_eq!(r.text().await.unwrap(), "bye");
    let r = client
        .post(&seq)
        .header("content-type", "text/plain")
        .header("stream-seq", "a")
        .body("2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 409, "Stream-Seq survived");
    assert_eq!(
        client.head(&deleted).send().await.unwrap().status(),
        404,
        "the delete survived"
    );

    // A graceful stop and start (from the checkpoint alone) gives the same.
    let mut proc = proc;
    // SIGTERM: the origin checkpoints and exits 0.
    let pid = proc.child.id() as i32;
    let rc = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(pid.to_string())
        .status()
        .unwrap();
    assert!(rc.success());
    let status = proc.child.wait().unwrap();
    assert!(status.success(), "SIGTERM stops cleanly: {status:?}");
    // The stop checkpointed, retiring every segment the crash recovery had
    // replayed: the next start replays nothing.
    let proc = spawn_origin(dir.path());
    assert_eq!(
        proc.records_replayed(),
        0,
        "the stop's checkpoint covers the whole log"
    );
    let base3 = format!("http://{}", proc.addr);
    let body = client
        .get(format!("{}?offset=-1", json.replace(&base2, &base3)))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, "{\"a\":1}\n{\"b\":[2,3]}\n");
}

/// A JSON append by producer `p` with the given epoch and sequence number.
async fn post_json(
    client: &reqwest::Client,
    url: &str,
    epoch: u64,
    seq: u64,
    body: &'static str,
) -> reqwest::Response {
    client
        .post(url)
        .header("content-type", "application/json")
        .header("producer-id", "p")
        .header("producer-epoch", epoch.to_string())
        .header("producer-seq", seq.to_string())
        .body(body)
        .send()
        .await
        .unwrap()
}
