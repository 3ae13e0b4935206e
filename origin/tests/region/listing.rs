//! `GET /_streams` in a region of three origins and six partitions: every
//! origin lists the whole region, page by page across partitions, with
//! `consistency=leader` at once and with `local` (its replicas) once they
//! caught up; an edge in front answers the same listing, `no-store`.

use std::time::{Duration, Instant};

use super::origins::{start_with, wait_serving, InProcessEdge};
use super::partitions::{args, base, settled};
use crate::common::process::Proc;
use crate::common::seaweed::Seaweed;

const STREAMS: usize = 40;

fn path(i: usize) -> String {
    format!("/v1/stream/listed/{i:03}")
}

/// Creates `path` through the origins in turn until one answers 201
/// (a hand-off answers 503 for a moment).
async fn create(client: &reqwest::Client, bases: &[String], i: usize) {
    let started = Instant::now();
    for attempt in 0usize.. {
        let b = &bases[(i + attempt) % bases.len()];
        let r = client
            .put(format!("{b}{}", path(i)))
            .header("content-type", "text/plain")
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        if status == 201 || (attempt > 0 && status == 200) {
            return;
        }
        assert_eq!(status, 503, "create {i} through {b}");
        assert!(started.elapsed() < Duration::from_secs(30), "create {i}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Every path a walk of `limit`-stream pages through `base` shows, or
/// none if a page answered 503 (a partition moving).
async fn walk(
    client: &reqwest::Client,
    base: &str,
    consistency: &str,
    limit: usize,
) -> Option<Vec<String>> {
    let mut all = Vec::new();
    let mut after = String::new();
    loop {
        let r = client
            .get(format!(
                "{base}/_streams?prefix=%2Fv1%2Fstream%2Flisted%2F&limit={limit}&consistency={consistency}&after={}",
                url::form_urlencoded::byte_serialize(after.as_bytes()).collect::<String>()
            ))
            .send()
            .await
            .unwrap();
        if r.status() == 503 {
            return None;
        }
        assert_eq!(r.status(), 200, "{base}");
        assert_eq!(
            r.headers().get("cache-control").unwrap(),
            "no-store",
            "{base}"
        );
        let v: serde_json::Value = r.json().await.unwrap();
        let page = v["streams"].as_array().unwrap();
        assert!(page.len() <= limit);
        all.extend(
            page.iter()
                .map(|s| s["stream_id"].as_str().unwrap().to_owned()),
        );
        if !v["has_more"].as_bool().unwrap() {
            return Some(all);
        }
        after = v["next_cursor"].as_str().unwrap().to_owned();
    }
}

/// Walks until a walk of every page answers (partitions may still move).
async fn walk_until(client: &reqwest::Client, base: &str, consistency: &str, want: &[String]) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(seen) = walk(client, base, consistency, 7).await {
            if seen == want || consistency == "leader" {
                assert_eq!(seen, want, "{consistency} through {base}");
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "{consistency} listing through {base} never showed every stream"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_origin_of_a_region_lists_every_partition() {
    let weed = Seaweed::start();
    let client = reqwest::Client::new();
    let dir = tempfile::tempdir().unwrap();
    let more = args();
    let procs: Vec<Proc> = ["a", "b", "c"]
        .iter()
        .map(|n| start_with(&weed, &dir.path().join(n), "listing", n, &more))
        .collect();
    let bases: Vec<String> = procs.iter().map(base).collect();
    for b in &bases {
        wait_serving(&client, b).await;
    }
    let served = settled(&client, &bases, 3).await;
    eprintln!("three origins serve {served:?}");
    for i in 0..STREAMS {
        create(&client, &bases, i).await;
    }
    let partitions: std::collections::BTreeSet<u32> = (0..STREAMS)
        .map(|i| shared::partition::of_stream(&path(i), 6))
        .collect();
    assert_eq!(partitions.len(), 6, "the streams fall in every partition");
    let want: Vec<String> = (0..STREAMS).map(path).collect();
    for b in &bases {
        walk_until(&client, b, "leader", &want).await;
        walk_until(&client, b, "local", &want).await;
    }
    // Through an edge: the same answer, not kept.
    let edge = InProcessEdge::start(&bases).await;
    let q = "/_streams?prefix=%2Fv1%2Fstream%2Flisted%2F&limit=10&consistency=leader";
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let direct = client.get(format!("{}{q}", bases[0])).send().await.unwrap();
        let through = client
            .get(format!("{}{q}", edge.base))
            .send()
            .await
            .unwrap();
        if direct.status() == 200 && through.status() == 200 {
            assert_eq!(through.headers().get("cache-control").unwrap(), "no-store");
            assert_eq!(
                through.headers().get("content-type").unwrap(),
                "application/json"
            );
            let (d, t) = (direct.text().await.unwrap(), through.text().await.unwrap());
            assert_eq!(d, t);
            let v: serde_json::Value = serde_json::from_str(&t).unwrap();
            assert_eq!(v["streams"].as_array().unwrap().len(), 10);
            assert_eq!(v["next_cursor"], path(9).as_str());
            break;
        }
        assert!(Instant::now() < deadline, "the listing kept answering 503");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
