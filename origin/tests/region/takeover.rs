//! Three origin processes on one bucket: started at once they race to
//! claim and exactly one serves; every origin answers every request
//! (forwarding to the owner); `kill -9` of the owner with its disk deleted
//! moves the partition within the default lease's bound (≤ 10 s) with no
//! acknowledged append lost; an owner paused past its lease (SIGSTOP) is
//! fenced when it wakes and follows the new owner.

use std::time::{Duration, Instant};

use super::origins::{create, make_key, serving, start, start_with, wait_serving};
use crate::common::process::Proc;
use crate::common::seaweed::Seaweed;

/// The one origin of `bases` that serves, once exactly one does (and every
/// other answers as a follower).
pub async fn the_owner(client: &reqwest::Client, bases: &[String]) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let mut owners = Vec::new();
        let mut followers = 0;
        for (i, base) in bases.iter().enumerate() {
            match serving(client, base).await {
                Some(true) => owners.push(i),
                Some(false) => followers += 1,
                None => {}
            }
        }
        if owners.len() == 1 && followers == bases.len() - 1 {
            return owners[0];
        }
        assert!(Instant::now() < deadline, "no single owner: {owners:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Appends `body` as the producer's `seq` through `base`, retrying while
/// the region answers 503 (moving the partition); returns the time taken.
async fn append_until_acknowledged(
    client: &reqwest::Client,
    bases: &[&str],
    seq: u64,
    body: &str,
) -> Duration {
    let started = Instant::now();
    for attempt in 0usize.. {
        let base = bases[attempt % bases.len()];
        let sent = client
            .post(format!("{base}/v1/stream/moved"))
            .header("content-type", "application/octet-stream")
            .header("producer-id", "writer")
            .header("producer-epoch", "0")
            .header("producer-seq", seq.to_string())
            .body(body.to_owned())
            .timeout(Duration::from_secs(15))
            .send()
            .await;
        match sent {
            // 204: a retry of one that landed before its answer was lost.
            Ok(r) if r.status() == 200 || r.status() == 204 => return started.elapsed(),
            Ok(r) => assert_eq!(r.status(), 503, "append {seq} through {base}"),
            Err(_) => {}
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "append {seq} never landed"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    unreachable!()
}

/// The whole stream through `url`, retrying while the region answers 503
/// (a follower learns of a new owner at its next look, within a renewal).
async fn read_all(client: &reqwest::Client, url: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let resp = client
            .get(format!("{url}?offset=-1&consistency=leader"))
            .send()
            .await
            .unwrap();
        if resp.status() == 200 {
            return resp.text().await.unwrap();
        }
        assert_eq!(resp.status(), 503, "reading {url}");
        assert!(Instant::now() < deadline, "{url} kept answering 503");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The stream `moved` read through each of `bases` is `acknowledged`.
async fn read_everywhere(client: &reqwest::Client, bases: &[String], acknowledged: &str) {
    for b in bases {
        assert_eq!(
            read_all(client, &format!("{b}/v1/stream/moved")).await,
            acknowledged,
            "through {b}"
        );
    }
}

fn base(p: &Proc) -> String {
    format!("http://{}", p.addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_region_of_three_has_one_owner_and_replaces_a_dead_one_within_ten_seconds() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let names = ["a", "b", "c"];
    // Started together on a fresh prefix: all three find nobody and claim.
    let mut procs: Vec<Proc> = names
        .iter()
        .map(|n| start(&weed, &dir.path().join(n), "three", n))
        .collect();
    let mut bases: Vec<String> = procs.iter().map(base).collect();
    for b in &bases {
        wait_serving(&client, b).await;
    }
    let owner = the_owner(&client, &bases).await;
    // The claim race is settled: it stays settled.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(the_owner(&client, &bases).await, owner);

    // Any origin answers any request: create through a follower, append
    // through each in turn, read through each.
    let follower = (owner + 1) % 3;
    assert_eq!(
        create(&client, &format!("{}/v1/stream/moved", bases[follower])).await,
        201
    );
    let mut acknowledged = String::new();
    for seq in 0..30u64 {
        let body = format!("[{seq:03}]");
        let through = bases[seq as usize % 3].as_str();
        append_until_acknowledged(&client, &[through], seq, &body).await;
        acknowledged.push_str(&body);
    }
    read_everywhere(&client, &bases, &acknowledged).await;

    // The owner's machine goes, its disk with it.
    let dead = procs.remove(owner);
    let dead_base = bases.remove(owner);
    let killed = Instant::now();
    drop(dead);
    std::fs::remove_dir_all(dir.path().join(names[owner])).unwrap();
    // The survivors stay ready all through the takeover (one of them
    // replays the partition meanwhile): a balancer keeps sending to both.
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let probes = {
        let (client, bases) = (client.clone(), bases.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while !*stopped.borrow_and_update() {
                for b in &bases {
                    let r = client.get(format!("{b}/readyz")).send().await;
                    seen.push(r.map(|r| r.status().as_u16()).unwrap_or(0));
                }
                let _ = tokio::time::timeout(Duration::from_millis(50), stopped.changed()).await;
            }
            seen
        })
    };
    let survivors: Vec<&str> = bases.iter().map(String::as_str).collect();
    append_until_acknowledged(&client, &survivors, 30, "[030]").await;
    let takeover = killed.elapsed();
    stop.send_replace(true);
    let seen = probes.await.unwrap();
    assert!(seen.len() >= 4, "probed during the takeover: {seen:?}");
    assert!(
        seen.iter().all(|s| *s == 200),
        "a survivor went unready during the takeover: {seen:?}"
    );
    acknowledged.push_str("[030]");
    eprintln!("takeover: kill -9 to the first acknowledged append in {takeover:?}");
    assert!(
        takeover <= Duration::from_secs(10),
        "takeover took {takeover:?}"
    );
    read_everywhere(&client, &bases, &acknowledged).await;
    let new_owner = the_owner(&client, &bases).await;
    let metrics = crate::common::metrics_at(&client, &bases[new_owner]).await;
    assert!(crate::common::metric_in(&metrics, "ds_origin_region_epoch").unwrap() >= 2);

    // The machine comes back empty: it follows, and answers as the owner.
    let back = start(&weed, &dir.path().join(names[owner]), "three", names[owner]);
    let back_base = base(&back);
    assert_ne!(back_base, dead_base);
    wait_serving(&client, &back_base).await;
    bases.push(back_base.clone());
    procs.push(back);
    the_owner(&client, &bases).await;
    append_until_acknowledged(&client, &[&back_base], 31, "[031]").await;
    acknowledged.push_str("[031]");
    read_everywhere(&client, &bases, &acknowledged).await;
}

/// Leases short enough for a test to outlast one.
const QUICK: [&str; 4] = ["--lease", "1s", "--lease-renew", "250ms"];

/// Origins `a` and `b` on `prefix` with quick leases and `more` flags,
/// once both answer: the origins, their URLs, and the owner's index.
pub(super) async fn two_origins(
    weed: &Seaweed,
    client: &reqwest::Client,
    dir: &std::path::Path,
    prefix: &str,
    more: &[&str],
) -> (Vec<Proc>, Vec<String>, usize) {
    let flags: Vec<&str> = QUICK.iter().chain(more).copied().collect();
    two_origins_with(weed, client, dir, prefix, &flags).await
}

/// Origins `a` and `b` on `prefix` with `flags` alone, once one owns the
/// partition: the origins, their URLs, and the owner's index.
pub async fn two_origins_with(
    weed: &Seaweed,
    client: &reqwest::Client,
    dir: &std::path::Path,
    prefix: &str,
    flags: &[&str],
) -> (Vec<Proc>, Vec<String>, usize) {
    let procs: Vec<Proc> = ["a", "b"]
        .iter()
        .map(|n| start_with(weed, &dir.join(n), prefix, n, flags))
        .collect();
    let bases: Vec<String> = procs.iter().map(base).collect();
    for b in &bases {
        wait_serving(client, b).await;
    }
    let owner = the_owner(client, &bases).await;
    (procs, bases, owner)
}

/// [`two_origins`], and the stream `moved` made on the owner with the
/// producer's appends 0 to 9: what was acknowledged.
async fn owner_with_ten_appends(
    weed: &Seaweed,
    client: &reqwest::Client,
    dir: &std::path::Path,
    prefix: &str,
) -> (Vec<Proc>, Vec<String>, usize, String) {
    let (procs, bases, owner) = two_origins(weed, client, dir, prefix, &[]).await;
    assert_eq!(
        create(client, &format!("{}/v1/stream/moved", bases[owner])).await,
        201
    );
    let mut acknowledged = String::new();
    for seq in 0..10u64 {
        let body = format!("[{seq:03}]");
        append_until_acknowledged(client, &[&bases[owner]], seq, &body).await;
        acknowledged.push_str(&body);
    }
    (procs, bases, owner, acknowledged)
}

/// Sends `req` now; its status and body once answered.
fn sent(req: reqwest::RequestBuilder) -> tokio::task::JoinHandle<(u16, String)> {
    tokio::spawn(async move {
        let r = req.timeout(Duration::from_secs(30)).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_paused_past_its_lease_is_fenced_and_then_follows() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let (procs, bases, owner, mut acknowledged) =
        owner_with_ten_appends(&weed, &client, dir.path(), "paused").await;
    let other = 1 - owner;

    // The owner stops (a long GC pause, a frozen VM) with an append sent
    // to it and not yet read.
    procs[owner].signal("STOP");
    let zombie = sent(
        client
            .post(format!("{}/v1/stream/moved", bases[owner]))
            .header("content-type", "application/octet-stream")
            .body("zombie"),
    );
    // The other takes over and acknowledges.
    append_until_acknowledged(&client, &[&bases[other]], 10, "[010]").await;
    acknowledged.push_str("[010]");
    assert_eq!(serving(&client, &bases[other]).await, Some(true));

    // The paused owner wakes: what it was sent is acknowledged only if it
    // is in the log (forwarded to the new owner), never by the old epoch.
    procs[owner].signal("CONT");
    let (zombie, _) = zombie.await.unwrap();
    if (200..300).contains(&zombie) {
        acknowledged.push_str("zombie");
    } else {
        assert_eq!(zombie, 503);
    }
    let text = read_all(&client, &format!("{}/v1/stream/moved", bases[other])).await;
    assert_eq!(text, acknowledged);
    // It follows the new owner now: its answers are the new owner's.
    let owner_now = the_owner(&client, &bases).await;
    assert_eq!(owner_now, other);
    append_until_acknowledged(&client, &[&bases[owner]], 11, "[011]").await;
    acknowledged.push_str("[011]");
    read_everywhere(&client, &bases, &acknowledged).await;
}

/// An owner paused past its lease wakes with its state behind the new
/// owner's. Until it learns so, it must not answer from that state: not a
/// producer's next append with 409 ("expected 10"), not a leader read
/// without what the new owner acknowledged, not an append to (or a `HEAD`
/// of) a stream the new owner made with 404. Each answers as the new owner would, or 503.
/// (Nothing writes through it first, or a put's fence would stop it.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_owner_answers_nothing_from_its_old_state() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let (procs, bases, owner, mut acknowledged) =
        owner_with_ten_appends(&weed, &client, dir.path(), "woken").await;
    let other = 1 - owner;
    procs[owner].signal("STOP");
    append_until_acknowledged(&client, &[&bases[other]], 10, "[010]").await;
    acknowledged.push_str("[010]");
    assert_eq!(
        create(&client, &format!("{}/v1/stream/fresh", bases[other])).await,
        201
    );

    let moved = format!("{}/v1/stream/moved", bases[owner]);
    let next = sent(
        client
            .post(&moved)
            .header("content-type", "application/octet-stream")
            .header("producer-id", "writer")
            .header("producer-epoch", "0")
            .header("producer-seq", "11")
            .body("[011]"),
    );
    let leader = sent(client.get(format!("{moved}?offset=-1&consistency=leader")));
    let fresh = sent(
        client
            .post(format!("{}/v1/stream/fresh", bases[owner]))
            .header("content-type", "application/octet-stream")
            .body("fresh"),
    );
    let head = sent(client.head(format!("{}/v1/stream/fresh", bases[owner])));
    procs[owner].signal("CONT");

    let (next, leader, fresh, head) = (
        next.await.unwrap(),
        leader.await.unwrap(),
        fresh.await.unwrap(),
        head.await.unwrap(),
    );
    eprintln!(
        "the woken owner answered: next append {}, leader read {}, fresh append {}, HEAD {}",
        next.0, leader.0, fresh.0, head.0
    );
    assert!(
        [200, 503].contains(&head.0),
        "a HEAD of the new owner's stream through the woken owner: {}",
        head.0
    );
    if leader.0 == 200 && !leader.1.ends_with("[010]") {
        for l in procs[owner].log_lines() {
            eprintln!("OWNER {l}");
        }
        for l in procs[other].log_lines() {
            eprintln!("OTHER {l}");
        }
    }
    let (status, body) = next;
    match status {
        200 => acknowledged.push_str("[011]"),
        503 => {}
        _ => panic!("the producer's next append through the woken owner: {status} {body}"),
    }
    let (status, body) = leader;
    match status {
        200 => assert!(
            body.ends_with("[010]"),
            "a leader read missed [010]: {body}"
        ),
        503 => {}
        _ => panic!("a leader read through the woken owner: {status} {body}"),
    }
    let (status, body) = fresh;
    assert!(
        [204, 503].contains(&status),
        "an append to the new owner's stream through the woken owner: {status} {body}"
    );
    // A 503 is an outcome not known: the append may have landed.
    let text = read_all(&client, &format!("{}/v1/stream/moved", bases[other])).await;
    if text == format!("{acknowledged}[011]") {
        acknowledged.push_str("[011]");
    }
    assert_eq!(text, acknowledged);
    append_until_acknowledged(&client, &[&bases[owner]], 11, "[011]").await;
    if !acknowledged.ends_with("[011]") {
        acknowledged.push_str("[011]");
    }
    read_everywhere(&client, &bases, &acknowledged).await;
}

/// The region's key store as it is in the bucket under `prefix`.
async fn bucket_keys(weed: &Seaweed, prefix: &str) -> String {
    let bucket = weed.store(prefix);
    let path = object_store::path::Path::from("region/auth/keys.json");
    let got = object_store::ObjectStoreExt::get(&*bucket, &path)
        .await
        .expect("the key store is in the bucket");
    String::from_utf8(got.bytes().await.unwrap().to_vec()).unwrap()
}

/// Whether key `id` is revoked in the key store `text`.
fn revoked_in(text: &str, id: &str) -> bool {
    let keys: Vec<serde_json::Value> = match serde_json::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Array(keys)) => keys,
        Ok(v) => v["keys"].as_array().cloned().unwrap_or_default(),
        Err(e) => panic!("the key store is not JSON: {e}: {text}"),
    };
    let key = keys
        .iter()
        .find(|k| k["id"] == id)
        .unwrap_or_else(|| panic!("no key {id} in {text}"));
    !key["revoked_at"].is_null()
}

/// An owner of partition 0 (the admin API's) paused past its lease must
/// not put back a key store older than the region's: a key revoked on the
/// new owner stays revoked in the bucket whatever the woken one is asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_woken_owner_cannot_bring_back_a_revoked_key() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let (procs, bases, owner) = two_origins(
        &weed,
        &client,
        dir.path(),
        "revoked",
        &["--admin-token", "admin-secret"],
    )
    .await;
    let other = 1 - owner;
    let make = |base: &str| {
        client
            .post(format!("{base}/_admin/keys"))
            .bearer_auth("admin-secret")
            .body(r#"{"account":"default"}"#)
    };
    let made = make_key(&client, &bases[owner], r#"{"account":"default"}"#).await;
    let id = made["id"].as_str().expect("an id").to_owned();

    procs[owner].signal("STOP");
    let deadline = Instant::now() + Duration::from_secs(30);
    while serving(&client, &bases[other]).await != Some(true) {
        assert!(Instant::now() < deadline, "no takeover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let revoked = client
        .delete(format!("{}/_admin/keys/{id}", bases[other]))
        .bearer_auth("admin-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(revoked.status(), 204);
    assert!(revoked_in(&bucket_keys(&weed, "revoked").await, &id));

    // Asked to make a key while paused: it changes its key store only if
    // the bucket vouches it still owns partition 0, and puts it back only
    // over the key store it last read.
    let sent = sent(make(&bases[owner]));
    procs[owner].signal("CONT");
    let (status, body) = sent.await.unwrap();
    eprintln!("the woken owner answered a new key: {status}");
    assert!([201, 503].contains(&status), "{status} {body}");
    let text = bucket_keys(&weed, "revoked").await;
    assert!(revoked_in(&text, &id), "the revoked key came back: {text}");
    if status == 201 {
        let new: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(text.contains(new["id"].as_str().unwrap()), "{text}");
    }
    // Once it follows, the next owner starts from the bucket's.
    assert_eq!(the_owner(&client, &bases).await, other);
    let text = bucket_keys(&weed, "revoked").await;
    assert!(revoked_in(&text, &id), "the revoked key came back: {text}");
}

/// Keys and tokens made on one owner work on the next: the region's
/// signing key and key store live in the bucket (`region::auth_sync`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_and_tokens_outlive_the_owner_that_made_them() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let (mut procs, bases, owner) = two_origins(
        &weed,
        &client,
        dir.path(),
        "keys",
        &["--open-accounts", "", "--admin-token", "admin-secret"],
    )
    .await;
    let other = 1 - owner;
    // A key made through the follower (forwarded to the owner), and a
    // token exchanged for it.
    let made = make_key(&client, &bases[other], r#"{"account":"default"}"#).await;
    let key = made["key"].as_str().expect("a key").to_owned();
    let token: serde_json::Value = client
        .post(format!("{}/_auth/token", bases[owner]))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let token = token["token"].as_str().expect("a token").to_owned();
    let public_key = client
        .get(format!("{}/_auth/public-key", bases[owner]))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let stream = "/v1/stream/guarded";
    let created = client
        .put(format!("{}{stream}", bases[owner]))
        .bearer_auth(&key)
        .header("content-type", "application/octet-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let anonymous = client
        .post(format!("{}{stream}", bases[owner]))
        .header("content-type", "application/octet-stream")
        .body("x")
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401, "credentials are required");
    // The key was in the bucket when its making was answered: the owner's
    // machine goes at once, disk and all.
    let id = made["id"].as_str().expect("an id").to_owned();
    assert!(
        bucket_keys(&weed, "keys").await.contains(&id),
        "an acknowledged key is not in the bucket"
    );
    procs[owner].kill();
    std::fs::remove_dir_all(dir.path().join(["a", "b"][owner])).unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while serving(&client, &bases[other]).await != Some(true) {
        assert!(Instant::now() < deadline, "no takeover");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for credential in [&key, &token] {
        let r = client
            .post(format!("{}{stream}", bases[other]))
            .bearer_auth(credential)
            .header("content-type", "application/octet-stream")
            .body("kept")
            .send()
            .await
            .unwrap();
        assert!(r.status().is_success(), "{}", r.status());
    }
    let now_public = client
        .get(format!("{}/_auth/public-key", bases[other]))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(now_public, public_key, "edges' token key did not change");
}
