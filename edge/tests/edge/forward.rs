//! Writes, HEAD, reads and refusals pass through with the origin's own
//! statuses, headers and bodies.

use reqwest::Method;

use crate::common::*;

/// Headers that differ between two answers to the same request for reasons
/// other than the proxy: the clock, and the cursor's random jitter.
const VOLATILE: [&str; 2] = ["date", "stream-cursor"];

fn comparable(resp: &reqwest::Response) -> Vec<(String, String)> {
    comparable_headers(resp, &VOLATILE)
}

/// A request: method, path and query, extra headers.
type Case = (Method, String, Vec<(&'static str, String)>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_through_the_edge_are_the_origins_own() {
    let s = Stack::start().await;
    let p = stream_path("fwd");
    let r = s.create(&p, "application/json").await;
    let incarnation = header(&r, "stream-incarnation").expect("incarnation");

    // Producer semantics are the origin's: accepted, duplicate, gap.
    let post = |seq: u64| {
        s.http
            .post(s.url(&p))
            .header("content-type", "application/json")
            .header("producer-id", "p")
            .header("producer-epoch", "0")
            .header("producer-seq", seq.to_string())
            .body(r#"[{"n":1},{"n":2}]"#)
    };
    let first = post(0).send().await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(
        header(&first, "producer-outcome").as_deref(),
        Some("accepted")
    );
    let again = post(0).send().await.unwrap();
    assert_eq!(again.status(), 204);
    assert_eq!(
        header(&again, "producer-outcome").as_deref(),
        Some("duplicate")
    );
    assert_eq!(
        header(&again, "stream-offset"),
        header(&first, "stream-offset")
    );
    let gap = post(5).send().await.unwrap();
    assert_eq!(gap.status(), 409);
    assert_eq!(header(&gap, "producer-expected-seq").as_deref(), Some("1"));
    let body: serde_json::Value = gap.json().await.unwrap();
    assert_eq!(body["error"]["code"], "PRODUCER_SEQ_CONFLICT");

    // The same request to the edge and to the origin: the same answer.
    let missing = stream_path("missing");
    let cases: Vec<Case> = vec![
        (Method::GET, format!("{p}?offset=-1"), vec![]),
        (Method::GET, format!("{p}?offset=0000000000000008"), vec![]),
        (Method::GET, format!("{p}?offset=-1&max_bytes=3"), vec![]),
        (Method::GET, format!("{p}?offset=now"), vec![]),
        (Method::GET, format!("{p}?offset=zzz"), vec![]),
        (Method::GET, format!("{p}?offset=ffffffffffffffff"), vec![]),
        (
            Method::GET,
            format!("{p}?offset=-1&consistency=leader"),
            vec![],
        ),
        (Method::GET, format!("{missing}?offset=-1"), vec![]),
        (Method::HEAD, p.clone(), vec![]),
        (Method::HEAD, missing.clone(), vec![]),
        (
            Method::GET,
            format!("{p}?offset=-1"),
            vec![("stream-incarnation", "1-0000000000000000".to_owned())],
        ),
        (
            Method::GET,
            format!("{p}?offset=-1"),
            vec![("stream-incarnation", incarnation.clone())],
        ),
        (Method::OPTIONS, p.clone(), vec![("origin", "x".to_owned())]),
    ];
    for (method, path, headers) in cases {
        let send = |url: String| {
            // One request id on both: it is echoed, and named in errors.
            let mut req = s
                .http
                .request(method.clone(), url)
                .header("x-request-id", "same-on-both");
            for (k, v) in &headers {
                req = req.header(*k, v);
            }
            req.send()
        };
        let via_edge = send(s.url(&path)).await.unwrap();
        let direct = send(s.origin_url(&path)).await.unwrap();
        let what = format!("{method} {path} {headers:?}");
        assert_eq!(via_edge.status(), direct.status(), "{what}");
        assert_eq!(comparable(&via_edge), comparable(&direct), "{what}");
        assert_eq!(
            via_edge.bytes().await.unwrap(),
            direct.bytes().await.unwrap(),
            "{what}"
        );
    }

    // A conditional read: 304 through the edge.
    let r = s.get(&format!("{p}?offset=-1")).await;
    let etag = header(&r, "etag").expect("etag");
    let r = s
        .http
        .get(s.url(&format!("{p}?offset=-1")))
        .header("if-none-match", &etag)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 304);

    // Delete through the edge; the stream is gone for both.
    let r = s.http.delete(s.url(&p)).send().await.unwrap();
    assert_eq!(r.status(), 204);
    let r = s.http.head(s.origin_url(&p)).send().await.unwrap();
    assert_eq!(r.status(), 404);
    // Every request above went to the origin once, as it came.
    assert_eq!(
        s.metric("ds_edge_upstream_requests_total{kind=\"forward\"}")
            .await,
        20
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_origin_is_a_503_with_the_shared_error_body() {
    // A port nothing listens on.
    let dead = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let config = edge::config::EdgeConfig::new(origin.parse().unwrap(), 64 << 20).unwrap();
    let (addr, _state, _stop, _task) = spawn_edge(config).await;
    let http = client();
    let p = stream_path("dead");
    for path in [
        format!("{p}?offset=-1"),
        format!("{p}?offset=-1&live=long-poll"),
        format!("{p}?offset=-1&live=sse"),
        format!("{p}/incarnation/1-0000000000000000/chunk/0000000000000000"),
    ] {
        let r = http
            .get(format!("http://{addr}{path}"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 503, "{path}");
        assert_eq!(header(&r, "retry-after").as_deref(), Some("1"), "{path}");
        assert_eq!(header(&r, "cache-control").as_deref(), Some("no-store"));
        assert_eq!(
            header(&r, "content-type").as_deref(),
            Some("application/json")
        );
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "UNAVAILABLE", "{path}");
        assert!(body["error"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()));
    }
    let r = http
        .post(format!("http://{addr}{p}"))
        .body("x")
        .send()
        .await
        .unwrap();
    // Behind an HTTP hop, a request with a body gets the hop's own answer
    // (it may have been applied before the hop gave up: the edge does not
    // turn it into its 503, which invites a retry).
    let want = if hop::in_use() { 502 } else { 503 };
    assert_eq!(r.status(), want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn absolute_urls_name_the_edge_never_the_origin() {
    let s = Stack::start().await;
    let p = stream_path("location");
    let r = s.create(&p, "text/plain").await;
    // No --public-url: the Host the client sent.
    assert_eq!(
        header(&r, "location"),
        Some(format!("http://{}{p}", s.edge_addr))
    );
    let direct = s.http.put(s.origin_url(&stream_path("location-direct")));
    let direct = direct
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert!(header(&direct, "location")
        .unwrap()
        .contains(&s.origin.addr.to_string()));

    // Behind a CDN: the public URL it was given.
    let mut config = edge::config::EdgeConfig::new(
        format!("http://{}", s.origin.addr).parse().unwrap(),
        1 << 20,
    )
    .unwrap();
    config.public_url = Some(edge::config::public_url("https://streams.example.com/").unwrap());
    let (addr, _state, _stop, _task) = serve_edge(config).await;
    let q = stream_path("location-cdn");
    let r = s
        .http
        .put(format!("http://{addr}{q}"))
        .header("content-type", "text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    assert_eq!(
        header(&r, "location"),
        Some(format!("https://streams.example.com{q}"))
    );
}

/// The origin's admin API is never served through an edge (operators reach
/// the origin directly): 404 with the shared error body, and nothing of
/// the request reaches the origin. The token exchange still passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_is_not_served_through_the_edge() {
    let s = Stack::start().await;
    for (method, path) in [
        (Method::GET, "/_admin/keys"),
        (Method::POST, "/_admin/keys"),
        (Method::DELETE, "/_admin/keys/k1"),
        (Method::GET, "/_admin"),
    ] {
        let r = s
            .http
            .request(method.clone(), s.url(path))
            .bearer_auth("admin-token")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{method} {path}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["code"], "STREAM_NOT_FOUND", "{method} {path}");
    }
    assert_eq!(
        s.metric("ds_edge_upstream_requests_total{kind=\"forward\"}")
            .await,
        0,
        "nothing went to the origin"
    );
    let r = s.http.post(s.url("/_auth/token")).send().await.unwrap();
    assert_ne!(
        r.status(),
        404,
        "the token exchange is the origin's to answer"
    );
}

/// Request ids: a client's valid `X-Request-Id` is echoed by the edge and
/// reaches the origin (whose error body names it); without one, the edge
/// makes one, and the origin answers under that same id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_id_is_echoed_and_passed_to_the_origin() {
    let s = Stack::start().await;
    let missing = stream_path("no-such-stream");
    let r = s
        .http
        .get(s.url(&missing))
        .header("x-request-id", "client-42")
        .header(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    assert_eq!(r.headers()["x-request-id"], "client-42");
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"]["request_id"], "client-42", "{body}");

    // No id (or an invalid one): the edge's own, the same at the origin.
    for sent in [None, Some("has space")] {
        let mut b = s.http.get(s.url(&missing));
        if let Some(v) = sent {
            b = b.header("x-request-id", v);
        }
        let r = b.send().await.unwrap();
        let id = r.headers()["x-request-id"].to_str().unwrap().to_owned();
        assert_eq!(id.len(), 32, "a new id: {id}");
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["error"]["request_id"], id.as_str());
    }
    // Answers that are not errors carry it too.
    s.create(&missing, "text/plain").await;
    let r = s
        .http
        .get(s.url(&format!("{missing}?offset=-1")))
        .header("x-request-id", "read-1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-request-id"], "read-1");
}

/// `GET /_streams` is the origin's: through the edge the same statuses,
/// headers and bodies, `no-store`, and asked again it is asked again (the
/// edge keeps nothing of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_listing_passes_through_unkept() {
    let s = Stack::start().await;
    let root = stream_path("listed");
    for name in ["a", "b", "c"] {
        s.create(&format!("{root}/{name}"), "text/plain").await;
    }
    let prefix: String = url_encode(&root);
    for q in [
        format!("/_streams?prefix={prefix}&limit=2"),
        format!(
            "/_streams?prefix={prefix}&limit=2&after={}",
            url_encode(&format!("{root}/b"))
        ),
        "/_streams?limit=0".to_owned(),
    ] {
        let direct = s.http.get(s.origin_url(&q)).send().await.unwrap();
        let through = s.get(&q).await;
        assert_eq!(direct.status(), through.status(), "{q}");
        let mut want = comparable(&direct);
        let mut got = comparable(&through);
        want.retain(|(k, _)| k != "x-request-id");
        got.retain(|(k, _)| k != "x-request-id");
        assert_eq!(want, got, "{q}");
        assert_eq!(
            header(&through, "cache-control").as_deref(),
            Some("no-store")
        );
        let (d, t) = (
            direct.bytes().await.unwrap(),
            through.bytes().await.unwrap(),
        );
        assert_eq!(without_request_id(&d), without_request_id(&t), "{q}");
    }
    // A stream made since is in the next answer: nothing was kept.
    s.create(&format!("{root}/0"), "text/plain").await;
    let v: serde_json::Value = s
        .get(&format!("/_streams?prefix={prefix}&limit=2"))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(v["streams"][0]["stream_id"], format!("{root}/0"));
    assert_eq!(v["next_cursor"], format!("{root}/a"));
    assert!(
        s.metric("ds_edge_requests_total{route=\"list\",status=\"200\"}")
            .await
            >= 3
    );
}

/// A test path as a query value (its only reserved character is `/`).
fn url_encode(s: &str) -> String {
    s.replace('/', "%2F")
}
