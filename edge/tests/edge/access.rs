//! Access control through the edge: the spec's refusals that a credential
//! decides, answered by the edge for what it serves itself (tokens verified
//! with the origin's public key, anonymous reads only of public streams) and
//! by the origin for what it forwards (API keys); cached answers never reach
//! a request whose credential was not verified for the stream.

use std::time::{Duration, Instant};

use futures::StreamExt;
use origin::auth::AuthConfig;
use origin::http::HttpConfig;
use reqwest::Method;
use shared::limits::LimitConfig;

use super::common::{client, header, serve_edge, wait_metric_at, TestOrigin, POLL, WAIT};

const ADMIN: &str = "edge-admin-token";

struct Secured {
    origin: TestOrigin,
    edge: std::net::SocketAddr,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Secured {
    async fn start(tails: u32) -> Secured {
        Secured::start_limited(LimitConfig {
            rps: 0,
            live_reads: tails,
            ..LimitConfig::default()
        })
        .await
    }

    /// The edge limited by `edge_limits`; the origin counts no requests.
    async fn start_limited(edge_limits: LimitConfig) -> Secured {
        Secured::start_bounded(edge_limits, edge::config::Limits::default()).await
    }

    /// [`Secured::start_limited`], with the edge's own bounds `bounds`.
    async fn start_bounded(edge_limits: LimitConfig, bounds: edge::config::Limits) -> Secured {
        let limits = LimitConfig {
            rps: 0,
            ..edge_limits
        };
        let origin = TestOrigin::start_http(
            HttpConfig {
                auth: AuthConfig {
                    admin_token: Some(ADMIN.into()),
                    limits,
                    ..AuthConfig::default()
                },
                ..HttpConfig::default()
            },
            None,
        )
        .await;
        let mut config = edge::config::EdgeConfig::new(
            format!("http://{}", origin.addr).parse().unwrap(),
            64 << 20,
        )
        .unwrap();
        config.access.limits = edge_limits;
        config.limits = bounds;
        let (edge, _, stop, _) = serve_edge(config).await;
        Secured {
            origin,
            edge,
            _stop: stop,
        }
    }

    fn origin_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.origin.addr)
    }

    fn edge_url(&self, path: &str) -> String {
        format!("http://{}{path}", self.edge)
    }

    async fn key(&self, body: serde_json::Value) -> String {
        let r = client()
            .post(self.origin_url("/_admin/keys"))
            .bearer_auth(ADMIN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        r.json::<serde_json::Value>().await.unwrap()["key"]
            .as_str()
            .unwrap()
            .to_owned()
    }

    /// A token for `key`, exchanged through the edge (forwarded).
    async fn token(&self, key: &str, body: serde_json::Value) -> String {
        let r = client()
            .post(self.edge_url("/_auth/token"))
            .bearer_auth(key)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.json::<serde_json::Value>().await.unwrap()["token"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

async fn send(
    s: &Secured,
    method: Method,
    path: &str,
    cred: Option<&str>,
    body: &'static str,
) -> reqwest::Response {
    // As a page on another origin sends it.
    let mut r = client()
        .request(method, s.edge_url(path))
        .header("content-type", "text/plain")
        .header("origin", "http://page.example")
        .body(body);
    if let Some(c) = cred {
        r = r.bearer_auth(c);
    }
    r.send().await.unwrap()
}

async fn expect(resp: reqwest::Response, status: u16, code: &str) {
    let url = resp.url().clone();
    assert_eq!(resp.status().as_u16(), status, "{url}");
    if !code.is_empty() {
        let body: serde_json::Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], code, "{url}: {body}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_through_the_edge_and_no_cached_answer_without_a_credential() {
    let s = Secured::start(0).await;
    let full = s.key(serde_json::json!({"account": "acme"})).await;
    let read_only = s
        .key(serde_json::json!({"account": "acme", "read_only": true}))
        .await;
    let agent = s
        .key(serde_json::json!({"account": "acme", "agent": true}))
        .await;
    let beta = s.key(serde_json::json!({"account": "beta"})).await;
    let token = s.token(&full, serde_json::json!({})).await;
    let ro_token = s.token(&read_only, serde_json::json!({})).await;
    let beta_token = s.token(&beta, serde_json::json!({})).await;
    let agent_token = s.token(&agent, serde_json::json!({})).await;

    // A private stream with a complete, immutable chunk (closed).
    let p = "/acme/s.private";
    let r = send(&s, Method::PUT, p, Some(&token), "").await;
    assert_eq!(r.status(), 201);
    let inc = header(&r, "stream-incarnation").unwrap();
    assert_eq!(
        send(&s, Method::POST, p, Some(&token), "secret")
            .await
            .status(),
        204
    );
    let r = client()
        .post(s.edge_url(p))
        .bearer_auth(&token)
        .header("stream-closed", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204);
    let chunk = format!("{p}/incarnation/{inc}/chunk/0000000000000000");
    // A token holder fills the edge's cache...
    let r = send(&s, Method::GET, &chunk, Some(&token), "").await;
    assert_eq!(r.status(), 200);
    assert_eq!(header(&r, "stream-immutable").as_deref(), Some("true"));
    assert!(header(&r, "cache-control").unwrap().starts_with("private"));
    assert_eq!(r.text().await.unwrap(), "secret");

    // ...which no request without a verified credential reaches.
    let rows: Vec<(Method, String, Option<&str>, u16, &str)> = vec![
        (Method::GET, chunk.clone(), None, 401, "UNAUTHORIZED"),
        (
            Method::GET,
            format!("{p}?offset=-1"),
            None,
            401,
            "UNAUTHORIZED",
        ),
        (
            Method::GET,
            format!("{p}?offset=-1&live=sse"),
            None,
            401,
            "UNAUTHORIZED",
        ),
        (
            Method::GET,
            format!("{p}?offset=now&live=long-poll"),
            None,
            401,
            "UNAUTHORIZED",
        ),
        (Method::HEAD, p.into(), None, 401, ""),
        (Method::POST, p.into(), None, 401, "UNAUTHORIZED"),
        (
            Method::GET,
            chunk.clone(),
            Some("garbage"),
            401,
            "UNAUTHORIZED",
        ),
        (
            Method::GET,
            chunk.clone(),
            Some("dst_forged.sig"),
            401,
            "UNAUTHORIZED",
        ),
        (
            Method::GET,
            chunk.clone(),
            Some("dsk_nokey_nope"),
            401,
            "UNAUTHORIZED",
        ),
        (
            Method::GET,
            chunk.clone(),
            Some(&agent),
            401,
            "exchange_required",
        ),
        (
            Method::GET,
            chunk.clone(),
            Some(&beta_token),
            403,
            "FORBIDDEN",
        ),
        (Method::GET, chunk.clone(), Some(&beta), 403, "FORBIDDEN"),
        (
            Method::GET,
            "/acme/s.none".into(),
            Some(&beta_token),
            403,
            "FORBIDDEN",
        ),
        (Method::POST, p.into(), Some(&ro_token), 403, "FORBIDDEN"),
        (Method::POST, p.into(), Some(&read_only), 403, "FORBIDDEN"),
        (
            Method::GET,
            "/acme/s.none".into(),
            Some(&token),
            404,
            "STREAM_NOT_FOUND",
        ),
    ];
    for (method, path, cred, status, code) in rows {
        let r = send(&s, method, &path, cred, "").await;
        // A page on another origin can read every refusal (to refresh its
        // token, say), as it can the origin's own.
        for (name, value) in [
            ("access-control-allow-origin", "*"),
            ("access-control-expose-headers", shared::headers::EXPOSED),
            ("x-content-type-options", "nosniff"),
            ("cross-origin-resource-policy", "cross-origin"),
        ] {
            assert_eq!(header(&r, name).as_deref(), Some(value), "{path} {name}");
        }
        expect(r, status, code).await;
    }
    // 412 (and the rest of what only the origin knows) passes through.
    let stale = client()
        .get(s.edge_url(&format!("{p}?offset=-1")))
        .bearer_auth(&token)
        .header("stream-incarnation", "1-0000000000000000")
        .send()
        .await
        .unwrap();
    expect(stale, 412, "INCARNATION_MISMATCH").await;
    // Verified credentials read it: tokens from the edge's cache, keys
    // through the origin; none of these answers is for shared caches.
    for cred in [&token, &ro_token, &agent_token, &full, &read_only] {
        let r = send(&s, Method::GET, &chunk, Some(cred), "").await;
        assert_eq!(r.status(), 200);
        assert!(header(&r, "cache-control").unwrap().starts_with("private"));
        assert_eq!(r.text().await.unwrap(), "secret");
    }

    // A public stream: anonymous reads are served (and cacheable), writes
    // still need a credential.
    let q = "/acme/s.public";
    let r = client()
        .put(s.edge_url(q))
        .bearer_auth(&token)
        .header("content-type", "text/plain")
        .header("stream-public", "true")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(
        send(&s, Method::POST, q, Some(&token), "news")
            .await
            .status(),
        204
    );
    let r = send(&s, Method::GET, &format!("{q}?offset=-1"), None, "").await;
    assert_eq!(r.status(), 200);
    let cc = header(&r, "cache-control").unwrap();
    assert!(cc.starts_with("public"), "{cc}");
    assert_eq!(r.text().await.unwrap(), "news");
    expect(
        send(&s, Method::POST, q, None, "x").await,
        401,
        "UNAUTHORIZED",
    )
    .await;

    // An expired token is refused by the edge itself.
    let short = s.token(&full, serde_json::json!({"ttl_secs": 1})).await;
    let deadline = Instant::now() + WAIT;
    loop {
        let r = send(&s, Method::GET, &chunk, Some(&short), "").await;
        if r.status() == 401 {
            expect(r, 401, "UNAUTHORIZED").await;
            break;
        }
        assert!(Instant::now() < deadline, "the token never expired");
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_edge_counts_an_accounts_tails() {
    let s = Secured::start(2).await;
    let key = s.key(serde_json::json!({"account": "acme"})).await;
    let token = s.token(&key, serde_json::json!({})).await;
    let p = "/acme/s.tails";
    assert_eq!(
        send(&s, Method::PUT, p, Some(&token), "").await.status(),
        201
    );
    let mut held = Vec::new();
    for _ in 0..2 {
        let r = send(
            &s,
            Method::GET,
            &format!("{p}?offset=now&live=sse"),
            Some(&token),
            "",
        )
        .await;
        assert_eq!(r.status(), 200);
        held.push(r);
    }
    let r = send(
        &s,
        Method::GET,
        &format!("{p}?offset=now&live=long-poll&timeout_ms=100"),
        Some(&token),
        "",
    )
    .await;
    assert_eq!(header(&r, "retry-after").as_deref(), Some("1"));
    expect(r, 429, "RATE_LIMITED").await;
    // Closing a tail frees its place.
    held.pop();
    let deadline = Instant::now() + WAIT;
    loop {
        let r = send(
            &s,
            Method::GET,
            &format!("{p}?offset=now&live=long-poll&timeout_ms=100"),
            Some(&token),
            "",
        )
        .await;
        if r.status() != 429 {
            assert_eq!(r.status(), 204);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a closed tail was never counted out"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Limits are charged once the caller is known: requests with a forged
/// token or none spend nothing of the account's budget at the edge, and the
/// token's own budget then has all of its requests. Before, the edge charged
/// the path's account first, so one refused request used up a budget of 1.
/// (A budget of one request a second: the test's requests all fall within
/// that second unless the machine stalls for one.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_requests_spend_no_budget_at_the_edge() {
    let s = Secured::start_limited(LimitConfig {
        rps: 1,
        live_reads: 0,
        ..LimitConfig::default()
    })
    .await;
    let key = s.key(serde_json::json!({"account": "acme"})).await;
    let token = s.token(&key, serde_json::json!({})).await;
    let p = "/acme/s.budget";
    assert_eq!(
        send(&s, Method::PUT, p, Some(&key), "").await.status(),
        201,
        "made with the key, at the origin"
    );
    // One character of the signature changed.
    let mut forged = token.clone().into_bytes();
    let at = forged.len() - 10;
    forged[at] = if forged[at] == b'A' { b'B' } else { b'A' };
    let forged = String::from_utf8(forged).unwrap();
    for _ in 0..20 {
        expect(send(&s, Method::GET, p, Some(&forged), "").await, 401, "").await;
        expect(send(&s, Method::GET, p, None, "").await, 401, "").await;
    }
    // The token's budget is whole: one second's worth, then 429.
    let r = send(&s, Method::GET, p, Some(&token), "").await;
    assert_eq!(r.status(), 200, "the token's one request");
    let r = send(&s, Method::GET, p, Some(&token), "").await;
    assert!(header(&r, "retry-after").is_some());
    expect(r, 429, "RATE_LIMITED").await;
}

/// 20,000 anonymous reads under distinct 4 KB first path segments (each a
/// closed account the origin refuses): the edge keeps no rate-limit budget
/// for any of them, and what it remembers of "is this public" stays within
/// its bound (1 MiB here). Before, both maps kept every path: the issue
/// measured 158 MiB of growth for these requests.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn distinct_long_paths_grow_no_map_past_its_bound() {
    let origin = TestOrigin::start(shared::negotiate::JsonReads::Ndjson).await;
    let mut config =
        edge::config::EdgeConfig::new(format!("http://{}", origin.addr).parse().unwrap(), 64 << 20)
            .unwrap();
    config.access.public_memory = 1 << 20;
    let (edge, state, _stop, _) = serve_edge(config).await;
    let http = client();
    let segment = "a".repeat(4096);
    let mut refused = 0;
    let sends = futures::stream::iter(0..20_000u32).map(|i| {
        let url = format!("http://{edge}/{segment}{i}/s");
        let http = http.clone();
        async move { http.get(url).send().await.unwrap().status() }
    });
    let statuses: Vec<_> = sends.buffer_unordered(32).collect().await;
    for status in statuses {
        assert_eq!(status, 401);
        refused += 1;
    }
    assert_eq!(refused, 20_000);
    assert_eq!(
        state.access.limits().len(),
        0,
        "no budget for refused requests"
    );
    let used = state.access.public_memory_used();
    assert!(used <= 1 << 20, "public verdicts weigh {used} B");
    assert!(used > 0, "verdicts are remembered up to the bound");
}

/// Tails only the origin can admit (an API key's) go to the origin as they
/// came, and hold a place among the edge's own bounds as the tails it
/// serves do, until their answers end: an SSE reader among
/// `max_sse_readers`, a long-poll among `max_waiters`. Past them: 503 +
/// `Retry-After`, and the origin is not asked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tails_forwarded_for_a_key_hold_places_among_the_edges_bounds() {
    let bounds = edge::config::Limits {
        max_sse_readers: 1,
        max_waiters: 1,
        ..Default::default()
    };
    let s = Secured::start_bounded(
        LimitConfig {
            rps: 0,
            live_reads: 0,
            ..LimitConfig::default()
        },
        bounds,
    )
    .await;
    let key = s.key(serde_json::json!({"account": "acme"})).await;
    let p = "/acme/bounded";
    assert_eq!(send(&s, Method::PUT, p, Some(&key), "").await.status(), 201);

    let sse = format!("{p}?offset=-1&live=sse");
    let held = send(&s, Method::GET, &sse, Some(&key), "").await;
    assert_eq!(held.status(), 200);
    let refused = send(&s, Method::GET, &sse, Some(&key), "").await;
    assert_eq!(header(&refused, "retry-after").as_deref(), Some("1"));
    expect(refused, 503, "UNAVAILABLE").await;
    drop(held);
    // Its place comes back once the edge lets go of the dropped answer.
    let deadline = Instant::now() + WAIT;
    let again = loop {
        let r = send(&s, Method::GET, &sse, Some(&key), "").await;
        if r.status() == 200 || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(POLL).await;
    };
    assert_eq!(again.status(), 200, "the dropped reader's place came back");
    drop(again);

    let poll = format!("{p}?offset=now&live=long-poll&timeout_ms=60000");
    let waiting = {
        let (url, key) = (s.edge_url(&poll), key.clone());
        tokio::spawn(async move {
            client()
                .get(url)
                .bearer_auth(key)
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
    };
    // Once the first waits (the edge's gauge counts it), the next is
    // refused.
    wait_metric_at(
        &client(),
        &s.edge_url("/metrics"),
        "ds_edge_long_polls_waiting",
        |v| v == 1,
    )
    .await;
    let refused = send(
        &s,
        Method::GET,
        &format!("{poll}&cursor=other"),
        Some(&key),
        "",
    )
    .await;
    assert_eq!(header(&refused, "retry-after").as_deref(), Some("1"));
    expect(refused, 503, "UNAVAILABLE").await;
    // The waiting one gets the origin's answer.
    assert_eq!(
        send(&s, Method::POST, p, Some(&key), "x").await.status(),
        204
    );
    assert_eq!(waiting.await.unwrap().ok(), Some(200));
}
