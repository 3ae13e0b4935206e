//! Access control against a real origin on loopback: every refusal of the
//! spec's tables that credentials decide, keys (full, read-only, narrowed,
//! agent), tokens, public streams, revocation, limits, and secrets kept out
//! of logs.

use crate::common;
/// Listing streams (`GET /_streams`): what each credential is shown.
#[path = "access/listing.rs"]
mod listing;

use std::time::{Duration, Instant};

use common::{expect_error, header, Api, TestOrigin, POLL, WAIT};
use origin::auth::AuthConfig;
use origin::http::HttpConfig;
use reqwest::{Method, StatusCode};
use shared::limits::LimitConfig;

const ADMIN: &str = "admin-test-token";

fn config(limits: LimitConfig) -> HttpConfig {
    HttpConfig {
        max_body: 1024,
        auth: AuthConfig {
            admin_token: Some(ADMIN.into()),
            limits,
            ..AuthConfig::default()
        },
        ..HttpConfig::default()
    }
}

async fn start(limits: LimitConfig) -> Api {
    Api::on(TestOrigin::start_with(config(limits)).await)
}

/// Makes a key through the admin API; returns (id, key).
async fn make_key(api: &Api, body: serde_json::Value) -> (String, String) {
    api.make_key(ADMIN, body).await
}

