//! Forks whose source is in another partition (decision 0016), in a region
//! of two origins and six partitions on SeaweedFS: made through either
//! origin, read and appended as any fork, with the source's offsets;
//! deleting the source soft-deletes it while the fork lives, deleting the
//! fork lets it go at once, through a chain of three partitions; the
//! region's own streams answer no client; what a crash in the middle
//! leaves is swept after the grace.

use std::time::{Duration, Instant};

use object_store::ObjectStoreExt as _;

use super::origins::{start_with, wait_serving};
use super::partitions::{args, base, keyed_pair, read, settled};
use crate::common::seaweed::Seaweed;

const PARTITIONS: u32 = 6;

fn part(path: &str) -> u32 {
    shared::partition::of_stream(path, PARTITIONS)
}

/// `n` stream paths named `{stem}{i}`, each in a partition none of the
/// others is in (and none of `taken`).
fn apart(stem: &str, n: usize, taken: &[u32]) -> Vec<String> {
    let mut used: Vec<u32> = taken.to_vec();
    let mut out = Vec::new();
    for i in 0.. {
        let path = format!("/v1/stream/{stem}{i}");
        if !used.contains(&part(&path)) {
            used.push(part(&path));
            out.push(path);
            if out.len() == n {
                return out;
            }
        }
    }
    unreachable!()
}

async fn status(r: reqwest::RequestBuilder) -> u16 {
    r.send().await.unwrap().status().as_u16()
}

