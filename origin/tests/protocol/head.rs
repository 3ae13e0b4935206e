//! `HEAD {stream}`: the stream's state in headers, without a body.

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_reports_every_header() {
    let api = Api::start().await;
    let path = stream_path("head");
    let created = send(
        api.put(&path)
            .header("content-type", "text/plain; charset=utf-8")
            .header("stream-ttl", "3600")
            .body("hello"),
    )
    .await;
    assert_eq!(created.status().as_u16(), 201);
    let incarnation = header(&created, "stream-incarnation").unwrap();

    let head = send(api.head(&path)).await;
    assert_eq!(head.status().as_u16(), 200);
    let expect = [
        ("content-type", Some("text/plain; charset=utf-8")),
        ("stream-next-offset", Some("0000000000000005")),
        ("stream-closed", None),
        ("stream-retained-offset", Some("0000000000000000")),
        ("stream-incarnation", Some(incarnation.as_str())),
        ("ursula-max-request-bytes", Some("8388608")),
        ("ursula-max-snapshot-bytes", Some("134217728")),
        ("stream-ttl", Some("3600")),
        ("stream-expires-at", None),
        ("cache-control", Some("no-store")),
        ("x-content-type-options", Some("nosniff")),
        ("stream-snapshot-offset", None),
        ("stream-up-to-date", None),
    ];
    for (name, value) in expect {
        assert_eq!(header(&head, name).as_deref(), value, "{name}");
    }
    assert!(head.bytes().await.unwrap().is_empty(), "HEAD has no body");

    api.append(&path, "text/plain", "!").await;
    api.close(&path).await;
    let head = send(api.head(&path)).await;
    assert_eq!(header(&head, "stream-next-offset"), Some(offset(6)));
    assert_eq!(header(&head, "stream-closed").as_deref(), Some("true"));
    assert_eq!(header(&head, "stream-retained-offset"), Some(offset(0)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_echoes_the_expiry_and_the_type_as_created() {
    let api = Api::start().await;
    let cases = [
        (
            "application/json",
            &[("stream-expires-at", "2099-01-01T00:00:00Z")][..],
            None,
            Some("2099-01-01T00:00:00.000Z"),
        ),
        (
            "application/x-protobuf",
            &[("stream-expires-at", "2099-06-30T12:34:56.789+02:00")][..],
            None,
            Some("2099-06-30T10:34:56.789Z"),
        ),
        (
            "Text/Plain",
            &[("stream-ttl", "86400")][..],
            Some("86400"),
            None,
        ),
        ("image/png", &[][..], None, None),
    ];
    for (content_type, headers, ttl, expires_at) in cases {
        let path = stream_path("head-expiry");
        let mut req = api.put(&path).header("content-type", content_type);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        assert_eq!(send(req).await.status(), 201, "{content_type}");
        let head = send(api.head(&path)).await;
        assert_eq!(head.status().as_u16(), 200);
        // A JSON stream's HEAD names its type, though its reads are NDJSON.
        assert_eq!(header(&head, "content-type").as_deref(), Some(content_type));
        assert_eq!(header(&head, "stream-ttl").as_deref(), ttl);
        assert_eq!(header(&head, "stream-expires-at").as_deref(), expires_at);
        assert_eq!(header(&head, "stream-next-offset"), Some(offset(0)));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_of_a_missing_stream_is_404() {
    let api = Api::start().await;
    expect_head_error(&send(api.head(&stream_path("head-404"))).await, 404);
}
