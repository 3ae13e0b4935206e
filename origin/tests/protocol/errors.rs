//! The shape every refusal shares: `{"error":{"code","message"}}` as
//! `application/json`, with `nosniff` and `no-store` (checked by
//! `expect_error`), for refusals no other module provokes.

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_has_the_json_error_shape() {
    let api = Api::start().await;
    let path = stream_path("errors");
    api.create_with(&path, "text/plain", "abc").await;
    let missing = stream_path("errors-missing");
    let method = |m: &str| reqwest::Method::from_bytes(m.as_bytes()).unwrap();

    let cases: Vec<(reqwest::RequestBuilder, u16, &str)> = vec![
        (
            api.get(&format!("{missing}?offset=-1")),
            404,
            "STREAM_NOT_FOUND",
        ),
        (api.get(&missing), 404, "STREAM_NOT_FOUND"),
        (
            api.post(&missing)
                .header("content-type", "text/plain")
                .body("x"),
            404,
            "STREAM_NOT_FOUND",
        ),
        (api.delete(&missing), 404, "STREAM_NOT_FOUND"),
        (
            api.get(&format!("{missing}?offset=now&live=long-poll")),
            404,
            "STREAM_NOT_FOUND",
        ),
        (
            api.get(&format!("{missing}?offset=now&live=sse")),
            404,
            "STREAM_NOT_FOUND",
        ),
        (
            api.request(method("PATCH"), &path).body("x"),
            405,
            "METHOD_NOT_ALLOWED",
        ),
        (
            api.request(method("TRACE"), &path),
            405,
            "METHOD_NOT_ALLOWED",
        ),
        // Reserved paths are nothing a stream can be.
        (api.get("/_admin/keys"), 404, "STREAM_NOT_FOUND"),
        (
            api.post("/_admin")
                .header("content-type", "text/plain")
                .body("x"),
            404,
            "STREAM_NOT_FOUND",
        ),
        (
            // A token in a form this server never gives.
            api.get(&format!("{path}/incarnation/tok/chunk/0000000000000000")),
            400,
            "BAD_REQUEST",
        ),
        (
            api.get(&format!("{path}/snapshot")),
            404,
            "SNAPSHOT_NOT_FOUND",
        ),
        (
            api.get(&format!("{path}/incarnation/x")),
            404,
            "STREAM_NOT_FOUND",
        ),
        (api.get(&format!("{path}?offset=x")), 400, "INVALID_OFFSET"),
        (
            api.get(&format!("{path}?offset=-1&live=yes")),
            400,
            "BAD_REQUEST",
        ),
        (
            api.post(&path)
                .header("content-type", "text/html")
                .body("x"),
            409,
            "CONTENT_TYPE_MISMATCH",
        ),
        (
            api.post(&path).header("content-type", "text/plain"),
            400,
            "EMPTY_BODY",
        ),
        (
            api.put(&path).header("content-type", "text/html"),
            409,
            "STREAM_EXISTS",
        ),
        (
            api.get(&format!("{path}?offset={}", offset(99))),
            416,
            "RANGE_NOT_SATISFIABLE",
        ),
        (
            api.delete(&path).header("stream-incarnation", "nope"),
            412,
            "INCARNATION_MISMATCH",
        ),
    ];
    for (req, status, code) in cases {
        expect_error(send(req).await, status, code).await;
    }
    // A refused HEAD has the same headers and no body.
    let head = send(api.head(&missing)).await;
    expect_head_error(&head, 404);
    assert!(head.bytes().await.unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_carries_nosniff() {
    let api = Api::start().await;
    let path = stream_path("nosniff");
    let answers = [
        send(api.put(&path).header("content-type", "text/plain")).await,
        send(api.put(&path).header("content-type", "text/plain")).await,
        send(
            api.post(&path)
                .header("content-type", "text/plain")
                .body("x"),
        )
        .await,
        send(api.head(&path)).await,
        send(api.get(&format!("{path}?offset=-1"))).await,
        send(api.get(&format!("{path}?offset=now&live=long-poll&timeout_ms=1"))).await,
        send(api.request(reqwest::Method::OPTIONS, &path)).await,
        send(api.delete(&path)).await,
    ];
    for (i, resp) in answers.into_iter().enumerate() {
        assert!(resp.status().is_success(), "{}", resp.status());
        assert_eq!(
            header(&resp, "x-content-type-options").as_deref(),
            Some("nosniff"),
            "{}",
            resp.status()
        );
        // An append's answer never has a body to embed, so it goes without
        // Cross-Origin-Resource-Policy (see `http::append`).
        let corp = (i != 2).then(|| "cross-origin".to_owned());
        assert_eq!(header(&resp, "cross-origin-resource-policy"), corp, "{i}");
    }
}

/// A stream of active content (HTML, SVG) is served sandboxed: opened in
/// a browser from the API's origin it runs no script there. Every answer
/// with a body says so (reads, chunks, snapshots, errors).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn active_content_is_served_sandboxed() {
    let api = Api::start().await;
    for ct in ["text/html", "image/svg+xml"] {
        let path = stream_path("active");
        let created = api
            .create_with(&path, ct, "<script>alert(document.domain)</script>")
            .await;
        let token = header(&created, "stream-incarnation").unwrap();
        let answers = [
            send(api.get(&format!("{path}?offset=-1"))).await,
            send(api.get(&format!("{path}/incarnation/{token}/chunk/{}", offset(0)))).await,
            send(api.get(&format!("{path}?offset=zz"))).await,
        ];
        for resp in answers {
            assert_eq!(
                header(&resp, "content-security-policy").as_deref(),
                Some("sandbox"),
                "{ct}: {}",
                resp.status()
            );
        }
    }
}
