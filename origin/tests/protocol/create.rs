//! `PUT {stream}`: create, confirm, and the refusals of a create.

use crate::common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_answers_201_with_location_type_offset_and_incarnation() {
    let api = Api::start().await;
    let path = stream_path("create-201");
    let resp = api.create_with(&path, "text/plain", "hello").await;
    assert_eq!(
        header(&resp, "location").as_deref(),
        Some(api.url(&path).as_str())
    );
    assert_eq!(header(&resp, "content-type").as_deref(), Some("text/plain"));
    assert_eq!(header(&resp, "stream-next-offset"), Some(offset(5)));
    assert_eq!(header(&resp, "stream-closed"), None);
    assert_eq!(
        header(&resp, "x-content-type-options").as_deref(),
        Some("nosniff")
    );
    let incarnation = header(&resp, "stream-incarnation").expect("Stream-Incarnation");
    assert!(!incarnation.is_empty());
    assert!(
        resp.bytes().await.unwrap().is_empty(),
        "a create answers with no body"
    );
    assert_eq!(api.read_all(&path).await, b"hello");

    // An empty stream starts at offset zero, never at a sentinel.
    let empty = stream_path("create-empty");
    let resp = api.create(&empty, "text/plain").await;
    assert_eq!(header(&resp, "stream-next-offset"), Some(offset(0)));
    assert_ne!(
        header(&resp, "stream-incarnation"),
        Some(incarnation),
        "each stream has its own incarnation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_again_with_the_same_config_answers_200_and_changes_nothing() {
    let api = Api::start().await;
    let path = stream_path("create-200");
    let first = api.create_with(&path, "text/plain", "hello").await;
    let incarnation = header(&first, "stream-incarnation").unwrap();
    // The media type compares without case and parameters; the body of a
    // second create is not appended.
    for (content_type, body) in [
        ("text/plain", ""),
        ("TEXT/PLAIN; charset=utf-8", "other bytes"),
    ] {
        let resp = send(
            api.put(&path)
                .header("content-type", content_type)
                .body(body),
        )
        .await;
        assert_eq!(resp.status().as_u16(), 200, "{content_type}");
        assert_eq!(header(&resp, "location"), None, "Location only on 201");
        assert_eq!(
            header(&resp, "content-type").as_deref(),
            Some("text/plain"),
            "the type as created"
        );
        assert_eq!(header(&resp, "stream-next-offset"), Some(offset(5)));
        assert_eq!(
            header(&resp, "stream-incarnation").as_ref(),
            Some(&incarnation)
        );
    }
    assert_eq!(api.read_all(&path).await, b"hello");

    // Same TTL, same expiry instant written another way, same closed state.
    let ttl = stream_path("create-200-ttl");
    for status in [201, 200] {
        let resp = send(
            api.put(&ttl)
                .header("content-type", "text/plain")
                .header("stream-ttl", "60"),
        )
        .await;
        assert_eq!(resp.status().as_u16(), status);
    }
    let at = stream_path("create-200-at");
    for (value, status) in [
        ("2099-01-01T00:00:00Z", 201),
        ("2099-01-01T02:00:00.000+02:00", 200),
    ] {
        let resp = send(api.put(&at).header("stream-expires-at", value)).await;
        assert_eq!(resp.status().as_u16(), status, "{value}");
    }
    let closed = stream_path("create-200-closed");
    for status in [201, 200] {
        let resp = send(
            api.put(&closed)
                .header("content-type", "text/plain")
                .header("stream-closed", "true"),
        )
        .await;
        assert_eq!(resp.status().as_u16(), status);
        assert_eq!(header(&resp, "stream-closed").as_deref(), Some("true"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_with_a_different_config_answers_409() {
    let api = Api::start().await;
    let open = stream_path("create-409-open");
    api.create_with(&open, "text/plain", "abc").await;
    let with_ttl = stream_path("create-409-ttl");
    assert_eq!(
        send(
            api.put(&with_ttl)
                .header("content-type", "text/plain")
                .header("stream-ttl", "60")
        )
        .await
        .status(),
        201
    );
    let closed = stream_path("create-409-closed");
    assert_eq!(
        send(
            api.put(&closed)
                .header("content-type", "text/plain")
                .header("stream-closed", "true")
        )
        .await
        .status(),
        201
    );

    let cases: &[(&str, &[(&str, &str)])] = &[
        (&open, &[("content-type", "application/json")]),
        (&open, &[("content-type", "text/html")]),
        (&open, &[]), // application/octet-stream
        (
            &open,
            &[("content-type", "text/plain"), ("stream-ttl", "60")],
        ),
        (
            &open,
            &[
                ("content-type", "text/plain"),
                ("stream-expires-at", "2099-01-01T00:00:00Z"),
            ],
        ),
        (
            &open,
            &[("content-type", "text/plain"), ("stream-closed", "true")],
        ),
        (
            &with_ttl,
            &[("content-type", "text/plain"), ("stream-ttl", "61")],
        ),
        (&with_ttl, &[("content-type", "text/plain")]),
        (&closed, &[("content-type", "text/plain")]),
    ];
    for (path, headers) in cases {
        let mut req = api.put(path);
        for (k, v) in *headers {
            req = req.header(*k, *v);
        }
        expect_error(send(req).await, 409, "STREAM_EXISTS").await;
    }
    // Nothing changed.
    let head = send(api.head(&open)).await;
    assert_eq!(header(&head, "content-type").as_deref(), Some("text/plain"));
    assert_eq!(header(&head, "stream-closed"), None);
    assert_eq!(header(&head, "stream-ttl"), None);
    assert_eq!(api.read_all(&open).await, b"abc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_without_a_content_type_is_octet_stream() {
    let api = Api::start().await;
    for content_type in [None, Some("")] {
        let path = stream_path("create-default-type");
        let mut req = api.put(&path);
        if let Some(ct) = content_type {
            req = req.header("content-type", ct);
        }
        let resp = send(req).await;
        assert_eq!(resp.status().as_u16(), 201);
        assert_eq!(
            header(&resp, "content-type").as_deref(),
            Some("application/octet-stream")
        );
        let head = send(api.head(&path)).await;
        assert_eq!(
            header(&head, "content-type").as_deref(),
            Some("application/octet-stream")
        );
        // Appends must send the default type.
        api.append(&path, "application/octet-stream", vec![0u8, 1, 2])
            .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_refuses_a_malformed_expiry_or_content_type() {
    let api = Api::start().await;
    let mut cases: Vec<Vec<(&str, &str)>> = [
        "00060", "+60", "60.5", "1e3", "abc", "-1", "", "3600s", "0x10",
    ]
    .into_iter()
    .map(|ttl| vec![("stream-ttl", ttl)])
    .collect();
    cases.extend(
        [
            "not-a-timestamp",
            "2099-01-01",
            "2099-01-01 00:00:00",
            "1969-12-31T23:59:59Z",
            "",
        ]
        .into_iter()
        .map(|at| vec![("stream-expires-at", at)]),
    );
    cases.push(vec![
        ("stream-ttl", "60"),
        ("stream-expires-at", "2099-01-01T00:00:00Z"),
    ]);
    cases.push(vec![("content-type", "textplain")]);
    cases.push(vec![("content-type", "/plain")]);
    for headers in cases {
        let path = stream_path("create-400");
        let mut req = api.put(&path);
        for (k, v) in &headers {
            req = req.header(*k, *v);
        }
        expect_error(send(req).await, 400, "BAD_REQUEST").await;
        expect_head_error(&send(api.head(&path)).await, 404);
    }
    // Zero is a valid TTL.
    let zero = stream_path("create-ttl-0");
    assert_eq!(
        send(api.put(&zero).header("stream-ttl", "0"))
            .await
            .status(),
        201
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_refuses_reserved_paths() {
    // Paths of several accounts, all open here (access is not the point).
    let api = Api::start_with(origin::http::HttpConfig {
        auth: origin::auth::AuthConfig {
            open_accounts: ["default", "acct", "a", "a_"].map(str::to_owned).into(),
            ..origin::auth::AuthConfig::default()
        },
        ..origin::http::HttpConfig::default()
    })
    .await;
    for path in [
        "/acct/incarnation",
        "/acct/incarnation/s",
        "/acct/s/incarnation/tok/chunk/0000000000000000",
        "/acct/s/snapshots",
        "/acct/snapshot-1/s",
        "/_x/s",
        "/a//b",
    ] {
        let resp = send(api.put(path).header("content-type", "text/plain")).await;
        expect_error(resp, 400, "BAD_REQUEST").await;
    }
    // `{stream}/snapshot` is a resource of its own, which PUT does not create.
    let resp = send(
        api.put("/acct/s/snapshot")
            .header("content-type", "text/plain"),
    )
    .await;
    let headers = expect_error(resp, 405, "METHOD_NOT_ALLOWED").await;
    assert_eq!(headers["allow"], "GET, HEAD, OPTIONS");
    // Paths that only look alike are streams.
    for path in [
        "/acct/incarnations/s",
        "/acct/snap",
        "/acct/_s",
        "/a_/s",
        "/acct/s.snapshot",
    ] {
        api.create(path, "text/plain").await;
        api.append(path, "text/plain", "x").await;
        assert_eq!(api.read_all(path).await, b"x", "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_closed_keeps_its_body_as_the_final_content() {
    let api = Api::start().await;
    let path = stream_path("create-closed");
    let resp = send(
        api.put(&path)
            .header("content-type", "text/plain")
            .header("stream-closed", "true")
            .body("final"),
    )
    .await;
    assert_eq!(resp.status().as_u16(), 201);
    assert_eq!(header(&resp, "stream-closed").as_deref(), Some("true"));
    assert_eq!(header(&resp, "stream-next-offset"), Some(offset(5)));
    let read = send(api.get(&format!("{path}?offset=-1"))).await;
    assert_eq!(header(&read, "stream-closed").as_deref(), Some("true"));
    assert_eq!(read.bytes().await.unwrap(), "final");
    let refused = expect_error(
        send(
            api.post(&path)
                .header("content-type", "text/plain")
                .body("more"),
        )
        .await,
        409,
        "STREAM_CLOSED",
    )
    .await;
    assert_eq!(refused.get("stream-closed").unwrap(), "true");
    assert_eq!(
        refused.get("stream-next-offset").unwrap().to_str().unwrap(),
        offset(5)
    );

    // `true` in any case closes; any other value is as if absent.
    for (value, closes) in [
        ("TRUE", true),
        ("True", true),
        ("false", false),
        ("yes", false),
        ("1", false),
        ("", false),
    ] {
        let path = stream_path("create-closed-value");
        let resp = send(api.put(&path).header("stream-closed", value)).await;
        assert_eq!(resp.status().as_u16(), 201, "{value:?}");
        assert_eq!(
            header(&resp, "stream-closed").is_some(),
            closes,
            "{value:?}"
        );
        let head = send(api.head(&path)).await;
        assert_eq!(
            header(&head, "stream-closed").is_some(),
            closes,
            "{value:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_json_stores_the_initial_body_as_messages() {
    let api = Api::start().await;
    let empty = stream_path("create-json-empty");
    let resp = api.create_with(&empty, "application/json", " [ ] ").await;
    assert_eq!(header(&resp, "stream-next-offset"), Some(offset(0)));
    assert_eq!(
        header(&resp, "content-type").as_deref(),
        Some("application/json")
    );
    let read = send(api.get(&format!("{empty}?offset=-1"))).await;
    assert_eq!(
        header(&read, "content-type").as_deref(),
        Some("application/x-ndjson")
    );
    assert_eq!(header(&read, "stream-up-to-date").as_deref(), Some("true"));
    assert!(read.bytes().await.unwrap().is_empty());

    let path = stream_path("create-json-body");
    let stored = "{\"a\":1}\n[2,3]\n\"x y\"\n";
    let resp = api
        .create_with(&path, "application/json", "[{\"a\": 1}, [2, 3], \"x y\"]")
        .await;
    assert_eq!(
        header(&resp, "stream-next-offset"),
        Some(offset(stored.len() as u64))
    );
    assert_eq!(api.read_all(&path).await, stored.as_bytes());

    let single = stream_path("create-json-single");
    api.create_with(
        &single,
        "application/json; charset=utf-8",
        "{\n  \"k\": true\n}",
    )
    .await;
    assert_eq!(api.read_all(&single).await, b"{\"k\":true}\n");

    for body in ["{", "[1,", "1 2", "nope"] {
        let path = stream_path("create-json-invalid");
        let resp = send(
            api.put(&path)
                .header("content-type", "application/json")
                .body(body),
        )
        .await;
        expect_error(resp, 400, "INVALID_JSON").await;
        expect_head_error(&send(api.head(&path)).await, 404);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_keeps_a_binary_initial_body_byte_exact() {
    let api = Api::start().await;
    let path = stream_path("create-binary");
    let body: Vec<u8> = (0..=255u8).chain((0..=255u8).rev()).collect();
    let resp = api
        .create_with(&path, "application/octet-stream", body.clone())
        .await;
    assert_eq!(header(&resp, "stream-next-offset"), Some(offset(512)));
    assert_eq!(api.read_all(&path).await, body);
}
