//! Network faults, not process faults: three origin processes, each in a
//! network namespace of its own (`common::netns`), on SeaweedFS at the
//! test network's gateway, with writers appending through every origin.
//! A fault is a rule in one origin's own `iptables` that drops packets
//! without a reset, so connections hang rather than fail:
//!
//! - the owner cut from the bucket, both ways, while its clients and peers
//!   still reach it;
//! - only the owner's packets to the bucket dropped (answers would still
//!   arrive), and only the bucket's answers to it dropped (its requests
//!   still land: puts whose outcome it never learns);
//! - the owner cut from its peers, not from the bucket;
//! - the bucket answering every origin 2 s late (`common::delay_proxy`:
//!   every put times out at the write path's bound with its outcome open,
//!   settled by reading it back).
//!
//! Each ends, once the link is back, with every acknowledged append present
//! exactly once and in order through every origin. While the owner is cut
//! from the bucket, what it answers is `503` + `Retry-After` within the
//! write path's bound (`--object-write-timeout`), never an
//! acknowledgement of an append it has not put, and another origin takes
//! the partition over.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::chaos::{append_once, every_append_once, Writer};
use crate::common::delay_proxy::DelayProxy;
use crate::common::netns::Net;
use crate::common::process::{spawn_at, Proc};
use crate::common::region_roles::serving;
use crate::common::seaweed::Seaweed;

pub(super) const NAMES: [&str; 3] = ["a", "b", "c"];
pub(super) const PORT: u16 = 4437;
const STREAMS: usize = 3;
/// How long a write waits for the bucket before it answers 503.
const WRITE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the fault lasts.
const FAULT_FOR: Duration = Duration::from_millis(4500);
/// How late a slow bucket answers.
const BUCKET_LATE: Duration = Duration::from_secs(2);

#[derive(Clone, Copy, Debug, PartialEq)]
enum Fault {
    /// The owner's packets to the bucket and the bucket's to it dropped.
    BucketCut,
    /// Only the owner's packets to the bucket dropped.
    BucketOutbound,
    /// Only the bucket's packets to the owner dropped.
    BucketInbound,
    /// The owner's packets to and from the other origins dropped.
    PeersCut,
    /// The bucket's every answer, to every origin, 2 s late.
    SlowBucket,
}

impl Fault {
    fn cuts_the_bucket(self) -> bool {
        matches!(
            self,
            Fault::BucketCut | Fault::BucketOutbound | Fault::BucketInbound
        )
    }
}

fn start(net: &Net, env: &[(String, String)], data: &Path, i: usize) -> Proc {
    start_in(net, env, data, i, "network", &[])
}

/// Origin `i` of a test network's region under `prefix` (`--node-id` from
/// [`NAMES`]; lease 1 s, renewal 250 ms, `--object-write-timeout 2s`),
/// listening on its own address at [`PORT`], with `more` flags.
pub(super) fn start_in(
    net: &Net,
    env: &[(String, String)],
    data: &Path,
    i: usize,
    prefix: &str,
    more: &[&str],
) -> Proc {
    let url = Seaweed::url(prefix);
    let timeout = format!("{}ms", WRITE_TIMEOUT.as_millis());
    let mut flags = vec![
        "--lease",
        "1s",
        "--lease-renew",
        "250ms",
        "--object-write-timeout",
        &timeout,
    ];
    flags.extend_from_slice(more);
    let args = super::origins::region_args(data, &url, NAMES[i], &flags);
    let runner = net.runner(i);
    spawn_at(&format!("{}:{PORT}", net.ip(i)), &runner, &args, env)
}

