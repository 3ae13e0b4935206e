//! A region partition's invalidation feed across a takeover (decision
//! 0017): the new owner answers the last owner's incarnation and positions,
//! so an edge that read up to a position goes on from it and misses no
//! event; one behind the partition's last checkpoint learns of its loss
//! from a `410`.

use std::time::{Duration, Instant};

use super::origins::{start_with, wait_serving};
use super::takeover::the_owner;
use crate::common::process::Proc;
use crate::common::seaweed::Seaweed;

const FLAGS: [&str; 4] = ["--lease", "2s", "--lease-renew", "500ms"];

/// An origin that checkpoints at once (the others never do in this test).
const CHECKPOINTING: [&str; 8] = [
    "--lease",
    "2s",
    "--lease-renew",
    "500ms",
    "--region-checkpoint-objects",
    "1",
    "--region-checkpoint-interval",
    "200ms",
];

/// Until `base` serves the partition (its feed answers under `incarnation`).
async fn took_over(client: &reqwest::Client, base: &str, incarnation: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, inc, ..) = feed(client, base, "now", None).await;
        if status == 204 && inc == incarnation {
            return;
        }
        assert!(Instant::now() < deadline, "no takeover: {status} {inc}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The feed's answer from `position` (`now`: its end) naming `incarnation`:
/// status, incarnation, next position and the events' (seq, change).
async fn feed(
    client: &reqwest::Client,
    base: &str,
    position: &str,
    incarnation: Option<&str>,
) -> (u16, String, u64, Vec<(u64, String)>) {
    let mut req = client.get(format!(
        "{base}/_invalidations?offset={position}&timeout_ms=0"
    ));
    if let Some(i) = incarnation {
        req = req.header("stream-incarnation", i);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let h = |n: &str| {
        r.headers()
            .get(n)
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default()
    };
    let (inc, next) = (h("stream-incarnation"), h("stream-next-offset"));
    let body = r.bytes().await.unwrap();
    let events = shared::invalidation::decode(&body)
        .unwrap_or_default()
        .into_iter()
        .map(|e| (e.seq, format!("{:?}", e.change)))
        .collect();
    (status, inc, next.parse().unwrap_or(0), events)
}

async fn put(client: &reqwest::Client, base: &str, path: &str) {
    let r = client
        .put(format!("{base}{path}"))
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201, "{path}");
}

fn base(p: &Proc) -> String {
    format!("http://{}", p.addr)
}

/// Until the origin at `base` published a checkpoint past `before`.
async fn checkpointed(client: &reqwest::Client, base: &str, before: i64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let text = crate::common::metrics_at(client, base).await;
        let n = crate::common::metric_in(&text, "ds_origin_region_checkpoints_total").unwrap_or(0);
        if n > before {
            return;
        }
        assert!(Instant::now() < deadline, "no checkpoint");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_edge_goes_on_reading_the_feed_across_a_takeover() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let mut origins: Vec<Proc> = ["a", "b"]
        .iter()
        .map(|n| start_with(&weed, &dir.path().join(n), "feed", n, &FLAGS))
        .collect();
    let bases: Vec<String> = origins.iter().map(base).collect();
    for b in &bases {
        wait_serving(&client, b).await;
    }
    let owner = the_owner(&client, &bases).await;
    let (o, f) = (bases[owner].clone(), bases[1 - owner].clone());
    let (status, incarnation, start, _) = feed(&client, &o, "now", None).await;
    assert_eq!(status, 204);
    assert!(incarnation.starts_with("feed-p0-"), "{incarnation}");
    put(&client, &o, "/v1/stream/one").await;
    let r = client.delete(format!("{o}/v1/stream/one")).send().await;
    assert_eq!(r.unwrap().status(), 204);
    put(&client, &o, "/v1/stream/two").await;
    let (_, _, end, events) = feed(&client, &o, &start.to_string(), Some(&incarnation)).await;
    assert_eq!(end, start + 3);
    assert_eq!(events.len(), 3);

    // The owner and its disk go; the other takes over.
    origins[owner].kill();
    std::fs::remove_dir_all(dir.path().join(["a", "b"][owner])).unwrap();
    took_over(&client, &f, &incarnation).await;
    // The same events at the same positions, from wherever the edge was.
    for from in [start, start + 1, end] {
        let (status, inc, next, got) =
            feed(&client, &f, &from.to_string(), Some(&incarnation)).await;
        assert_eq!((inc.as_str(), next), (incarnation.as_str(), end), "{from}");
        assert_eq!(got, events[(from - start) as usize..], "from {from}");
        assert_eq!(status, if from == end { 204 } else { 200 });
    }
    put(&client, &f, "/v1/stream/three").await;
    let (_, _, next, got) = feed(&client, &f, &end.to_string(), Some(&incarnation)).await;
    assert_eq!(next, end + 1);
    assert_eq!(got, [(end, "Created".to_owned())]);

    // The next owner checkpoints everything; the one after it starts
    // from that image: the end goes on, behind it is a loss (410).
    let mut c = start_with(&weed, &dir.path().join("c"), "feed", "c", &CHECKPOINTING);
    let cbase = base(&c);
    wait_serving(&client, &cbase).await;
    origins[1 - owner].kill();
    took_over(&client, &cbase, &incarnation).await;
    checkpointed(&client, &cbase, 0).await;
    let end = end + 1;
    let mut d = start_with(&weed, &dir.path().join("d"), "feed", "d", &FLAGS);
    let dbase = base(&d);
    wait_serving(&client, &dbase).await;
    c.kill();
    took_over(&client, &dbase, &incarnation).await;
    let (status, _, next, _) = feed(&client, &dbase, &end.to_string(), Some(&incarnation)).await;
    assert_eq!((status, next), (204, end));
    let (status, ..) = feed(&client, &dbase, &start.to_string(), Some(&incarnation)).await;
    assert_eq!(status, 410, "events before the checkpoint are not kept");
    // And events after the image are replayed at their positions.
    put(&client, &dbase, "/v1/stream/four").await;
    let mut e = start_with(&weed, &dir.path().join("e"), "feed", "e", &FLAGS);
    let ebase = base(&e);
    wait_serving(&client, &ebase).await;
    d.kill();
    took_over(&client, &ebase, &incarnation).await;
    let (status, _, next, got) = feed(&client, &ebase, &end.to_string(), Some(&incarnation)).await;
    assert_eq!((status, next), (200, end + 1));
    assert_eq!(got, [(end, "Created".to_owned())]);
    e.kill();
}
