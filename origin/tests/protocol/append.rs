//! `POST {stream}` without producer headers: plain appends, content types,
//! JSON mode, `Stream-Seq`, close, and the body limit.

use crate::common::*;

const MIB: usize = 1024 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_append_answers_204_with_the_new_end() {
    let api = Api::start().await;
    let path = stream_path("append-204");
    let created = api.create_with(&path, "text/plain", "ab").await;
    let incarnation = header(&created, "stream-incarnation").unwrap();
    let mut at = 2u64;
    // The media type compares without case or parameters.
    for (content_type, body) in [
        ("text/plain", "cde"),
        ("TEXT/PLAIN", "f"),
        ("text/plain; charset=utf-8", "gh"),
    ] {
        let resp = api.append(&path, content_type, body).await;
        assert_eq!(resp.status().as_u16(), 204, "{content_type}");
        at += body.len() as u64;
        assert_eq!(header(&resp, "stream-next-offset"), Some(offset(at)));
        // The start is a producer's receipt (see `producers.rs`).
        assert_eq!(header(&resp, "stream-offset"), None);
        assert_eq!(
            header(&resp, "stream-incarnation").as_ref(),
            Some(&incarnation)
        );
        assert_eq!(header(&resp, "stream-closed"), None);
        for absent in ["producer-epoch", "producer-seq", "producer-outcome"] {
            assert_eq!(header(&resp, absent), None, "{absent}");
        }
        assert_eq!(
            header(&resp, "x-content-type-options").as_deref(),
            Some("nosniff")
        );
        assert!(resp.bytes().await.unwrap().is_empty());
    }
    assert_eq!(api.read_all(&path).await, b"abcdefgh");
    assert_eq!(api.end(&path).await, offset(8));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_different_content_type_is_409_and_appends_nothing() {
    let api = Api::start().await;
    let path = stream_path("append-409-type");
    api.create_with(&path, "text/plain", "abc").await;
    for content_type in [
        "text/html",
        "application/json",
        "application/octet-stream",
        "text/plainx",
        "text/*",
    ] {
        let resp = send(
            api.post(&path)
                .header("content-type", content_type)
                .body("zzz"),
        )
        .await;
        expect_error(resp, 409, "CONTENT_TYPE_MISMATCH").await;
        // Even when the append would close the stream.
        let resp = send(
            api.post(&path)
                .header("content-type", content_type)
                .header("stream-closed", "true")
                .body("zzz"),
        )
        .await;
        expect_error(resp, 409, "CONTENT_TYPE_MISMATCH").await;
    }
    let head = send(api.head(&path)).await;
    assert_eq!(header(&head, "stream-next-offset"), Some(offset(3)));
    assert_eq!(header(&head, "stream-closed"), None);
    assert_eq!(api.read_all(&path).await, b"abc");

    // A JSON stream refuses other types before it looks at the body.
    let json = stream_path("append-409-json");
    api.create(&json, "application/json").await;
    let resp = send(
        api.post(&json)
            .header("content-type", "text/plain")
            .body("not json"),
    )
    .await;
    expect_error(resp, 409, "CONTENT_TYPE_MISMATCH").await;
    assert_eq!(api.end(&json).await, offset(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_without_a_content_type_is_400() {
    let api = Api::start().await;
    let path = stream_path("append-400-no-type");
    api.create(&path, "text/plain").await;
    expect_error(send(api.post(&path).body("abc")).await, 400, "BAD_REQUEST").await;
    expect_error(
        send(api.post(&path).header("content-type", "").body("abc")).await,
        400,
        "BAD_REQUEST",
    )
    .await;
    assert_eq!(api.end(&path).await, offset(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_body_is_400_unless_it_closes() {
    let api = Api::start().await;
    let path = stream_path("append-400-empty");
    api.create(&path, "text/plain").await;
    expect_error(
        send(api.post(&path).header("content-type", "text/plain")).await,
        400,
        "EMPTY_BODY",
    )
    .await;
    expect_error(send(api.post(&path)).await, 400, "EMPTY_BODY").await;
    // `Stream-Closed` with another value does not close, so the body is still needed.
    let resp = send(
        api.post(&path)
            .header("content-type", "text/plain")
            .header("stream-closed", "false"),
    )
    .await;
    expect_error(resp, 400, "EMPTY_BODY").await;
    let head = send(api.head(&path)).await;
    assert_eq!(header(&head, "stream-next-offset"), Some(offset(0)));
    assert_eq!(header(&head, "stream-closed"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_appends_store_one_compact_message_per_line() {
    let api = Api::start().await;
    let path = stream_path("append-json");
    api.create(&path, "application/json").await;
    let cases = [
        ("{\"a\": 1}", "{\"a\":1}\n"),
        (
            "[{\"event\": \"a\"}, {\"event\": \"b\"}]",
            "{\"event\":\"a\"}\n{\"event\":\"b\"}\n",
        ),
        ("[[1, 2], [3, 4]]", "[1,2]\n[3,4]\n"),
        ("[[[1,2,3]]]", "[[1,2,3]]\n"),
        (" 42 ", "42\n"),
        ("\"a  b\"", "\"a  b\"\n"),
        (
            "{\"b\":1, \"a\":1.50, \"c\":1e2}",
            "{\"b\":1,\"a\":1.50,\"c\":1e2}\n",
        ),
        (
            "{\n\t\"nested\": {\r\n  \"list\": [ true, false, null ]\n }\n}\n",
            "{\"nested\":{\"list\":[true,false,null]}}\n",
        ),
        (
            "{\"s\": \"line\\nbreak \\\" quote\"}",
            "{\"s\":\"line\\nbreak \\\" quote\"}\n",
        ),
        ("[\"only\"]", "\"only\"\n"),
    ];
    let mut expected = String::new();
    for (body, stored) in cases {
        let resp = api.append(&path, "application/json", body).await;
        expected.push_str(stored);
        assert_eq!(
            header(&resp, "stream-next-offset"),
            Some(offset(expected.len() as u64)),
            "{body}"
        );
    }
    let read = send(api.get(&format!("{path}?offset=-1"))).await;
    assert_eq!(read.status().as_u16(), 200);
    assert_eq!(
        header(&read, "content-type").as_deref(),
        Some("application/x-ndjson")
    );
    assert_eq!(
        String::from_utf8(read.bytes().await.unwrap().to_vec()).unwrap(),
        expected
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_appends_refuse_invalid_json_and_empty_arrays() {
    let api = Api::start().await;
    let path = stream_path("append-json-400");
    api.create_with(&path, "application/json", "{\"first\":1}")
        .await;
    for body in [
        "{",
        "[1,",
        "1 2",
        "{\"a\":1}x",
        "undefined",
        "'a'",
        "{a:1}",
        "\"unterminated",
    ] {
        let resp = send(
            api.post(&path)
                .header("content-type", "application/json")
                .body(body),
        )
        .await;
        expect_error(resp, 400, "INVALID_JSON").await;
    }
    for body in ["[]", " [ ] ", "[\n]"] {
        let resp = send(
            api.post(&path)
                .header("content-type", "application/json")
                .body(body),
        )
        .await;
        expect_error(resp, 400, "INVALID_JSON").await;
    }
    let invalid_utf8 = vec![b'"', 0xff, 0xfe, b'"'];
    let resp = send(
        api.post(&path)
            .header("content-type", "application/json")
            .body(invalid_utf8),
    )
    .await;
    expect_error(resp, 400, "INVALID_JSON").await;
    assert_eq!(api.read_all(&path).await, b"{\"first\":1}\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_seq_must_grow_bytewise() {
    let api = Api::start().await;
    let path = stream_path("append-seq");
    api.create(&path, "text/plain").await;
    let with_seq = |seq: &str, body: &str| {
        api.post(&path)
            .header("content-type", "text/plain")
            .header("stream-seq", seq)
            .body(body.to_owned())
    };
    assert_eq!(send(with_seq("2", "a")).await.status(), 204);
    // "10" sorts before "2"; a repeat is not greater either.
    for seq in ["10", "2", "1", "02"] {
        let refused =
            expect_error(send(with_seq(seq, "x")).await, 409, "STREAM_SEQ_CONFLICT").await;
        assert_eq!(
            refused.get("stream-next-offset").unwrap().to_str().unwrap(),
            offset(1),
            "{seq}"
        );
    }
    assert_eq!(send(with_seq("3", "b")).await.status(), 204);
    assert_eq!(send(with_seq("3a", "c")).await.status(), 204);
    // Appends without Stream-Seq are not ordered by it.
    api.append(&path, "text/plain", "d").await;
    expect_error(send(with_seq("3", "x")).await, 409, "STREAM_SEQ_CONFLICT").await;
    assert_eq!(api.read_all(&path).await, b"abcd");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_with_a_body_then_every_append_is_409() {
    let api = Api::start().await;
    let path = stream_path("append-close-body");
    api.create_with(&path, "text/plain", "a").await;
    let resp = send(
        api.post(&path)
            .header("content-type", "text/plain")
            .header("stream-closed", "true")
            .body("z"),
    )
    .await;
    assert_eq!(resp.status().as_u16(), 204);
    assert_eq!(header(&resp, "stream-closed").as_deref(), Some("true"));
    assert_eq!(header(&resp, "stream-next-offset"), Some(offset(2)));

    let refusals = [
        api.post(&path)
            .header("content-type", "text/plain")
            .body("x"),
        api.post(&path)
            .header("content-type", "text/plain")
            .header("stream-closed", "true")
            .body("x"),
        // Closed is answered before the content type.
        api.post(&path)
            .header("content-type", "text/html")
            .body("x"),
        api.post(&path)
            .header("content-type", "text/plain")
            .header("stream-seq", "9")
            .body("x"),
    ];
    for req in refusals {
        let refused = expect_error(send(req).await, 409, "STREAM_CLOSED").await;
        assert_eq!(refused.get("stream-closed").unwrap(), "true");
        assert_eq!(
            refused.get("stream-next-offset").unwrap().to_str().unwrap(),
            offset(2)
        );
    }
    let read = send(api.get(&format!("{path}?offset=-1"))).await;
    assert_eq!(header(&read, "stream-closed").as_deref(), Some("true"));
    assert_eq!(read.bytes().await.unwrap(), "az");

    // Close-only again is idempotent.
    for _ in 0..2 {
        let resp = api.close(&path).await;
        assert_eq!(header(&resp, "stream-closed").as_deref(), Some("true"));
        assert_eq!(header(&resp, "stream-next-offset"), Some(offset(2)));
        assert_eq!(header(&resp, "stream-offset"), None, "nothing was appended");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_only_needs_no_body_and_ignores_the_content_type() {
    let api = Api::start().await;
    let path = stream_path("append-close-only");
    api.create_with(&path, "application/json", "[1,2]").await;
    let resp = send(
        api.post(&path)
            .header("content-type", "text/html")
            .header("stream-closed", "true"),
    )
    .await;
    assert_eq!(resp.status().as_u16(), 204);
    assert_eq!(header(&resp, "stream-closed").as_deref(), Some("true"));
    assert_eq!(header(&resp, "stream-next-offset"), Some(offset(4)));
    let resp = api.close(&path).await;
    assert_eq!(header(&resp, "stream-next-offset"), Some(offset(4)));
    let head = send(api.head(&path)).await;
    assert_eq!(header(&head, "stream-closed").as_deref(), Some("true"));
    assert_eq!(api.read_all(&path).await, b"1\n2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_8_mib_is_413_and_appends_nothing() {
    let api = Api::start().await;
    let path = stream_path("append-413");
    api.create(&path, "application/octet-stream").await;
    // Exactly the limit is accepted.
    let resp = api
        .append(&path, "application/octet-stream", vec![7u8; 8 * MIB])
        .await;
    assert_eq!(
        header(&resp, "stream-next-offset"),
        Some(offset(8 * MIB as u64))
    );

    // One byte over, with a Content-Length...
    let resp = send(
        api.post(&path)
            .header("content-type", "application/octet-stream")
            .body(vec![1u8; 8 * MIB + 1]),
    )
    .await;
    expect_error(resp, 413, "PAYLOAD_TOO_LARGE").await;
    // ... and chunked, without one.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> = (0..8)
        .map(|_| Ok(vec![2u8; MIB]))
        .chain([Ok(vec![2u8])])
        .collect();
    let body = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let resp = send(
        api.post(&path)
            .header("content-type", "application/octet-stream")
            .body(body),
    )
    .await;
    expect_error(resp, 413, "PAYLOAD_TOO_LARGE").await;
    // A JSON body is limited before it is parsed.
    let json = stream_path("append-413-json");
    api.create(&json, "application/json").await;
    let big = format!("\"{}\"", "x".repeat(8 * MIB));
    let resp = send(
        api.post(&json)
            .header("content-type", "application/json")
            .body(big),
    )
    .await;
    expect_error(resp, 413, "PAYLOAD_TOO_LARGE").await;

    assert_eq!(api.end(&path).await, offset(8 * MIB as u64));
    assert_eq!(api.end(&json).await, offset(0));
    let head = send(api.head(&path)).await;
    assert_eq!(
        header(&head, "ursula-max-request-bytes").as_deref(),
        Some("8388608")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_to_a_missing_stream_are_404() {
    let api = Api::start().await;
    let path = stream_path("append-404");
    let requests = [
        api.post(&path)
            .header("content-type", "text/plain")
            .body("x"),
        api.post(&path).header("stream-closed", "true"),
        api.post(&path)
            .header("content-type", "text/plain")
            .header("producer-id", "p")
            .header("producer-epoch", "0")
            .header("producer-seq", "0")
            .body("x"),
    ];
    for req in requests {
        expect_error(send(req).await, 404, "STREAM_NOT_FOUND").await;
    }
    // No implicit create.
    expect_head_error(&send(api.head(&path)).await, 404);
}
