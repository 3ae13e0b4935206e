//! Chaos: three origin processes, each in a network namespace of its own
//! (`common::netns`), and an edge (`--origin A,B,C`) on SeaweedFS. Writers
//! with producer headers append to binary and JSON streams, one of them a
//! fork, each append sent to a random one of the edge and the three
//! origins and retried there and elsewhere while the answer is 503 or
//! none. Meanwhile, cycle after cycle in random order, the owner or a
//! random origin is killed with `kill -9` (its data directory deleted and
//! the origin restarted empty on its address), paused with SIGSTOP past
//! its lease and woken with SIGCONT, cut from the bucket (its packets
//! dropped both ways, or only the bucket's answers to it), or cut from the
//! other origins, for a while. At the end every acknowledged append is
//! present exactly once and in order, read through every origin and the
//! edge, byte-exact; nothing else is. A webhook subscription to every
//! stream runs all along (on whichever origin owns the partition, moving
//! with it): at the end every acknowledged append is covered by a
//! delivered wake.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;

use crate::common::netns::Net;
use crate::common::process::Proc;
use crate::common::seaweed::Seaweed;

use super::network::{NAMES, PORT};

const BINARY_STREAMS: usize = 4;
const JSON_STREAMS: usize = 2;
/// How long a cut lasts.
const CUT_FOR: Duration = Duration::from_millis(2500);

fn start(net: &Net, env: &[(String, String)], data: &Path, i: usize) -> Proc {
    // The webhook receiver listens at the gateway.
    let allow = format!("{}/32", net.gateway());
    // Checkpoints and WAL deletes all the time, racing the claims.
    let more = [
        "--region-checkpoint-objects",
        "32",
        "--region-checkpoint-interval",
        "250ms",
        "--webhook-allow-http",
        "true",
        "--webhook-allow",
        &allow,
    ];
    super::network::start_in(net, env, data, i, "chaos", &more)
}

