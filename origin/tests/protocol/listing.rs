//! `GET /_streams`: pages in path order, prefixes, the limit's bounds,
//! deleted and expired streams left out, and a walk across many pages
//! while other clients create and delete streams.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;

use origin::clock::{Clock, ManualClock, SystemClock};
use origin::http::HttpConfig;

use crate::common::*;

/// A page: its paths, its cursor and whether it says there is more.
async fn page(api: &Api, query: &str) -> (serde_json::Value, Vec<String>) {
    let resp = send(api.get(&format!("/_streams?{query}"))).await;
    assert_eq!(resp.status(), 200, "{query}");
    assert_eq!(
        header(&resp, "content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(header(&resp, "cache-control").as_deref(), Some("no-store"));
    let v: serde_json::Value = resp.json().await.unwrap();
    let paths = v["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stream_id"].as_str().unwrap().to_owned())
        .collect();
    (v, paths)
}

/// Every path under `prefix`, following cursors `limit` at a time.
async fn walk(api: &Api, prefix: &str, limit: usize) -> Vec<String> {
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut q = format!("prefix={}&limit={limit}", enc(prefix));
        if let Some(a) = &after {
            q.push_str(&format!("&after={}", enc(a)));
        }
        let (v, paths) = page(api, &q).await;
        assert!(paths.len() <= limit);
        all.extend(paths);
        if !v["has_more"].as_bool().unwrap() {
            assert!(v["next_cursor"].is_null(), "{v}");
            return all;
        }
        after = Some(v["next_cursor"].as_str().unwrap().to_owned());
    }
}