/// Until `make()` answers `want`, within 20 s.
async fn until(want: u16, what: &str, make: impl Fn() -> reqwest::RequestBuilder) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = status(make()).await;
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: {got}, not {want}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_across_partitions_answer_as_forks_in_one_store() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let mut more = args();
    more.extend(["--region-pin-grace", "1s"]);
    let a = start_with(&weed, &dir.path().join("a"), "across", "a", &more);
    let b = start_with(&weed, &dir.path().join("b"), "across", "b", &more);
    let bases = vec![base(&a), base(&b)];
    for u in &bases {
        wait_serving(&client, u).await;
    }
    settled(&client, &bases, 4).await;
    let (x, y) = (&bases[0], &bases[1]);

    // A binary source and a fork of its first five bytes elsewhere, made
    // through each origin in turn (one of them forwards to the owner).
    let paths = apart("bin", 3, &[]);
    let (source, fork, other) = (&paths[0], &paths[1], &paths[2]);
    let put = client
        .put(format!("{x}{source}"))
        .header("content-type", "text/plain")
        .body("hello world");
    assert_eq!(status(put).await, 201);
    let forking = |through: &str, path: &str, offset: &str| {
        client
            .put(format!("{through}{path}"))
            .header("stream-forked-from", source.as_str())
            .header("stream-fork-offset", offset)
    };
    for (through, path) in [(x, fork), (y, other)] {
        let r = forking(through, path, "0000000000000005")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201, "{path}: {:?}", r.text().await);
        assert_eq!(r.headers()["stream-next-offset"], "0000000000000005");
        assert_eq!(read(&client, &format!("{y}{path}")).await, "hello");
    }
    // Content type and expiry inherited from the source; offsets its.
    let head = client.head(format!("{y}{fork}")).send().await.unwrap();
    assert_eq!(head.headers()["content-type"], "text/plain");
    let r = client
        .post(format!("{x}{fork}"))
        .header("content-type", "text/plain")
        .body(" there")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    assert_eq!(r.headers()["stream-next-offset"], "000000000000000b");
    assert_eq!(read(&client, &format!("{x}{fork}")).await, "hello there");
    assert_eq!(read(&client, &format!("{x}{source}")).await, "hello world");
    // A second PUT of the same fork is the same; another is a conflict.
    assert_eq!(status(forking(y, fork, "0000000000000005")).await, 200);
    assert_eq!(status(forking(x, fork, "0000000000000004")).await, 409);
    // Eight PUTs of one new fork at once, through both origins: one makes
    // it, the others are its repeats (never a conflict with each other).
    let raced = apart("race", 1, &[part(source)]).remove(0);
    let puts = (0..8).map(|i| {
        let through = if i % 2 == 0 { x } else { y };
        status(forking(through, &raced, "0000000000000005"))
    });
    let mut got = futures::future::join_all(puts).await;
    got.sort_unstable();
    assert_eq!(got, [200, 200, 200, 200, 200, 200, 200, 201]);
    assert_eq!(read(&client, &format!("{y}{raced}")).await, "hello");
    // Refusals of the fork itself are the source's, and make nothing.
    let nowhere = apart("none", 1, &[part(source)]).remove(0);
    assert_eq!(status(forking(x, &nowhere, "00000000000000ff")).await, 400);
    let mismatch = client
        .put(format!("{x}{nowhere}"))
        .header("content-type", "application/json")
        .header("stream-forked-from", source.as_str());
    assert_eq!(status(mismatch).await, 409);
    assert_eq!(status(client.head(format!("{y}{nowhere}"))).await, 404);
    // A source that is no stream path (no URI path either) is a 400.
    for bad in ["/v1/stream/a b", "/v1/stream/<x>", ""] {
        let r = client
            .put(format!("{x}{nowhere}"))
            .header("stream-forked-from", bad);
        let got = status(r).await;
        assert!(got == 400 || got == 404, "{bad:?}: {got}");
    }

    // The source deleted: soft-deleted while the forks read it.
    assert_eq!(status(client.delete(format!("{y}{source}"))).await, 204);
    assert_eq!(status(client.head(format!("{x}{source}"))).await, 410);
    let again = client
        .put(format!("{x}{source}"))
        .header("content-type", "text/plain");
    assert_eq!(status(again).await, 409);
    assert_eq!(read(&client, &format!("{y}{fork}")).await, "hello there");
    // Its last fork deleted: it goes at once, before the delete answers.
    assert_eq!(status(client.delete(format!("{x}{fork}"))).await, 204);
    assert_eq!(status(client.head(format!("{x}{source}"))).await, 410);
    assert_eq!(status(client.delete(format!("{y}{raced}"))).await, 204);
    assert_eq!(status(client.delete(format!("{y}{other}"))).await, 204);
    // Gone only if no racing PUT left a pin of its own behind.
    assert_eq!(status(client.head(format!("{x}{source}"))).await, 404);
    assert_eq!(status(client.head(format!("{y}{fork}"))).await, 404);

    // A JSON source, forked two messages into its one append.
    let paths = apart("json", 2, &[]);
    let (jsource, jfork) = (&paths[0], &paths[1]);
    let put = client
        .put(format!("{x}{jsource}"))
        .header("content-type", "application/json")
        .body(r#"[{"n":1},{"n":2},{"n":3}]"#);
    assert_eq!(status(put).await, 201);
    let r = client
        .put(format!("{y}{jfork}"))
        .header("stream-forked-from", jsource.as_str())
        .header("stream-fork-offset", "0000000000000000")
        .header("stream-fork-sub-offset", "2")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let body = client
        .get(format!("{x}{jfork}?offset=-1"))
        .header("accept", "application/json")
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(body, r#"[{"n":1},{"n":2}]"#);

    // A chain over three partitions: the cascade crosses them.
    let levels = apart("level", 3, &[]);
    let put = client
        .put(format!("{x}{}", levels[0]))
        .header("content-type", "text/plain")
        .body("A");
    assert_eq!(status(put).await, 201);
    for w in levels.windows(2) {
        let r = client
            .put(format!("{y}{}", w[1]))
            .header("stream-forked-from", w[0].as_str());
        assert_eq!(status(r).await, 201);
        let r = client
            .post(format!("{x}{}", w[1]))
            .header("content-type", "text/plain")
            .body("+");
        assert_eq!(status(r).await, 204);
    }
    assert_eq!(read(&client, &format!("{x}{}", levels[2])).await, "A++");
    for l in &levels[..2] {
        assert_eq!(status(client.delete(format!("{y}{l}"))).await, 204);
        assert_eq!(status(client.head(format!("{x}{l}"))).await, 410);
    }
    assert_eq!(
        status(client.delete(format!("{x}{}", levels[2]))).await,
        204
    );
    for l in &levels {
        assert_eq!(status(client.head(format!("{y}{l}"))).await, 404, "{l}");
    }

    // The region's own streams answer no client.
    let hidden = "/.ds-region/in/0/pin/0000000000000001/v1/stream/x";
    assert_eq!(
        status(client.get(format!("{x}{hidden}?offset=-1"))).await,
        404
    );
    let naming = client
        .put(format!("{x}/v1/stream/sneaky"))
        .header("stream-forked-from", hidden);
    assert_eq!(status(naming).await, 404);
    let wrong = client
        .put(format!("{x}{hidden}"))
        .header("ds-region-peer", "0".repeat(64));
    assert_eq!(status(wrong).await, 404);

    // What a crash between two steps leaves: a pin whose copy was never
    // made, and a copy never forked. Both go after the grace, and the
    // source the pin held is deleted for good, not soft-deleted.
    let key = weed
        .store("across")
        .get(&object_store::path::Path::from("region/peer.key"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let key = String::from_utf8(key.to_vec()).unwrap();
    let paths = apart("crash", 2, &[]);
    let (held, lost) = (&paths[0], &paths[1]);
    let put = client
        .put(format!("{x}{held}"))
        .header("content-type", "text/plain")
        .body("held");
    assert_eq!(status(put).await, 201);
    let pin = format!("/.ds-region/in/{}/pin/00000000000000aa{lost}", part(held));
    let copy = format!("/.ds-region/in/{}/copy/00000000000000bb{held}", part(lost));
    let r = client
        .put(format!("{y}{pin}"))
        .header("ds-region-peer", &key)
        .header("stream-forked-from", held.as_str());
    assert_eq!(status(r).await, 201);
    let r = client
        .put(format!("{x}{copy}"))
        .header("ds-region-peer", &key)
        .header("content-type", "text/plain");
    assert_eq!(status(r).await, 201);
    for gone in [&pin, &copy] {
        until(404, gone, || {
            client
                .head(format!("{y}{gone}"))
                .header("ds-region-peer", &key)
        })
        .await;
    }
    assert_eq!(status(client.delete(format!("{x}{held}"))).await, 204);
    assert_eq!(status(client.head(format!("{y}{held}"))).await, 404);
    let mut swept = 0;
    for b in &bases {
        let text = crate::common::metrics_at(&client, b).await;
        swept += crate::common::metric_in(&text, "ds_origin_region_fork_swept_total").unwrap();
    }
    assert_eq!(swept, 2, "the pin and the copy the crash left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fork_across_partitions_needs_read_access_to_its_source() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let (_a, _b, bases) = keyed_pair(&weed, dir.path(), "across-keys", &client).await;
    let (x, y) = (&bases[0], &bases[1]);
    let key = |body: &'static str| {
        let client = client.clone();
        let x = x.clone();
        async move {
            let made = super::origins::make_key(&client, &x, body).await;
            made["key"].as_str().expect("a key").to_owned()
        }
    };
    let full = key(r#"{"account":"default"}"#).await;
    let mine = key(r#"{"account":"default","prefix":"mine"}"#).await;
    let in_part = |stem: &str, p: u32| {
        (0..200)
            .map(|i| format!("/v1/stream/{stem}{i}"))
            .find(|s| shared::partition::of_stream(s, 2) == p)
            .unwrap()
    };
    let (theirs, my_source, my_fork) = (
        in_part("theirs", 0),
        in_part("mine-source", 0),
        in_part("mine-fork", 1),
    );
    for s in [&theirs, &my_source] {
        until(201, "create with the full key", || {
            client
                .put(format!("{y}{s}"))
                .bearer_auth(&full)
                .header("content-type", "text/plain")
                .body("secret")
        })
        .await;
    }
    // Its own source: made (once the key reached partition 1's store).
    until(201, "a fork of a stream the key reads", || {
        client
            .put(format!("{x}{my_fork}"))
            .bearer_auth(&mine)
            .header("stream-forked-from", my_source.as_str())
    })
    .await;
    assert_eq!(
        status(
            client
                .get(format!("{y}{my_fork}?offset=-1"))
                .bearer_auth(&mine)
        )
        .await,
        200
    );
    // The same fork again: the same answer as within a store, and no
    // credential changes nothing.
    let again = || {
        client
            .put(format!("{y}{my_fork}"))
            .header("stream-forked-from", my_source.as_str())
            .header("stream-public", "true")
    };
    assert_eq!(status(again()).await, 401);
    assert_eq!(
        status(client.get(format!("{y}{my_fork}?offset=-1"))).await,
        401,
        "still private"
    );
    assert_eq!(status(again().bearer_auth(&mine)).await, 200);
    // Another's source: refused, and nothing made.
    let other_fork = in_part("mine-other", 1);
    let r = client
        .put(format!("{x}{other_fork}"))
        .bearer_auth(&mine)
        .header("stream-forked-from", theirs.as_str());
    assert_eq!(status(r).await, 403);
    let r = client
        .put(format!("{y}{other_fork}"))
        .header("stream-forked-from", theirs.as_str());
    assert_eq!(status(r).await, 401);
    let r = client.head(format!("{x}{other_fork}")).bearer_auth(&full);
    assert_eq!(status(r).await, 404);
}