/// The one origin that serves, once exactly one does and the others
/// follow (asking only `among`).
async fn single_owner(client: &reqwest::Client, bases: &[String], among: &[usize]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut owners = Vec::new();
        let mut followers = 0;
        for &i in among {
            match serving(client, &bases[i]).await {
                Some(true) => owners.push(i),
                Some(false) => followers += 1,
                None => {}
            }
        }
        if owners.len() == 1 && followers == among.len() - 1 {
            return owners[0];
        }
        assert!(Instant::now() < deadline, "no single owner: {owners:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What one origin answered to appends sent to it alone while it was cut.
#[derive(Default, Debug)]
struct Probed {
    acknowledged: usize,
    refused_with_retry_after: usize,
    /// Answers that were neither (status, and whether `Retry-After` came).
    other: Vec<(u16, bool)>,
    /// No answer within the client's patience.
    unanswered: usize,
    slowest: Duration,
}

/// Appends to `w`'s stream through `base` alone until `stop`, as the
/// producer's next number, that number again after anything but an
/// acknowledgement; each acknowledged one is recorded in `w`. A `503`
/// leaves the append's outcome open (its put may still land), so the last
/// one refused is then sent through `everyone` until acknowledged: `204`
/// if it had landed, as a producer's retry learns.
async fn probe(
    client: reqwest::Client,
    base: String,
    everyone: Arc<Vec<String>>,
    w: Arc<Writer>,
    stop: Arc<AtomicBool>,
) -> Probed {
    let mut probed = Probed::default();
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let body = format!("<p:{seq}>");
        let sent = Instant::now();
        let answer = client
            .post(format!("{base}{}", w.path))
            .header("content-type", "application/octet-stream")
            .header("producer-id", "chaos")
            .header("producer-epoch", "0")
            .header("producer-seq", seq.to_string())
            .body(body.clone())
            .timeout(WRITE_TIMEOUT * 4)
            .send()
            .await;
        probed.slowest = probed.slowest.max(sent.elapsed());
        match answer {
            Ok(r) if r.status() == 200 || r.status() == 204 => {
                probed.acknowledged += 1;
                w.acked.lock().push(body);
                seq += 1;
            }
            Ok(r) if r.status() == 503 && r.headers().contains_key("retry-after") => {
                probed.refused_with_retry_after += 1;
            }
            Ok(r) => probed
                .other
                .push((r.status().as_u16(), r.headers().contains_key("retry-after"))),
            Err(_) => probed.unanswered += 1,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if probed.refused_with_retry_after + probed.unanswered + probed.other.len() > 0 {
        let body = format!("<p:{seq}>");
        append_once(&client, &everyone, &w, seq, &body)
            .await
            .expect("the probe's last append, sent again");
        w.acked.lock().push(body);
    }
    probed
}

/// Until `stop`: appends to `w`'s stream through random `targets`, each
/// retried there and elsewhere until acknowledged.
fn write_on(
    client: reqwest::Client,
    targets: Arc<Vec<String>>,
    w: Arc<Writer>,
    tag: usize,
    stop: Arc<AtomicBool>,
    refused: Arc<parking_lot::Mutex<Vec<String>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut seq = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let body = format!("<{tag}:{seq}>");
            if let Err(e) = append_once(&client, &targets, &w, seq, &body).await {
                refused.lock().push(e);
                return;
            }
            w.acked.lock().push(body);
            seq += 1;
        }
    })
}

fn writer(path: &str) -> Arc<Writer> {
    Arc::new(Writer {
        path: path.to_owned(),
        json: false,
        inherited: String::new(),
        acked: Default::default(),
    })
}

