//! `DELETE {stream}` and incarnations: a stream created again at a path is a
//! new stream, and a request that names the old one is refused with 412.

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_then_recreate_is_a_new_stream() {
    let api = Api::start().await;
    let path = stream_path("recreate");
    let old = header(
        &api.create_with(&path, "text/plain", "old bytes").await,
        "stream-incarnation",
    )
    .unwrap();
    let deleted = send(api.delete(&path)).await;
    assert_eq!(deleted.status().as_u16(), 204);
    assert_eq!(
        header(&deleted, "x-content-type-options").as_deref(),
        Some("nosniff")
    );

    expect_head_error(&send(api.head(&path)).await, 404);
    expect_error(
        send(api.get(&format!("{path}?offset=-1"))).await,
        404,
        "STREAM_NOT_FOUND",
    )
    .await;
    expect_error(
        send(
            api.post(&path)
                .header("content-type", "text/plain")
                .body("x"),
        )
        .await,
        404,
        "STREAM_NOT_FOUND",
    )
    .await;
    expect_error(send(api.delete(&path)).await, 404, "STREAM_NOT_FOUND").await;

    let new = header(
        &api.create(&path, "application/octet-stream").await,
        "stream-incarnation",
    )
    .unwrap();
    assert_ne!(new, old);
    let read = send(api.get(&format!("{path}?offset=-1"))).await;
    assert_eq!(header(&read, "stream-next-offset"), Some(offset(0)));
    assert_eq!(
        header(&read, "content-type").as_deref(),
        Some("application/octet-stream")
    );
    assert!(read.bytes().await.unwrap().is_empty(), "no old bytes");
    // An offset of the old stream is past the new one's end.
    let resp = send(api.get(&format!("{path}?offset={}", offset(3)))).await;
    let headers = expect_error(resp, 416, "RANGE_NOT_SATISFIABLE").await;
    assert_eq!(
        headers.get("stream-next-offset").unwrap().to_str().unwrap(),
        offset(0)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_incarnation_is_412_on_every_operation() {
    let api = Api::start().await;
    let path = stream_path("incarnation");
    let old = header(&api.create(&path, "text/plain").await, "stream-incarnation").unwrap();
    assert_eq!(send(api.delete(&path)).await.status(), 204);
    let current = header(
        &api.create_with(&path, "text/plain", "new").await,
        "stream-incarnation",
    )
    .unwrap();

    let with = |req: reqwest::RequestBuilder| req.header("stream-incarnation", old.clone());
    let requests = [
        with(
            api.post(&path)
                .header("content-type", "text/plain")
                .body("x"),
        ),
        with(api.post(&path).header("stream-closed", "true")),
        with(api.get(&format!("{path}?offset=-1"))),
        with(api.get(&format!(
            "{path}?offset=now&live=long-poll&timeout_ms=60000"
        ))),
        with(api.get(&format!("{path}?offset=-1&live=sse"))),
        with(api.delete(&path)),
    ];
    for req in requests {
        let headers = expect_error(send(req).await, 412, "INCARNATION_MISMATCH").await;
        assert_eq!(
            headers.get("stream-incarnation").unwrap().to_str().unwrap(),
            current,
            "the current incarnation"
        );
    }
    let head = send(with(api.head(&path))).await;
    expect_head_error(&head, 412);
    assert_eq!(header(&head, "stream-incarnation").as_ref(), Some(&current));

    // Nothing changed, and the right incarnation works everywhere.
    let right = |req: reqwest::RequestBuilder| req.header("stream-incarnation", current.clone());
    assert_eq!(send(right(api.head(&path))).await.status(), 200);
    assert_eq!(
        send(right(
            api.post(&path)
                .header("content-type", "text/plain")
                .body("!")
        ))
        .await
        .status(),
        204
    );
    let read = send(right(api.get(&format!("{path}?offset=-1")))).await;
    assert_eq!(read.bytes().await.unwrap(), "new!");
    assert_eq!(send(right(api.delete(&path))).await.status(), 204);
}