fn enc(s: &str) -> String {
    url::form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_shows_each_stream_in_path_order_with_its_state() {
    let api = Api::start().await;
    let root = stream_path("list-shape");
    let a = format!("{root}/a");
    let b = format!("{root}/b");
    api.create(&b, "text/plain").await;
    let r = send(
        api.put(&a)
            .header("content-type", "application/json")
            .header("stream-ttl", "3600"),
    )
    .await;
    assert_eq!(r.status(), 201);
    let incarnation = header(&r, "stream-incarnation").unwrap();
    api.append(&a, "application/json", "{\"n\":1}").await;
    api.close(&b).await;
    let (v, paths) = page(&api, &format!("prefix={}", enc(&root))).await;
    assert_eq!(paths, [a.clone(), b.clone()]);
    assert_eq!(v["has_more"], false);
    assert!(v["next_cursor"].is_null());
    let s = &v["streams"][0];
    assert_eq!(s["status"], "open");
    assert_eq!(s["closed"], false);
    assert_eq!(s["content_type"], "application/json");
    assert_eq!(s["tail_offset"], "0000000000000008");
    assert_eq!(s["incarnation"], incarnation.as_str());
    assert_eq!(s["ttl_seconds"], 3600);
    assert!(s["expires_at"].as_str().unwrap().ends_with('Z'));
    let (created, wrote) = (
        s["created_at_ms"].as_u64().unwrap(),
        s["last_write_at_ms"].as_u64().unwrap(),
    );
    assert!(created > 1_700_000_000_000 && wrote >= created);
    let s = &v["streams"][1];
    assert_eq!(
        (s["status"].as_str(), s["closed"].as_bool()),
        (Some("closed"), Some(true))
    );
    assert!(
        s.get("ttl_seconds").is_none() && s.get("expires_at").is_none(),
        "{s}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_limit_is_one_to_a_thousand_and_a_prefix_filters() {
    let api = Api::start().await;
    for bad in ["limit=0", "limit=1001", "limit=x", "limit=-3"] {
        expect_error(
            send(api.get(&format!("/_streams?{bad}"))).await,
            400,
            "BAD_REQUEST",
        )
        .await;
    }
    expect_error(
        send(api.get("/_streams?consistency=eventual")).await,
        400,
        "BAD_REQUEST",
    )
    .await;
    let root = stream_path("list-prefix");
    for name in ["x/1", "x/2", "xy/1", "y/1"] {
        api.create(&format!("{root}/{name}"), "text/plain").await;
    }
    let (_, paths) = page(
        &api,
        &format!("prefix={}&limit=1000", enc(&format!("{root}/x/"))),
    )
    .await;
    assert_eq!(paths, [format!("{root}/x/1"), format!("{root}/x/2")]);
    let (_, paths) = page(
        &api,
        &format!("prefix={}&unknown=1", enc(&format!("{root}/x"))),
    )
    .await;
    assert_eq!(paths.len(), 3);
    let (v, paths) = page(&api, &format!("prefix={}&limit=1", enc(&root))).await;
    assert_eq!(paths, [format!("{root}/x/1")]);
    assert_eq!(
        (v["has_more"].as_bool(), v["next_cursor"].as_str()),
        (Some(true), Some(paths[0].as_str()))
    );
    // The server's own path answers only GET (and its preflight).
    expect_error(
        send(api.delete("/_streams")).await,
        405,
        "METHOD_NOT_ALLOWED",
    )
    .await;
    assert!(
        api.metric("ds_origin_requests_total{route=\"list\",status=\"200\"}")
            .await
            >= 3
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleted_and_expired_streams_are_not_listed() {
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let api = Api::on(
        TestOrigin::start_with_clock(HttpConfig::default(), clock.clone() as Arc<dyn Clock>).await,
    );
    let root = stream_path("list-gone");
    let (kept, deleted, idle, dated) = (
        format!("{root}/kept"),
        format!("{root}/deleted"),
        format!("{root}/idle"),
        format!("{root}/dated"),
    );
    api.create(&kept, "text/plain").await;
    api.create(&deleted, "text/plain").await;
    send(
        api.put(&idle)
            .header("content-type", "text/plain")
            .header("stream-ttl", "60"),
    )
    .await;
    let at = shared_rfc3339(clock.now_ms() + 30_000);
    send(
        api.put(&dated)
            .header("content-type", "text/plain")
            .header("stream-expires-at", at),
    )
    .await;
    assert_eq!(send(api.delete(&deleted)).await.status(), 204);
    let (_, paths) = page(&api, &format!("prefix={}", enc(&root))).await;
    assert_eq!(paths, [dated.clone(), idle.clone(), kept.clone()]);
    clock.advance(31_000);
    let (_, paths) = page(&api, &format!("prefix={}", enc(&root))).await;
    assert_eq!(paths, [idle.clone(), kept.clone()]);
    // A listing is no read: it renews no TTL.
    clock.advance(30_000);
    let (_, paths) = page(&api, &format!("prefix={}", enc(&root))).await;
    assert_eq!(paths, [kept]);
}

fn shared_rfc3339(ms: u64) -> String {
    origin::http::request::rfc3339(ms)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_walk_every_stream_once_while_others_come_and_go() {
    let api = Arc::new(Api::start().await);
    let root = stream_path("list-walk");
    let lasting: BTreeSet<String> = (0..250).map(|i| format!("{root}/s{i:04}")).collect();
    for p in &lasting {
        api.create(p, "text/plain").await;
    }
    // Others create and delete streams between and beside the lasting ones
    // for as long as the walk goes.
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let churn: Vec<_> = (0..2)
        .map(|w| {
            let (api, root, stop) = (Arc::clone(&api), root.clone(), Arc::clone(&stop));
            tokio::spawn(async move {
                let mut n = 0u32;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let p = format!("{root}/s{:04}-churn{w}-{n}", (n * 7) % 250);
                    api.create(&p, "text/plain").await;
                    assert_eq!(send(api.delete(&p)).await.status(), 204);
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut walks = 0;
    let mut churned = 0;
    while walks < 3 {
        let seen = walk(&api, &root, 7).await;
        let unique: HashSet<&String> = seen.iter().collect();
        assert_eq!(unique.len(), seen.len(), "a stream listed twice");
        let mut sorted = seen.clone();
        sorted.sort();
        assert_eq!(sorted, seen, "pages in path order");
        for p in &lasting {
            assert!(unique.contains(p), "{p} existed throughout and was missed");
        }
        churned += seen.len() - lasting.len();
        walks += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut made = 0;
    for c in churn {
        made += c.await.unwrap();
    }
    assert!(
        made > 0,
        "the churn ran during the walks ({churned} churned streams seen)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn creation_and_last_write_times_survive_a_restart() {
    let clock = Arc::new(ManualClock::new(SystemClock.now_ms()));
    let api = Api::on(
        TestOrigin::start_with_clock(HttpConfig::default(), clock.clone() as Arc<dyn Clock>).await,
    );
    let root = stream_path("list-times");
    let (written, idle) = (format!("{root}/written"), format!("{root}/idle"));
    let created = clock.now_ms();
    api.create(&written, "text/plain").await;
    api.create(&idle, "text/plain").await;
    clock.advance(5_000);
    api.append(&written, "text/plain", "x").await;
    let times = |v: &serde_json::Value| -> Vec<(u64, u64)> {
        v["streams"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                (
                    s["created_at_ms"].as_u64().unwrap(),
                    s["last_write_at_ms"].as_u64().unwrap(),
                )
            })
            .collect()
    };
    let (before, _) = page(&api, &format!("prefix={}", enc(&root))).await;
    assert_eq!(
        times(&before),
        [(created, created), (created, created + 5_000)]
    );
    let Api { origin, .. } = api;
    let (data, _keep) = origin.stop().await;
    let api = Api::on(
        TestOrigin::start_in_with_clock(
            data,
            HttpConfig::default(),
            origin::store::StoreConfig::new,
            clock.clone() as Arc<dyn Clock>,
        )
        .await,
    );
    let (after, _) = page(&api, &format!("prefix={}", enc(&root))).await;
    assert_eq!(times(&after), times(&before));
}
