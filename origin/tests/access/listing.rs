//! Listing streams (`GET /_streams`) as each credential sees it: a key's
//! account (narrowed, read-only), another account, anonymous callers, an
//! invalid key, an open server, and pages cut by the scan bound.

use origin::auth::AuthConfig;
use origin::http::HttpConfig;
use reqwest::{Method, StatusCode};
use shared::limits::LimitConfig;

use super::common::{self, expect_error, header, Api, TestOrigin};
use super::{make_key, req, start, ADMIN};

/// The paths a listing shows `cred` (none: anonymous), every page.
async fn listed(api: &Api, cred: Option<&str>, prefix: &str) -> Result<Vec<String>, u16> {
    let mut all = Vec::new();
    let mut after = String::new();
    loop {
        let q = format!(
            "/_streams?limit=2&prefix={}&after={}",
            url::form_urlencoded::byte_serialize(prefix.as_bytes()).collect::<String>(),
            url::form_urlencoded::byte_serialize(after.as_bytes()).collect::<String>()
        );
        let r = req(api, Method::GET, &q, cred).send().await.unwrap();
        if r.status() != StatusCode::OK {
            return Err(r.status().as_u16());
        }
        assert_eq!(header(&r, "cache-control").as_deref(), Some("no-store"));
        let v: serde_json::Value = r.json().await.unwrap();
        for s in v["streams"].as_array().unwrap() {
            all.push(s["stream_id"].as_str().unwrap().to_owned());
        }
        if !v["has_more"].as_bool().unwrap() {
            return Ok(all);
        }
        after = v["next_cursor"].as_str().unwrap().to_owned();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_shows_only_what_the_credential_reads() {
    // Access configured: no open accounts.
    let api = locked(HttpConfig::default()).await;
    let (_, acme) = make_key(&api, serde_json::json!({"account": "acme"})).await;
    let (_, chat) = make_key(
        &api,
        serde_json::json!({"account": "acme", "prefix": "s.chat"}),
    )
    .await;
    let (_, reader) = make_key(
        &api,
        serde_json::json!({"account": "acme", "read_only": true}),
    )
    .await;
    let (_, other) = make_key(&api, serde_json::json!({"account": "other"})).await;
    let acme_streams = [
        "/acme/s.chat-1",
        "/acme/s.chat-2",
        "/acme/s.jobs",
        "/acme/s.pub",
    ];
    for s in acme_streams {
        let mut r = req(&api, Method::PUT, s, Some(&acme));
        if s.ends_with("pub") {
            r = r.header("stream-public", "true");
        }
        assert_eq!(r.send().await.unwrap().status(), 201);
    }
    assert_eq!(
        req(&api, Method::PUT, "/other/s.x", Some(&other))
            .send()
            .await
            .unwrap()
            .status(),
        201
    );
    let all: Vec<String> = acme_streams.iter().map(|s| s.to_string()).collect();
    assert_eq!(listed(&api, Some(&acme), "").await, Ok(all.clone()));
    assert_eq!(listed(&api, Some(&reader), "").await, Ok(all.clone()));
    assert_eq!(
        listed(&api, Some(&chat), "").await,
        Ok(vec!["/acme/s.chat-1".into(), "/acme/s.chat-2".into()])
    );
    assert_eq!(
        listed(&api, Some(&chat), "/acme/s.chat-2").await,
        Ok(vec!["/acme/s.chat-2".into()])
    );
    assert_eq!(listed(&api, Some(&chat), "/acme/s.jobs").await, Ok(vec![]));
    assert_eq!(
        listed(&api, Some(&other), "").await,
        Ok(vec!["/other/s.x".into()])
    );
    // Anonymous: what an anonymous read reaches, the public stream.
    assert_eq!(listed(&api, None, "").await, Ok(vec!["/acme/s.pub".into()]));
    // A credential that is not valid is refused, as for a read.
    assert_eq!(listed(&api, Some("dsk_nope_nope"), "").await, Err(401));
    let r = req(&api, Method::GET, "/_streams", Some("dsk_nope_nope"))
        .send()
        .await
        .unwrap();
    expect_error(r, 401, "UNAUTHORIZED").await;
}

/// An origin with access configured (no open accounts, no limits) and
/// the rest of `http`.
async fn locked(http: HttpConfig) -> Api {
    Api::on(
        TestOrigin::start_with(HttpConfig {
            auth: AuthConfig {
                admin_token: Some(ADMIN.into()),
                open_accounts: Default::default(),
                limits: LimitConfig {
                    rps: 0,
                    live_reads: 0,
                    ..LimitConfig::default()
                },
                ..AuthConfig::default()
            },
            ..http
        })
        .await,
    )
}

/// Every cursor of a walk by `cred` (pages of 2).
async fn cursors(api: &Api, cred: Option<&str>) -> (Vec<String>, Vec<String>) {
    let (mut listed, mut cursors) = (Vec::new(), Vec::new());
    let mut after = String::new();
    loop {
        let q = format!(
            "/_streams?limit=2&after={}",
            url::form_urlencoded::byte_serialize(after.as_bytes()).collect::<String>()
        );
        let r = req(api, Method::GET, &q, cred).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let v: serde_json::Value = r.json().await.unwrap();
        for s in v["streams"].as_array().unwrap() {
            listed.push(s["stream_id"].as_str().unwrap().to_owned());
        }
        if !v["has_more"].as_bool().unwrap() {
            assert!(v["next_cursor"].is_null());
            return (listed, cursors);
        }
        after = v["next_cursor"].as_str().unwrap().to_owned();
        cursors.push(after.clone());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_cut_by_the_scan_bound_never_names_a_stream_its_caller_cannot_read() {
    // Three paths looked at per page at most; access configured.
    let api = locked(HttpConfig {
        list_scan_max: 3,
        ..HttpConfig::default()
    })
    .await;
    let (_, acme) = make_key(&api, serde_json::json!({"account": "acme"})).await;
    // Runs of private streams between the public ones, longer than the
    // bound.
    let mut public = Vec::new();
    for i in 0..40 {
        let path = format!("/acme/s.{i:03}");
        let open = i % 7 == 3;
        let mut r = req(&api, Method::PUT, &path, Some(&acme));
        if open {
            r = r.header("stream-public", "true");
            public.push(path);
        }
        assert_eq!(r.send().await.unwrap().status(), 201);
    }
    // Anonymous: every public stream once, in order, and no cursor names
    // a private one.
    let (listed, cuts) = cursors(&api, None).await;
    assert_eq!(listed, public);
    assert!(!cuts.is_empty(), "pages were cut");
    for c in &cuts {
        assert!(public.contains(c), "cursor {c} names a private stream");
    }
    // The account's key walks everything, the bound cutting its pages.
    let (all, cuts) = cursors(&api, Some(&acme)).await;
    assert_eq!(all.len(), 40);
    assert!(cuts.len() >= 40 / 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_server_lists_its_open_streams_to_anyone() {
    let api = start(LimitConfig::default()).await;
    let (_, acme) = make_key(&api, serde_json::json!({"account": "acme"})).await;
    let root = common::stream_path("open-list");
    api.create(&format!("{root}/a"), "text/plain").await;
    assert_eq!(
        req(&api, Method::PUT, "/acme/s.private", Some(&acme))
            .send()
            .await
            .unwrap()
            .status(),
        201
    );
    assert_eq!(
        listed(&api, None, &root).await,
        Ok(vec![format!("{root}/a")])
    );
    // Everything anonymous may read: the default account's, not acme's.
    let everything = listed(&api, None, "").await.unwrap();
    assert!(everything.contains(&format!("{root}/a")));
    assert!(!everything.iter().any(|p| p.starts_with("/acme/")));
    // acme's key sees its own and the open account's.
    let seen = listed(&api, Some(&acme), "").await.unwrap();
    assert!(seen.contains(&"/acme/s.private".to_owned()) && seen.contains(&format!("{root}/a")));
}