async fn token(api: &Api, key: &str, body: serde_json::Value) -> reqwest::Response {
    api.post("/_auth/token")
        .bearer_auth(key)
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn req(api: &Api, method: Method, path: &str, cred: Option<&str>) -> reqwest::RequestBuilder {
    let r = api
        .request(method, path)
        .header("content-type", "text/plain");
    match cred {
        Some(c) => r.bearer_auth(c),
        None => r,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_a_credential_decides() {
    let api = start(LimitConfig {
        rps: 0,
        live_reads: 0,
        ..LimitConfig::default()
    })
    .await;
    let (_, full) = make_key(&api, serde_json::json!({"account": "acme"})).await;
    let (_, read_only) = make_key(
        &api,
        serde_json::json!({"account": "acme", "read_only": true}),
    )
    .await;
    let (_, narrow) = make_key(
        &api,
        serde_json::json!({"account": "acme", "prefix": "s.a"}),
    )
    .await;
    let (_, agent) = make_key(&api, serde_json::json!({"account": "acme", "agent": true})).await;
    let (_, beta) = make_key(&api, serde_json::json!({"account": "beta"})).await;

    let s = "/acme/s.a1";
    let r = req(&api, Method::PUT, s, Some(&full)).send().await.unwrap();
    assert_eq!(r.status(), 201);
    let incarnation = header(&r, "stream-incarnation").unwrap();
    let r = req(&api, Method::POST, s, Some(&full))
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);

    let agent_token = {
        let r = token(&api, &agent, serde_json::json!({})).await;
        assert_eq!(r.status(), 200);
        r.json::<serde_json::Value>().await.unwrap()["token"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    let chunk = format!("{s}/incarnation/{incarnation}/chunk/0000000000000000");
    let rows: Vec<(Method, String, Option<&str>, u16, &str)> = vec![
        // 401: missing, malformed, unknown.
        (Method::GET, s.into(), None, 401, "UNAUTHORIZED"),
        (Method::HEAD, s.into(), None, 401, ""),
        (Method::GET, chunk.clone(), None, 401, "UNAUTHORIZED"),
        (Method::POST, s.into(), None, 401, "UNAUTHORIZED"),
        (Method::GET, s.into(), Some("garbage"), 401, "UNAUTHORIZED"),
        (
            Method::GET,
            s.into(),
            Some("dsk_nokey_nosecret"),
            401,
            "UNAUTHORIZED",
        ),
        (
            Method::GET,
            s.into(),
            Some("dst_forged.token"),
            401,
            "UNAUTHORIZED",
        ),
        // 401 exchange_required: an agent key sent directly.
        (
            Method::GET,
            s.into(),
            Some(&agent),
            401,
            "exchange_required",
        ),
        // 403: read-only writes; a key of another account; a narrowed key
        // outside its prefix; whether or not the stream exists.
        (Method::POST, s.into(), Some(&read_only), 403, "FORBIDDEN"),
        (Method::DELETE, s.into(), Some(&read_only), 403, "FORBIDDEN"),
        (Method::GET, s.into(), Some(&beta), 403, "FORBIDDEN"),
        (
            Method::GET,
            "/acme/s.nothing".into(),
            Some(&beta),
            403,
            "FORBIDDEN",
        ),
        (
            Method::GET,
            "/acme/s.b1".into(),
            Some(&narrow),
            403,
            "FORBIDDEN",
        ),
        // 404 only to a credential that could see the stream.
        (
            Method::GET,
            "/acme/s.a9".into(),
            Some(&narrow),
            404,
            "STREAM_NOT_FOUND",
        ),
        // 413 and 412 still apply behind a valid credential.
        (
            Method::POST,
            s.into(),
            Some(&full),
            413,
            "PAYLOAD_TOO_LARGE",
        ),
    ];
    for (method, path, cred, status, code) in rows {
        let mut r = req(&api, method.clone(), &path, cred);
        if status == 413 {
            r = r.body(vec![b'x'; 2048]);
        }
        let resp = r.send().await.unwrap();
        if method == Method::HEAD {
            assert_eq!(resp.status().as_u16(), status, "HEAD {path}");
        } else {
            expect_error(resp, status, code).await;
        }
    }
    let stale = req(&api, Method::GET, s, Some(&full))
        .header("stream-incarnation", "1-0000000000000000")
        .send()
        .await
        .unwrap();
    expect_error(stale, 412, "INCARNATION_MISMATCH").await;

    // What each credential may do.
    for cred in [&full, &read_only, &narrow, &agent_token] {
        let r = req(&api, Method::GET, &format!("{s}?offset=-1"), Some(cred))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert!(
            header(&r, "cache-control").unwrap().starts_with("private"),
            "a credentialed answer is never for shared caches"
        );
        assert_eq!(r.text().await.unwrap(), "hello");
    }
    let r = req(&api, Method::POST, s, Some(&narrow))
        .body("!")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);

    // A closed stream's chunk is immutable, yet private to a credential.
    let r = req(&api, Method::POST, s, Some(&full))
        .header("stream-closed", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let r = req(&api, Method::GET, &chunk, Some(&full))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&r, "stream-immutable").as_deref(), Some("true"));
    assert_eq!(
        header(&r, "cache-control").as_deref(),
        Some("private, max-age=31536000, immutable")
    );

    // Tokens: narrowed further than their key, never wider.
    let r = token(&api, &narrow, serde_json::json!({"prefix": "s.b"})).await;
    expect_error(r, 403, "FORBIDDEN").await;
    let r = token(&api, &read_only, serde_json::json!({"ttl_secs": 60})).await;
    let v: serde_json::Value = r.json().await.unwrap();
    assert_eq!(v["read_only"], true);
    let ro_token = v["token"].as_str().unwrap().to_owned();
    let r = req(&api, Method::POST, s, Some(&ro_token))
        .body("x")
        .send()
        .await
        .unwrap();
    expect_error(r, 403, "FORBIDDEN").await;
    expect_error(
        token(&api, "dsk_nokey_x", serde_json::json!({})).await,
        401,
        "UNAUTHORIZED",
    )
    .await;

    // An expired token: 401.
    let r = token(&api, &full, serde_json::json!({"ttl_secs": 1})).await;
    let short = r.json::<serde_json::Value>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let deadline = Instant::now() + WAIT;
    loop {
        let r = req(&api, Method::GET, s, Some(&short))
            .send()
            .await
            .unwrap();
        if r.status() == StatusCode::UNAUTHORIZED {
            expect_error(r, 401, "UNAUTHORIZED").await;
            break;
        }
        assert!(Instant::now() < deadline, "the token never expired");
        tokio::time::sleep(POLL).await;
    }

    // The admin API answers only its own token.
    let r = api.get("/_admin/keys").send().await.unwrap();
    expect_error(r, 401, "UNAUTHORIZED").await;
    let r = api
        .get("/_admin/keys")
        .bearer_auth(&full)
        .send()
        .await
        .unwrap();
    expect_error(r, 401, "UNAUTHORIZED").await;
    let r = api
        .get("/_admin/keys?account=acme")
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    let keys: Vec<serde_json::Value> = r.json().await.unwrap();
    assert_eq!(keys.len(), 4);
    assert!(
        keys.iter().all(|k| k.get("key").is_none()),
        "secrets are never listed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn public_streams_read_without_a_credential_and_write_with_one() {
    let api = start(LimitConfig {
        rps: 0,
        live_reads: 0,
        ..LimitConfig::default()
    })
    .await;
    let (_, full) = make_key(&api, serde_json::json!({"account": "acme"})).await;
    let (_, read_only) = make_key(
        &api,
        serde_json::json!({"account": "acme", "read_only": true}),
    )
    .await;
    let s = "/acme/s.pub";
    let r = req(&api, Method::PUT, s, Some(&full))
        .header("stream-public", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(header(&r, "stream-public").as_deref(), Some("true"));
    let incarnation = header(&r, "stream-incarnation").unwrap();
    req(&api, Method::POST, s, Some(&full))
        .body("news")
        .send()
        .await
        .unwrap();

    let r = api.get(&format!("{s}?offset=-1")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(header(&r, "cache-control").unwrap().starts_with("public"));
    assert_eq!(r.text().await.unwrap(), "news");
    let chunk = format!("{s}/incarnation/{incarnation}/chunk/0000000000000000");
    assert_eq!(api.get(&chunk).send().await.unwrap().status(), 200);
    let r = req(&api, Method::POST, s, None)
        .body("x")
        .send()
        .await
        .unwrap();
    expect_error(r, 401, "UNAUTHORIZED").await;

    // Only a full key changes who reads it.
    let r = req(&api, Method::PUT, s, Some(&read_only))
        .header("stream-public", "false")
        .send()
        .await
        .unwrap();
    expect_error(r, 403, "FORBIDDEN").await;
    let r = req(&api, Method::PUT, s, Some(&full))
        .header("stream-public", "false")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = api.get(&format!("{s}?offset=-1")).send().await.unwrap();
    expect_error(r, 401, "UNAUTHORIZED").await;
    // The change is durable.
    let Api { origin, .. } = api;
    let (data, _keep) = origin.stop().await;
    let api = Api::on(
        TestOrigin::start_in(
            data,
            config(LimitConfig {
                rps: 0,
                live_reads: 0,
                ..LimitConfig::default()
            }),
            origin::store::StoreConfig::new,
        )
        .await,
    );
    let r = api.get(&format!("{s}?offset=-1")).send().await.unwrap();
    expect_error(r, 401, "UNAUTHORIZED").await;
    let r = req(&api, Method::HEAD, s, Some(&full))
        .send()
        .await
        .unwrap();
    assert_eq!(header(&r, "stream-public"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_keys_stop_working() {
    let api = start(LimitConfig {
        rps: 0,
        live_reads: 0,
        ..LimitConfig::default()
    })
    .await;
    let (id, key) = make_key(&api, serde_json::json!({"account": "acme"})).await;
    let s = "/acme/s.r";
    assert_eq!(
        req(&api, Method::PUT, s, Some(&key))
            .send()
            .await
            .unwrap()
            .status(),
        201
    );
    let t = token(&api, &key, serde_json::json!({})).await;
    let tok = t.json::<serde_json::Value>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    // Through the admin API: at once, for the key and its tokens.
    let r = api
        .request(Method::DELETE, &format!("/_admin/keys/{id}"))
        .bearer_auth(ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    for cred in [&key, &tok] {
        let r = req(&api, Method::GET, s, Some(cred)).send().await.unwrap();
        expect_error(r, 401, "UNAUTHORIZED").await;
    }

    // Through the CLI on the data directory: within a second.
    let (id2, key2) = make_key(&api, serde_json::json!({"account": "acme"})).await;
    assert_eq!(
        req(&api, Method::GET, s, Some(&key2))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_origin"))
        .args(["keys", "revoke", &id2, "--data"])
        .arg(&api.origin.data)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let revoked = Instant::now();
    loop {
        let r = req(&api, Method::GET, s, Some(&key2)).send().await.unwrap();
        if r.status() == StatusCode::UNAUTHORIZED {
            break;
        }
        assert!(
            revoked.elapsed() < Duration::from_secs(5),
            "revocation took too long"
        );
        tokio::time::sleep(POLL).await;
    }
    eprintln!("CLI revocation took effect after {:?}", revoked.elapsed());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_expiring_mid_sse_ends_the_tail_with_credential_expired() {
    let api = start(LimitConfig {
        rps: 0,
        live_reads: 0,
        ..LimitConfig::default()
    })
    .await;
    let (_, key) = make_key(&api, serde_json::json!({"account": "acme"})).await;
    let s = "/acme/s.sse";
    req(&api, Method::PUT, s, Some(&key)).send().await.unwrap();
    let r = token(&api, &key, serde_json::json!({"ttl_secs": 2})).await;
    let tok = r.json::<serde_json::Value>().await.unwrap()["token"]
        .as_str()
        .unwrap()
        .to_owned();
    let resp = api
        .get(&format!("{s}?offset=-1&live=sse"))
        .bearer_auth(&tok)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut sse = common::Sse::new(resp, common::WAIT);
    sse.expect("control").await;
    let expired = tokio::time::timeout(WAIT, sse.expect("credential-expired"))
        .await
        .expect("credential-expired within the token's life");
    assert_eq!(expired.json()["reason"], "credential_expired");
    sse.expect_end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_17th_open_tail_of_an_account_gets_429() {
    let api = start(LimitConfig {
        rps: 0,
        live_reads: 16,
        ..LimitConfig::default()
    })
    .await;
    let (_, key) = make_key(&api, serde_json::json!({"account": "acme"})).await;
    let s = "/acme/s.tails";
    req(&api, Method::PUT, s, Some(&key)).send().await.unwrap();
    let mut waiting = Vec::new();
    for i in 0..16 {
        let (http, url, key) = (api.http.clone(), api.url(s), key.clone());
        if i % 2 == 0 {
            waiting.push(tokio::spawn(async move {
                http.get(format!("{url}?offset=now&live=long-poll&timeout_ms=30000"))
                    .bearer_auth(key)
                    .send()
                    .await
                    .unwrap()
                    .status()
            }));
        } else {
            let r = http
                .get(format!("{url}?offset=now&live=sse"))
                .bearer_auth(key)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            waiting.push(tokio::spawn(async move {
                let _hold = r;
                std::future::pending::<()>().await;
                StatusCode::OK
            }));
        }
    }
    api.wait_for_metric("ds_origin_long_polls_waiting", 8).await;
    api.wait_for_metric("ds_origin_sse_open", 8).await;
    let r = req(
        &api,
        Method::GET,
        &format!("{s}?offset=now&live=long-poll"),
        Some(&key),
    )
    .send()
    .await
    .unwrap();
    assert_eq!(header(&r, "retry-after").as_deref(), Some("1"));
    expect_error(r, 429, "RATE_LIMITED").await;
    // Another account is not affected, nor are plain reads.
    let r = req(&api, Method::GET, &format!("{s}?offset=-1"), Some(&key))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for w in waiting {
        w.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_over_the_rate_gets_429_then_succeeds_after_retry_after() {
    let api = start(LimitConfig {
        rps: 5,
        live_reads: 0,
        ..LimitConfig::default()
    })
    .await;
    let (_, key) = make_key(&api, serde_json::json!({"account": "acme"})).await;
    let s = "/acme/s.rate";
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..20 {
        let r = req(&api, Method::HEAD, s, Some(&key)).send().await.unwrap();
        if r.status() == StatusCode::TOO_MANY_REQUESTS && retry_after.is_none() {
            retry_after = header(&r, "retry-after");
        }
        statuses.push(r.status().as_u16());
    }
    assert!(statuses.contains(&429), "{statuses:?}");
    let secs: u64 = retry_after.expect("Retry-After").parse().unwrap();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let r = req(&api, Method::PUT, s, Some(&key)).send().await.unwrap();
    assert_eq!(
        r.status(),
        201,
        "after Retry-After the account is served again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn secrets_never_appear_in_logs() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_str().unwrap();
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_origin"))
        .args(["keys", "create", "--account", "acme", "--data", data])
        .output()
        .unwrap();
    assert!(cli.status.success());
    let key = String::from_utf8(cli.stdout).unwrap().trim().to_owned();
    let secret = key.rsplit('_').next().unwrap().to_owned();
    assert!(!String::from_utf8_lossy(&cli.stderr).contains(&secret));
    let log = dir.path().join("origin.log");
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_origin"))
        .args(["--listen", "127.0.0.1:0", "--data", data])
        .env("RUST_LOG", "trace")
        .env("ORIGIN_ADMIN_TOKEN", ADMIN)
        .stdout(std::fs::File::create(&log).unwrap())
        .stderr(std::fs::File::create(dir.path().join("origin.err")).unwrap())
        .spawn()
        .unwrap();
    let addr = {
        let deadline = Instant::now() + WAIT;
        loop {
            let text = std::fs::read_to_string(&log).unwrap_or_default();
            if let Some(a) = text
                .split_whitespace()
                .find_map(|w| w.strip_prefix("addr="))
            {
                break a.to_owned();
            }
            assert!(Instant::now() < deadline, "the origin did not start");
            std::thread::sleep(POLL);
        }
    };
    let http = common::client();
    let base = format!("http://{addr}");
    http.put(format!("{base}/acme/s.log"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap();
    http.get(format!("{base}/acme/s.log"))
        .bearer_auth(format!("{key}x"))
        .send()
        .await
        .unwrap();
    let t: serde_json::Value = http
        .post(format!("{base}/_auth/token"))
        .bearer_auth(&key)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let tok = t["token"].as_str().unwrap().to_owned();
    http.get(format!("{base}/acme/s.log"))
        .bearer_auth(&tok)
        .send()
        .await
        .unwrap();
    let made: serde_json::Value = http
        .post(format!("{base}/_admin/keys"))
        .bearer_auth(ADMIN)
        .json(&serde_json::json!({"account": "acme"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let made_secret = made["key"]
        .as_str()
        .unwrap()
        .rsplit('_')
        .next()
        .unwrap()
        .to_owned();
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status();
    assert!(child.wait().unwrap().success());
    let logged = std::fs::read_to_string(&log).unwrap()
        + &std::fs::read_to_string(dir.path().join("origin.err")).unwrap();
    assert!(logged.contains("origin listening"), "the log was captured");
    for s in [&secret, &tok, &made_secret, &ADMIN.to_owned()] {
        assert!(!logged.contains(s.as_str()), "a secret is in the log");
    }
    let keys_file = std::fs::read_to_string(dir.path().join("keys.json")).unwrap();
    assert!(!keys_file.contains(&secret) && !keys_file.contains(&made_secret));
}

/// Nothing the origin writes is readable by other users: the data
/// directory is 0700 whatever it was made with, and every file and folder
/// in it (the log, checkpoints, stream files, keys) is its owner's alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_data_directory_is_its_owners_alone() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o755)).unwrap();
    let cli = std::process::Command::new(env!("CARGO_BIN_EXE_origin"))
        .args(["keys", "create", "--account", "acme", "--data"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(cli.status.success());
    let proc = common::process::spawn(&[], &["--data".as_ref(), data.as_os_str()]);
    let base = format!("http://{}", proc.addr);
    let http = common::client();
    let path = format!("{base}/v1/stream/modes");
    let r = http
        .put(&path)
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // Past a stream's log share: it gets a file of its own.
    for _ in 0..4 {
        let r = http
            .post(&path)
            .header("content-type", "text/plain")
            .body(vec![b'x'; 32 * 1024])
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 204);
    }
    proc.terminate();
    fn walk(p: &std::path::Path, seen: &mut Vec<(std::path::PathBuf, u32)>) {
        for e in std::fs::read_dir(p).unwrap().flatten() {
            let mode = e.metadata().unwrap().permissions().mode() & 0o777;
            seen.push((e.path(), mode));
            if e.file_type().unwrap().is_dir() {
                walk(&e.path(), seen);
            }
        }
    }
    let mut seen = vec![(
        data.clone(),
        std::fs::metadata(&data).unwrap().permissions().mode() & 0o777,
    )];
    walk(&data, &mut seen);
    let names: Vec<String> = seen
        .iter()
        .map(|(p, _)| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert!(names.iter().any(|n| n == "keys.json"), "{names:?}");
    assert!(
        seen.iter().any(|(p, _)| p
            .parent()
            .is_some_and(|d| d.parent().is_some_and(|s| s.ends_with("streams")))),
        "a stream file: {names:?}"
    );
    for (p, mode) in &seen {
        assert_eq!(mode & 0o077, 0, "{} is {mode:o}", p.display());
    }
}

/// Budgets are charged after authentication, per credential: requests
/// with a refused credential spend no one's budget (anyone could exhaust
/// an account's by sending them), and anonymous readers of a public
/// stream have a budget of their own, not its owner's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_charged_after_authentication_per_credential() {
    let api = start(LimitConfig {
        rps: 5,
        live_reads: 0,
        ..LimitConfig::default()
    })
    .await;
    let (_, key) = make_key(&api, serde_json::json!({"account": "acme"})).await;
    let s = "/acme/s.budget";
    let r = req(&api, Method::PUT, s, Some(&key))
        .header("stream-public", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // The key with its secret changed: refused, 30 times, never 429.
    let mut wrong = key.clone();
    let last = wrong.pop().unwrap();
    wrong.push(if last == 'a' { 'b' } else { 'a' });
    for _ in 0..30 {
        let r = req(&api, Method::HEAD, s, Some(&wrong))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 401);
    }
    // Anonymous readers of the public stream run out of their own budget.
    let mut anonymous = Vec::new();
    for _ in 0..30 {
        let r = req(&api, Method::GET, &format!("{s}?offset=-1"), None)
            .send()
            .await
            .unwrap();
        anonymous.push(r.status().as_u16());
    }
    assert!(anonymous.contains(&429), "{anonymous:?}");
    // The owner's budget was spent by none of them.
    for _ in 0..3 {
        let r = req(&api, Method::HEAD, s, Some(&key)).send().await.unwrap();
        assert_eq!(r.status(), 200, "the owner is served");
    }
}