/// Declares a webhook subscription to every stream under the root,
/// retrying while the region answers 503.
async fn subscribe(client: &reqwest::Client, base: &str, hook: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let r = client
            .put(format!("{base}/v1/stream/__ds/subscriptions/chaos"))
            .json(&serde_json::json!({
                "type": "webhook", "pattern": "*", "lease_ttl_ms": 2000,
                "webhook": {"url": hook},
            }))
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        if let Ok(r) = r {
            if r.status() == 201 {
                return;
            }
            assert_eq!(r.status(), 503, "declaring the subscription");
        }
        assert!(Instant::now() < deadline, "the subscription was never made");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until a delivered wake covers each writer's stream up to its
/// tail (read with a leader read: everything acknowledged); answers the
/// streams not covered within 60 s.
async fn covered_by_wakes(
    client: &reqwest::Client,
    base: &str,
    writers: &[Writer],
    receiver: &super::receiver::Receiver,
) -> Vec<String> {
    let mut tails = Vec::new();
    for w in writers {
        let r = client
            .head(format!("{base}{}?consistency=leader", w.path))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "HEAD {}", w.path);
        let tail = r.headers()["stream-next-offset"]
            .to_str()
            .unwrap()
            .to_owned();
        let rel = w.path.trim_start_matches("/v1/stream/").to_owned();
        tails.push((rel, tail));
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let uncovered: Vec<String> = {
            let c = receiver.covered.lock();
            tails
                .iter()
                .filter(|(rel, tail)| c.tails.get(rel).is_none_or(|t| t < tail))
                .map(|(rel, tail)| format!("{rel} up to {tail} (delivered {:?})", c.tails.get(rel)))
                .collect()
        };
        if uncovered.is_empty() || Instant::now() > deadline {
            return uncovered;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What a cycle does to its victim.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Blow {
    /// `kill -9`, its data directory deleted, started again empty.
    Kill,
    /// SIGSTOP past its lease, then SIGCONT.
    Pause,
    /// Its packets to and from the bucket dropped for a while.
    CutFromBucket,
    /// Only the bucket's packets to it dropped (its puts land unanswered).
    BucketAnswersLost,
    /// Its packets to and from the other origins dropped for a while.
    CutFromPeers,
}

/// Every blow at least once, in random order.
fn blows() -> Vec<Blow> {
    use rand::seq::SliceRandom;
    let mut blows = vec![
        Blow::Kill,
        Blow::Kill,
        Blow::Pause,
        Blow::CutFromBucket,
        Blow::BucketAnswersLost,
        Blow::CutFromPeers,
        Blow::Kill,
        Blow::CutFromBucket,
    ];
    blows.shuffle(&mut rand::rng());
    blows
}

/// One writer's stream and what was acknowledged on it, in order.
pub(super) struct Writer {
    pub(super) path: String,
    pub(super) json: bool,
    /// The fork's inherited prefix (empty for the others).
    pub(super) inherited: String,
    pub(super) acked: parking_lot::Mutex<Vec<String>>,
}

/// Sends one append (as producer `seq`) to random targets until one
/// acknowledges it (200, or 204: a retry of one that had landed); any
/// other answer but a 50x is the error returned.
pub(super) async fn append_once(
    client: &reqwest::Client,
    targets: &[String],
    w: &Writer,
    seq: u64,
    body: &str,
) -> Result<(), String> {
    let started = Instant::now();
    loop {
        let target = &targets[rand::rng().random_range(0..targets.len())];
        let content_type = if w.json {
            "application/json"
        } else {
            "application/octet-stream"
        };
        let sent = client
            .post(format!("{target}{}", w.path))
            .header("content-type", content_type)
            .header("producer-id", "chaos")
            .header("producer-epoch", "0")
            .header("producer-seq", seq.to_string())
            .body(body.to_owned())
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        match sent {
            Ok(r) if r.status() == 200 || r.status() == 204 => return Ok(()),
            Ok(r) if r.status() == 503 || r.status() == 502 || r.status() == 504 => {}
            Ok(r) => {
                let status = r.status();
                let body = r.text().await.unwrap_or_default();
                return Err(format!(
                    "{} append {seq} through {target}: {status} {body}",
                    w.path
                ));
            }
            Err(_) => {}
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{} append {seq} never acknowledged",
            w.path
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The whole stream through `base`, retrying while the region answers 503.
pub(super) async fn read_whole(client: &reqwest::Client, base: &str, path: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Ok(r) = client
            .get(format!("{base}{path}?offset=-1"))
            .timeout(Duration::from_secs(10))
            .send()
            .await
        {
            if r.status() == 200 {
                return r.text().await.unwrap();
            }
            assert!(
                [502, 503, 504].contains(&r.status().as_u16()),
                "{base}{path}: {}",
                r.status()
            );
        }
        assert!(Instant::now() < deadline, "{base}{path} never answered");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The messages a read holds: NDJSON lines as JSON values for a JSON
/// stream, the bodies as written (`<w:seq>`) for a binary one.
pub(super) fn messages(w: &Writer, text: &str) -> Vec<String> {
    if w.json {
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l)
                    .unwrap()
                    .to_string()
            })
            .collect()
    } else {
        text.split_inclusive('>').map(str::to_owned).collect()
    }
}

/// What a read of `w`'s stream must begin with once `acked` was
/// acknowledged: its inherited prefix, then those appends, as
/// [`messages`] reads them.
pub(super) fn expected_of(w: &Writer, acked: &[String]) -> Vec<String> {
    let mut expected = messages(w, &w.inherited);
    expected.extend(acked.iter().map(|b| {
        if w.json {
            serde_json::from_str::<serde_json::Value>(b)
                .unwrap()
                .to_string()
        } else {
            b.clone()
        }
    }));
    expected
}

/// Reads each writer's stream through every one of `bases` and checks
/// that it holds exactly what was acknowledged, once each and in order (a
/// follower's replica may lag its owner by a round or two at
/// `consistency=local`: each is read again until it has caught up, for
/// 30 s at most). Answers (acknowledged, lost, duplicated); panics at the
/// first read that differs, `what` naming the run.
pub(super) async fn every_append_once<'a>(
    client: &reqwest::Client,
    writers: impl Iterator<Item = &'a Writer>,
    bases: &[String],
    what: &str,
) -> (usize, usize, usize) {
    let mut acknowledged = 0;
    let (mut lost, mut duplicated) = (0, 0);
    for w in writers {
        let acked = w.acked.lock().clone();
        acknowledged += acked.len();
        let expected = expected_of(w, &acked);
        for base in bases {
            let deadline = Instant::now() + Duration::from_secs(30);
            let got = loop {
                let got = messages(w, &read_whole(client, base, &w.path).await);
                if got == expected || Instant::now() >= deadline {
                    break got;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            };
            lost += expected.iter().filter(|m| !got.contains(m)).count();
            duplicated += got
                .len()
                .saturating_sub(got.iter().collect::<std::collections::HashSet<_>>().len());
            assert_eq!(got, expected, "{what}: {} through {base}", w.path);
        }
    }
    (acknowledged, lost, duplicated)
}

/// Leader reads of random streams through random targets while the
/// writers go on: each one answered 200 must hold every append
/// acknowledged before it was sent, in order (`consistency=leader`; an
/// owner paused past its lease answers 503, never its old state). Returns
/// the reads checked, and the first that was not so.
async fn leader_reads(
    client: reqwest::Client,
    writers: Arc<Vec<Writer>>,
    targets: Arc<Vec<String>>,
    stop: Arc<AtomicBool>,
) -> (usize, Option<String>) {
    let mut checked = 0;
    while !stop.load(Ordering::Relaxed) {
        let (i, t) = {
            let mut rng = rand::rng();
            (
                rng.random_range(0..writers.len()),
                rng.random_range(0..targets.len()),
            )
        };
        let w = &writers[i];
        let acked = w.acked.lock().clone();
        let url = format!("{}{}?offset=-1&consistency=leader", targets[t], w.path);
        let sent = client
            .get(&url)
            .timeout(Duration::from_secs(10))
            .send()
            .await;
        let Ok(r) = sent else { continue };
        match r.status().as_u16() {
            200 => {}
            502..=504 => {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            s => return (checked, Some(format!("{url}: {s}"))),
        }
        let got = messages(w, &r.text().await.unwrap());
        let expected = expected_of(w, &acked);
        if !got.starts_with(&expected) {
            return (
                checked,
                Some(format!(
                    "{url} missed what was acknowledged before it was sent: {} acknowledged, read {}; last read {:?}",
                    expected.len(),
                    got.len(),
                    &got[got.len().saturating_sub(4)..]
                )),
            );
        }
        checked += 1;
    }
    (checked, None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_loses_and_duplicates_no_acknowledged_append() {
    let net = Net::new(NAMES.len());
    let weed = Seaweed::start_on(&net.gateway());
    let env = weed.env();
    let s3_port = weed.s3_port();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let mut procs: Vec<Proc> = (0..NAMES.len())
        .map(|i| start(&net, &env, &dir.path().join(NAMES[i]), i))
        .collect();
    let origins: Vec<String> = (0..NAMES.len())
        .map(|i| format!("http://{}:{PORT}", net.ip(i)))
        .collect();
    for o in &origins {
        super::origins::wait_serving(&client, o).await;
    }
    super::takeover::the_owner(&client, &origins).await;
    let edge = super::origins::InProcessEdge::start(&origins).await;
    let edge_base = edge.base.clone();
    let mut targets = origins.clone();
    targets.push(edge_base.clone());

    // A subscription to every stream, from before the first.
    let receiver = super::receiver::Receiver::start(&net.gateway()).await;
    subscribe(&client, &origins[0], &receiver.url).await;

    // The streams, and a fork of the first once it holds something.
    let mut writers = Vec::new();
    for i in 0..BINARY_STREAMS + JSON_STREAMS {
        writers.push(Writer {
            path: format!("/v1/stream/chaos-{i}"),
            json: i >= BINARY_STREAMS,
            inherited: String::new(),
            acked: Default::default(),
        });
    }
    for w in &writers {
        let ct = if w.json {
            "application/json"
        } else {
            "application/octet-stream"
        };
        let r = client
            .put(format!("{edge_base}{}", w.path))
            .header("content-type", ct)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "create {}", w.path);
    }
    let mut first_seq = vec![0u64; writers.len() + 1];
    for seq in 0..10u64 {
        let body = format!("<0:{seq}>");
        append_once(&client, &targets, &writers[0], seq, &body)
            .await
            .unwrap();
        writers[0].acked.lock().push(body);
    }
    first_seq[0] = 10;
    let fork_path = "/v1/stream/chaos-fork".to_owned();
    let r = client
        .put(format!("{}{fork_path}", origins[1]))
        .header("content-type", "application/octet-stream")
        .header("stream-forked-from", &writers[0].path)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "fork");
    let inherited = read_whole(&client, &origins[2], &fork_path).await;
    assert_eq!(inherited, writers[0].acked.lock().concat());
    writers.push(Writer {
        path: fork_path,
        json: false,
        inherited,
        acked: Default::default(),
    });
    let writers: Arc<Vec<Writer>> = Arc::new(writers);
    let targets = Arc::new(targets);

    let stop = Arc::new(AtomicBool::new(false));
    // An append refused otherwise than by a 50x stops every writer, and the
    // check below still runs, so what was lost (if anything) is known.
    let refused: Arc<parking_lot::Mutex<Vec<String>>> = Default::default();
    let tasks: Vec<_> = (0..writers.len())
        .map(|i| {
            let (client, writers, targets, stop, refused) = (
                client.clone(),
                writers.clone(),
                targets.clone(),
                stop.clone(),
                refused.clone(),
            );
            let first = first_seq[i];
            tokio::spawn(async move {
                let w = &writers[i];
                let mut seq = first;
                while !stop.load(Ordering::Relaxed) {
                    let body = if w.json {
                        serde_json::json!({"w": i, "s": seq}).to_string()
                    } else {
                        format!("<{i}:{seq}>")
                    };
                    if let Err(e) = append_once(&client, &targets, w, seq, &body).await {
                        refused.lock().push(e);
                        stop.store(true, Ordering::Relaxed);
                        return;
                    }
                    w.acked.lock().push(body);
                    seq += 1;
                }
            })
        })
        .collect();
    let leader = tokio::spawn(leader_reads(
        client.clone(),
        writers.clone(),
        targets.clone(),
        stop.clone(),
    ));

    let mut done: Vec<Blow> = Vec::new();
    // Killed origins, kept for their logs.
    let mut dead: Vec<(String, Proc)> = Vec::new();
    let gateway = net.gateway();
    for (cycle, blow) in blows().into_iter().enumerate() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1500)).await;
        // Every other cycle the owner itself, else any origin.
        let victim = if cycle % 2 == 0 {
            super::takeover::the_owner(&client, &origins).await
        } else {
            rand::rng().random_range(0..NAMES.len())
        };
        match blow {
            Blow::Pause => {
                procs[victim].signal("STOP");
                tokio::time::sleep(Duration::from_millis(2500)).await;
                procs[victim].signal("CONT");
            }
            Blow::Kill => {
                procs[victim].kill();
                let data = dir.path().join(NAMES[victim]);
                std::fs::remove_dir_all(&data).unwrap();
                let old = std::mem::replace(&mut procs[victim], start(&net, &env, &data, victim));
                dead.push((format!("{}-killed-in-cycle-{cycle}", NAMES[victim]), old));
            }
            Blow::CutFromBucket | Blow::BucketAnswersLost | Blow::CutFromPeers => {
                match blow {
                    Blow::CutFromBucket => {
                        net.drop_out(victim, &gateway, Some(s3_port));
                        net.drop_in(victim, &gateway, Some(s3_port));
                    }
                    Blow::BucketAnswersLost => net.drop_in(victim, &gateway, Some(s3_port)),
                    _ => {
                        for other in (0..NAMES.len()).filter(|o| *o != victim) {
                            net.drop_out(victim, &net.ip(other), None);
                            net.drop_in(victim, &net.ip(other), None);
                        }
                    }
                }
                tokio::time::sleep(CUT_FOR).await;
                net.heal(victim);
            }
        }
        done.push(blow);
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let (leader_checked, stale) = leader.await.unwrap();
    assert!(stale.is_none(), "a leader read: {}", stale.unwrap());
    assert!(leader_checked > 0, "no leader read was answered");

    let refused = refused.lock().clone();
    if !refused.is_empty() {
        // Keep every origin's log, and say what each stream lacks.
        let logs = std::env::temp_dir().join(format!("chaos-logs-{}", std::process::id()));
        std::fs::create_dir_all(&logs).unwrap();
        let live = NAMES.iter().map(|n| n.to_string()).zip(procs.iter());
        for (name, p) in dead.iter().map(|(n, p)| (n.clone(), p)).chain(live) {
            std::fs::write(logs.join(format!("{name}.log")), p.log_lines().join("\n")).unwrap();
        }
        for w in writers.iter() {
            let acked = w.acked.lock().clone();
            let got = messages(w, &read_whole(&client, &origins[0], &w.path).await);
            let missing: Vec<&String> = acked.iter().filter(|m| !got.contains(m)).collect();
            eprintln!(
                "{}: {} acknowledged, {} read, missing {:?}; last acknowledged {:?}; last read {:?}",
                w.path,
                acked.len(),
                got.len(),
                missing,
                &acked[acked.len().saturating_sub(6)..],
                &got[got.len().saturating_sub(6)..]
            );
        }
        panic!(
            "appends refused (origin logs in {}): {refused:#?}",
            logs.display()
        );
    }

    let (acknowledged, lost, duplicated) =
        every_append_once(&client, writers.iter(), &targets, "chaos").await;
    // Reads the followers answered from their replicas (decision 0018).
    let mut local_reads = 0;
    for base in origins.iter() {
        let text = crate::common::metrics_at(&client, base).await;
        local_reads +=
            crate::common::metric_in(&text, "ds_origin_region_local_reads_total").unwrap_or(0);
    }
    let owner = super::takeover::the_owner(&client, &origins).await;
    let uncovered = covered_by_wakes(&client, &origins[owner], &writers, &receiver).await;
    let deliveries = receiver.covered.lock().deliveries;
    let metrics = crate::common::metrics_at(&client, &origins[owner]).await;
    let epoch = crate::common::metric_in(&metrics, "ds_origin_region_epoch").unwrap();
    let (wal, checkpoint) = super::checkpoints::bucket(&weed, "chaos").await;
    eprintln!(
        "chaos: {} cycles ({done:?}: kill -9 with the disk deleted, SIGSTOP past the lease, cuts from the bucket, \
         the bucket's answers lost, cuts from the peers), \
         final epoch {epoch}, {acknowledged} acknowledged appends on {} streams, lost {lost}, duplicated {duplicated}, \
         {leader_checked} leader reads each holding every append acknowledged before it, \
         {local_reads} reads answered from a follower's replica (by the origins alive at the end); \
         {deliveries} webhook deliveries, streams not covered by a delivered wake: {uncovered:?}; \
         newest checkpoint at WAL number {:?}, {} WAL objects left",
        done.len(),
        writers.len(),
        checkpoint.last(),
        wal.len()
    );
    assert!(
        !checkpoint.is_empty(),
        "checkpoints were made (and the WAL below them deleted) while origins died"
    );
    assert!(
        epoch >= 3,
        "the partition moved at least twice (epoch {epoch})"
    );
    assert!(
        acknowledged > 100,
        "the writers made progress: {acknowledged}"
    );
    assert_eq!((lost, duplicated), (0, 0));
    assert!(
        uncovered.is_empty(),
        "acknowledged appends no delivered wake covers: {uncovered:?}"
    );
    drop(edge);
    drop(procs);
    drop(dead);
    drop(weed);
    drop(net);
}