/// Cuts the owner with `fault` while writers append through every origin,
/// heals, and checks every acknowledged append through every origin.
async fn under(fault: Fault) {
    let net = Net::new(NAMES.len());
    let weed = Seaweed::start_on(&net.gateway());
    let s3_port = weed.s3_port();
    // The slow bucket: every origin reaches it through a delaying proxy.
    let proxy = match fault {
        Fault::SlowBucket => {
            let to = format!("{}:{s3_port}", net.gateway()).parse().unwrap();
            Some(DelayProxy::start(&net.gateway(), to).await)
        }
        _ => None,
    };
    let mut env = weed.env();
    if let Some(p) = &proxy {
        for (k, v) in &mut env {
            if k == "AWS_ENDPOINT_URL" {
                *v = format!("http://{}", p.addr);
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let client = reqwest::Client::new();
    let procs: Vec<Proc> = (0..NAMES.len())
        .map(|i| start(&net, &env, &dir.path().join(NAMES[i]), i))
        .collect();
    let bases: Vec<String> = (0..NAMES.len())
        .map(|i| format!("http://{}:{PORT}", net.ip(i)))
        .collect();
    for b in &bases {
        super::origins::wait_serving(&client, b).await;
    }
    let all: Vec<usize> = (0..NAMES.len()).collect();
    let owner = single_owner(&client, &bases, &all).await;
    let others: Vec<usize> = all.iter().copied().filter(|i| *i != owner).collect();

    let writers: Vec<Arc<Writer>> = (0..STREAMS)
        .map(|i| writer(&format!("/v1/stream/net-{i}")))
        .collect();
    // Appends sent to one origin alone during the fault: the owner for a
    // cut from the bucket, a follower (which forwards to the owner) for a
    // cut between origins.
    let probed_path = "/v1/stream/net-probe";
    let probe_writer = writer(probed_path);
    for w in writers.iter().chain([&probe_writer]) {
        // A region answers 503 + `Retry-After` while a partition is moving
        // (the spread can still hand one on just after the start); a
        // client sends again, as here, for a bounded while.
        let deadline = Instant::now() + Duration::from_secs(15);
        let r = loop {
            let r = client
                .put(format!("{}{}", bases[owner], w.path))
                .header("content-type", "application/octet-stream")
                .send()
                .await
                .unwrap();
            if r.status() != 503 || Instant::now() >= deadline {
                break r;
            }
            assert!(
                r.headers().contains_key("retry-after"),
                "503 without Retry-After"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        assert_eq!(r.status(), 201, "create {}", w.path);
    }
    let targets = Arc::new(bases.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let refused: Arc<parking_lot::Mutex<Vec<String>>> = Default::default();
    let tasks: Vec<_> = writers
        .iter()
        .enumerate()
        .map(|(i, w)| {
            write_on(
                client.clone(),
                targets.clone(),
                w.clone(),
                i,
                stop.clone(),
                refused.clone(),
            )
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let before_fault: usize = writers.iter().map(|w| w.acked.lock().len()).sum();

    // The fault.
    let gateway = net.gateway();
    match fault {
        Fault::BucketCut => {
            net.drop_out(owner, &gateway, Some(s3_port));
            net.drop_in(owner, &gateway, Some(s3_port));
        }
        Fault::BucketOutbound => net.drop_out(owner, &gateway, Some(s3_port)),
        Fault::BucketInbound => net.drop_in(owner, &gateway, Some(s3_port)),
        Fault::PeersCut => {
            for &o in &others {
                net.drop_out(owner, &net.ip(o), None);
                net.drop_in(owner, &net.ip(o), None);
            }
        }
        Fault::SlowBucket => proxy.as_ref().expect("the proxy").set(BUCKET_LATE),
    }
    let cut_at = Instant::now();
    let probe_stop = Arc::new(AtomicBool::new(false));
    let probed_through = if fault == Fault::PeersCut {
        others[0]
    } else {
        owner
    };
    let prober = tokio::spawn(probe(
        client.clone(),
        bases[probed_through].clone(),
        targets.clone(),
        probe_writer.clone(),
        probe_stop.clone(),
    ));
    // Another origin takes the partition over (a cut from the bucket); a
    // cut from its peers leaves the owner, a slow bucket may or may not.
    let took_over = if fault.cuts_the_bucket() {
        let new = single_owner(&client, &bases, &others).await;
        assert_ne!(new, owner);
        Some(cut_at.elapsed())
    } else {
        None
    };
    let during: usize = writers.iter().map(|w| w.acked.lock().len()).sum();
    tokio::time::sleep(FAULT_FOR.saturating_sub(cut_at.elapsed())).await;
    probe_stop.store(true, Ordering::Relaxed);
    let acked_in_fault: usize =
        writers.iter().map(|w| w.acked.lock().len()).sum::<usize>() - before_fault;
    net.heal(owner);
    if let Some(p) = &proxy {
        p.set(Duration::ZERO);
    }
    let healed_at = Instant::now();
    let probed = prober.await.unwrap();
    let settled = single_owner(&client, &bases, &all).await;
    let settled_in = healed_at.elapsed();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }
    let refused = refused.lock().clone();
    assert!(refused.is_empty(), "appends refused: {refused:#?}");

    // Every acknowledged append once, in order, through every origin.
    let every = writers.iter().chain([&probe_writer]).map(|w| &**w);
    let (acknowledged, lost, duplicated) =
        every_append_once(&client, every, &bases, &format!("{fault:?}")).await;
    eprintln!(
        "{fault:?}: for {FAULT_FOR:?} on owner {}; taken over in {took_over:?}; \
         {acked_in_fault} appends acknowledged during the fault ({} by the takeover); \
         the origin probed alone answered {probed:?}; one owner again ({}) {settled_in:?} after the heal; \
         {acknowledged} acknowledged in all, lost {lost}, duplicated {duplicated}",
        NAMES[owner],
        during - before_fault,
        NAMES[settled],
    );
    assert_eq!((lost, duplicated), (0, 0));
    // With one origin cut, the others go on (a bucket slower than the
    // write path's bound holds every write, as it says: 503s, then the
    // backlog once it is fast again).
    if fault != Fault::SlowBucket {
        assert!(
            acked_in_fault > 0,
            "{fault:?}: the region acknowledged appends while one origin was cut"
        );
    }
    // Whatever the origin probed alone answered, it answered within the
    // write path's bound, with an acknowledgement or 503 + Retry-After.
    assert!(
        probed.other.is_empty() && probed.unanswered == 0,
        "{fault:?}: {probed:?}"
    );
    assert!(
        probed.slowest < WRITE_TIMEOUT * 3,
        "{fault:?}: an answer took {:?}",
        probed.slowest
    );
    if let Some(t) = took_over {
        // The lease (1 s), a renewal or two, and a claim.
        assert!(
            t < Duration::from_secs(10),
            "{fault:?}: takeover took {t:?}"
        );
    }
    drop(procs);
    drop(proxy);
    drop(weed);
    drop(net);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_cut_from_the_bucket_is_taken_over_and_loses_nothing() {
    under(Fault::BucketCut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owners_packets_to_the_bucket_dropped_lose_nothing() {
    under(Fault::BucketOutbound).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_buckets_answers_to_the_owner_dropped_lose_nothing() {
    under(Fault::BucketInbound).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_cut_from_its_peers_loses_nothing() {
    under(Fault::PeersCut).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_that_answers_two_seconds_late_loses_nothing() {
    under(Fault::SlowBucket).await;
}
