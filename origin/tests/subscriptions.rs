//! Subscriptions against a real origin on loopback, the parts the
//! end-to-end tests (e2e/python/test_webhooks.py) do not reach: access by
//! credential, the per-account bound, and the bounds on webhook
//! deliveries in flight, per receiving host and in total, with a receiver
//! that holds every delivery until the test lets it go.

use crate::common;
use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::{expect_error, wait_until, Api, TestOrigin};
use http_body_util::{BodyExt, Full};
use origin::auth::AuthConfig;
use origin::core::subscription::address::{Cidr, UrlPolicy};
use origin::http::HttpConfig;
use origin::subscriptions::SubscriptionsConfig;
use reqwest::Method;

const ADMIN: &str = "admin-test-token";

fn call(api: &Api, method: Method, path: &str, cred: Option<&str>) -> reqwest::RequestBuilder {
    let r = api.request(method, path);
    match cred {
        Some(c) => r.bearer_auth(c),
        None => r,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declaring_and_using_a_subscription_needs_access_to_what_it_reaches() {
    let api = Api::start_with(HttpConfig {
        auth: AuthConfig {
            admin_token: Some(ADMIN.into()),
            ..AuthConfig::default()
        },
        subscriptions: SubscriptionsConfig {
            max_per_account: 2,
            ..SubscriptionsConfig::default()
        },
        ..HttpConfig::default()
    })
    .await;
    let full = api
        .make_key(ADMIN, serde_json::json!({"account": "acme"}))
        .await
        .1;
    let read_only = api
        .make_key(
            ADMIN,
            serde_json::json!({"account": "acme", "read_only": true}),
        )
        .await
        .1;
    let other = api
        .make_key(ADMIN, serde_json::json!({"account": "beta"}))
        .await
        .1;
    let sub = "/acme/__ds/subscriptions/feed";
    let body = serde_json::json!({"type": "pull-wake", "pattern": "feeds/*", "wake_stream": "wakes", "lease_ttl_ms": 1000});
    for (cred, status, code) in [
        (None, 401, "UNAUTHORIZED"),
        (Some(read_only.as_str()), 403, "FORBIDDEN"),
        (Some(other.as_str()), 403, "FORBIDDEN"),
    ] {
        let r = call(&api, Method::PUT, sub, cred)
            .json(&body)
            .send()
            .await
            .unwrap();
        expect_error(r, status, code).await;
    }
    // Nothing was made by the refusals.
    let r = call(&api, Method::GET, sub, Some(&full))
        .send()
        .await
        .unwrap();
    expect_error(r, 404, "SUBSCRIPTION_NOT_FOUND").await;
    let r = call(&api, Method::PUT, sub, Some(&full))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // Reading needs read access; claiming, write access.
    let r = call(&api, Method::GET, sub, Some(&read_only))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let r = call(&api, Method::GET, sub, Some(&other))
        .send()
        .await
        .unwrap();
    expect_error(r, 403, "FORBIDDEN").await;
    let claim = format!("{sub}/claim");
    let r = call(&api, Method::POST, &claim, Some(&read_only))
        .json(&serde_json::json!({"worker": "w"}))
        .send()
        .await
        .unwrap();
    expect_error(r, 403, "FORBIDDEN").await;
    let r = call(&api, Method::POST, &claim, Some(&full))
        .json(&serde_json::json!({"worker": "w"}))
        .send()
        .await
        .unwrap();
    expect_error(r, 409, "NO_PENDING_WORK").await;
    // A credential is no wake token.
    let r = call(&api, Method::POST, &format!("{sub}/ack"), Some(&full))
        .json(&serde_json::json!({"wake_id": "w_0", "generation": 1, "done": true}))
        .send()
        .await
        .unwrap();
    expect_error(r, 401, "TOKEN_INVALID").await;
    // Adding a stream of another account is refused.
    let r = call(&api, Method::POST, &format!("{sub}/streams"), Some(&other))
        .json(&serde_json::json!({"streams": ["x"]}))
        .send()
        .await
        .unwrap();
    expect_error(r, 403, "FORBIDDEN").await;
    // Two subscriptions per account: a third of acme's is refused, one
    // of the default account's (open) is not.
    let second = "/acme/__ds/subscriptions/second";
    let r = call(&api, Method::PUT, second, Some(&full))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let r = call(
        &api,
        Method::PUT,
        "/acme/__ds/subscriptions/third",
        Some(&full),
    )
    .json(&body)
    .send()
    .await
    .unwrap();
    expect_error(r, 409, "SUBSCRIPTION_LIMIT").await;
    let r = api
        .put("/v1/stream/__ds/subscriptions/elsewhere")
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // The journal is the server's own: no client reads it.
    let r = api
        .get("/.ds-region/subscriptions/0000000000000001?offset=-1")
        .send()
        .await
        .unwrap();
    expect_error(r, 404, "STREAM_NOT_FOUND").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_credential_reaches_the_servers_own_streams() {
    let api = Api::start_with(HttpConfig {
        auth: AuthConfig {
            admin_token: Some(ADMIN.into()),
            ..AuthConfig::default()
        },
        ..HttpConfig::default()
    })
    .await;
    let r = api
        .put("/v1/stream/__ds/subscriptions/s")
        .json(&serde_json::json!({"type": "pull-wake", "streams": ["a"], "wake_stream": "w"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    // Even a key of the account the path would name.
    let (_, key) = api
        .make_key(ADMIN, serde_json::json!({"account": ".ds-region"}))
        .await;
    let journal = "/.ds-region/subscriptions/0000000000000001";
    let r = call(
        &api,
        Method::GET,
        &format!("{journal}?offset=-1"),
        Some(&key),
    )
    .send()
    .await
    .unwrap();
    expect_error(r, 404, "STREAM_NOT_FOUND").await;
    let r = call(&api, Method::POST, journal, Some(&key))
        .body("{}")
        .send()
        .await
        .unwrap();
    expect_error(r, 404, "STREAM_NOT_FOUND").await;
    // Nor as a fork's source (the fork would carry its bytes out).
    let r = call(&api, Method::PUT, "/v1/stream/copy", Some(&key))
        .header("content-type", "application/octet-stream")
        .header("stream-forked-from", journal)
        .send()
        .await
        .unwrap();
    expect_error(r, 404, "STREAM_NOT_FOUND").await;
    let r = api.get("/v1/stream/copy?offset=-1").send().await.unwrap();
    expect_error(r, 404, "STREAM_NOT_FOUND").await;
}

/// A receiver that holds every delivery until released, counting them in
/// flight per `Host`.
#[derive(Default)]
struct Held {
    in_flight: HashMap<String, usize>,
    most: HashMap<String, usize>,
    released: bool,
}

async fn holding_receiver(held: Arc<Mutex<Held>>, release: Arc<tokio::sync::Notify>) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let (held, release) = (held.clone(), release.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (held, release) = (held.clone(), release.clone());
                        async move {
                            let host = req
                                .headers()
                                .get("host")
                                .and_then(|h| h.to_str().ok())
                                .unwrap_or("")
                                .split(':')
                                .next()
                                .unwrap_or("")
                                .to_owned();
                            let _ = req.into_body().collect().await;
                            {
                                let mut h = held.lock().unwrap();
                                let n = h.in_flight.entry(host.clone()).or_default();
                                *n += 1;
                                let n = *n;
                                let most = h.most.entry(host.clone()).or_default();
                                *most = (*most).max(n);
                            }
                            loop {
                                let released = release.notified();
                                if held.lock().unwrap().released {
                                    break;
                                }
                                released.await;
                            }
                            *held.lock().unwrap().in_flight.get_mut(&host).unwrap() -= 1;
                            Ok::<_, hyper::Error>(hyper::Response::new(Full::new(
                                Bytes::from_static(b"{\"done\":true}"),
                            )))
                        }
                    },
                );
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(hyper_util::rt::TokioIo::new(sock), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_in_flight_are_bounded_per_host_and_in_total() {
    let api = Api::on(
        TestOrigin::start_with(HttpConfig {
            subscriptions: SubscriptionsConfig {
                url_policy: UrlPolicy {
                    allow_http: true,
                    allow: vec![Cidr::parse("127.0.0.0/8").unwrap()],
                },
                max_deliveries_per_host: 2,
                max_deliveries: 3,
                // Held deliveries must not time out while the test looks.
                webhook_timeout: std::time::Duration::from_secs(120),
                ..SubscriptionsConfig::default()
            },
            ..HttpConfig::default()
        })
        .await,
    );
    let held = Arc::new(Mutex::new(Held::default()));
    let release = Arc::new(tokio::sync::Notify::new());
    let port = holding_receiver(held.clone(), release.clone()).await.port();
    let in_flight =
        |held: &Arc<Mutex<Held>>| held.lock().unwrap().in_flight.values().sum::<usize>();
    // Two receiving hosts (one listener): five subscriptions each.
    for (host, first) in [("127.0.0.1", 0), ("localhost", 5)] {
        for i in first..first + 5 {
            let r = api
                .put(&format!("/v1/stream/__ds/subscriptions/s{i}"))
                .json(&serde_json::json!({"type": "webhook", "streams": [format!("held/{i}")], "webhook": {"url": format!("http://{host}:{port}/hook")}, "lease_ttl_ms": 60_000}))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 201);
            api.create_with(&format!("/v1/stream/held/{i}"), "text/plain", b"x".to_vec())
                .await;
        }
        let wakes = first + 5;
        api.wait_for_metric("ds_origin_subscription_wakes_total", wakes)
            .await;
        let want = if first == 0 { 2 } else { 3 };
        wait_until("deliveries held by the receiver", || async {
            in_flight(&held) == want
        })
        .await;
        // The others wait for a slot: no delivery attempt past the bounds.
        assert_eq!(
            api.metric("ds_origin_webhook_deliveries_total").await,
            want as i64
        );
    }
    {
        let h = held.lock().unwrap();
        assert_eq!(h.most.get("127.0.0.1"), Some(&2));
        assert!(h.most.get("localhost").copied().unwrap_or(0) <= 2);
    }
    held.lock().unwrap().released = true;
    release.notify_waiters();
    // Every wake goes out in turn and is acked.
    for i in 0..10 {
        let path = format!("/v1/stream/__ds/subscriptions/s{i}");
        wait_until("every stream acked", || async {
            let v: serde_json::Value = api.get(&path).send().await.unwrap().json().await.unwrap();
            v["streams"][0]["acked_offset"] == "0000000000000001"
        })
        .await;
    }
    assert_eq!(api.metric("ds_origin_webhook_deliveries_total").await, 10);
}
