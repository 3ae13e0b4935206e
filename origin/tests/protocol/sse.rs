//! `GET {stream}?offset=…&live=sse`: a tail as Server-Sent Events.

use std::time::{Duration, Instant};

use origin::http::HttpConfig;

use crate::common::*;

/// Asserts a control event's fields: where the reader stands, whether it is
/// caught up, whether the stream is closed; a cursor exactly while open.
fn assert_control(e: &SseEvent, next: u64, up_to_date: bool, closed: bool) -> serde_json::Value {
    assert_eq!(e.event, "control");
    let c = e.json();
    let fields = c.as_object().expect("a JSON object");
    assert_eq!(c["streamNextOffset"], offset(next), "{c}");
    assert_eq!(
        fields.get("upToDate").cloned(),
        up_to_date.then_some(serde_json::Value::Bool(true)),
        "{c}"
    );
    assert_eq!(
        fields.get("streamClosed").cloned(),
        closed.then_some(serde_json::Value::Bool(true)),
        "{c}"
    );
    match fields.get("streamCursor") {
        Some(cursor) => {
            assert!(!closed, "no cursor once closed: {c}");
            let s = cursor.as_str().expect("a string cursor");
            assert!(
                !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit()),
                "{c}"
            );
        }
        None => assert!(closed, "a cursor while open: {c}"),
    }
    for key in fields.keys() {
        assert!(
            [
                "streamNextOffset",
                "streamCursor",
                "upToDate",
                "streamClosed"
            ]
            .contains(&key.as_str()),
            "unknown field {key} in {c}"
        );
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_headers_follow_the_stream_type() {
    let api = Api::start().await;
    // (content type, Stream-Data-Content-Type, base64)
    let cases = [
        ("text/plain", "text/plain", false),
        ("text/csv; charset=utf-8", "text/csv; charset=utf-8", false),
        ("application/json", "application/x-ndjson", false),
        (
            "application/json; charset=utf-8",
            "application/x-ndjson",
            false,
        ),
        ("application/octet-stream", "application/octet-stream", true),
        ("application/x-protobuf", "application/x-protobuf", true),
        ("image/png", "image/png", true),
    ];
    for (content_type, data_type, base64) in cases {
        let path = stream_path("sse-headers");
        api.create(&path, content_type).await;
        let sse = api.sse(&path, "offset=-1").await;
        let r = &sse.resp;
        assert_eq!(
            header(r, "content-type").as_deref(),
            Some("text/event-stream"),
            "{content_type}"
        );
        assert_eq!(header(r, "cache-control").as_deref(), Some("no-cache"));
        assert_eq!(
            header(r, "stream-data-content-type").as_deref(),
            Some(data_type),
            "{content_type}"
        );
        assert_eq!(
            header(r, "stream-sse-data-encoding").as_deref(),
            base64.then_some("base64"),
            "{content_type}"
        );
        assert_eq!(
            header(r, "x-content-type-options").as_deref(),
            Some("nosniff")
        );
        assert_eq!(header(r, "content-length"), None);
        assert!(header(r, "stream-incarnation").is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_data_event_is_followed_by_a_control_event() {
    let api = Api::start().await;
    let path = stream_path("sse-pairs");
    api.create_with(&path, "text/plain", "hello").await;
    let mut sse = api.sse(&path, "offset=-1").await;
    assert_eq!(sse.expect("data").await.data, "hello");
    let first = assert_control(&sse.expect("control").await, 5, true, false);

    // What is appended next arrives live, as another pair.
    api.append(&path, "text/plain", "two\nlines").await;
    assert_eq!(sse.expect("data").await.data, "two\nlines");
    let second = assert_control(&sse.expect("control").await, 14, true, false);
    assert!(second["streamNextOffset"].as_str() > first["streamNextOffset"].as_str());
    api.append(&path, "text/plain", "!").await;
    assert_eq!(sse.expect("data").await.data, "!");
    assert_control(&sse.expect("control").await, 15, true, false);

    // An empty stream, or `now`, starts with one control event.
    let empty = stream_path("sse-empty");
    api.create(&empty, "application/octet-stream").await;
    for (p, query, at) in [
        (&empty, "offset=-1", 0),
        (&path, "offset=now", 15),
        (&path, "offset=000000000000000f", 15),
    ] {
        let mut sse = api.sse(p, query).await;
        assert_control(&sse.expect("control").await, at, true, false);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_streams_send_base64_and_text_streams_do_not() {
    let api = Api::start().await;
    let path = stream_path("sse-base64");
    let bytes: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    api.create_with(&path, "application/octet-stream", bytes.clone())
        .await;
    let mut sse = api.sse(&path, "offset=-1").await;
    let data = sse.expect("data").await;
    assert!(
        data.data.lines().all(|l| l.len() <= 1024),
        "short lines for proxies"
    );
    assert_eq!(data.base64(), bytes);
    assert_control(&sse.expect("control").await, 5000, true, false);
    api.append(&path, "application/octet-stream", vec![0u8, 10, 13, 255])
        .await;
    assert_eq!(sse.expect("data").await.base64(), vec![0u8, 10, 13, 255]);
    assert_control(&sse.expect("control").await, 5004, true, false);

    // Text goes as text, CR and CRLF read back as LF.
    let text = stream_path("sse-text");
    api.create_with(&text, "text/plain", "a\r\nb\rc\n").await;
    let mut sse = api.sse(&text, "offset=-1").await;
    assert_eq!(sse.expect("data").await.data, "a\nb\nc\n");
    assert_control(&sse.expect("control").await, 7, true, false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_data_keeps_leading_spaces() {
    let api = Api::start().await;
    let path = stream_path("sse-spaces");
    let text = " one\n  two\n\tthree\n ";
    api.create_with(&path, "text/plain", text).await;
    let mut sse = api.sse(&path, "offset=-1").await;
    assert_eq!(
        sse.expect("data").await.data,
        text,
        "an SSE parser drops one space after `data:`"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_streams_send_ndjson_lines() {
    let api = Api::start().await;
    let path = stream_path("sse-ndjson");
    api.create_with(
        &path,
        "application/json",
        "[{\"a\": 1}, {\"s\": \"x\\ny\"}]",
    )
    .await;
    let mut sse = api.sse(&path, "offset=-1").await;
    assert_eq!(
        sse.expect("data").await.data,
        "{\"a\":1}\n{\"s\":\"x\\ny\"}\n"
    );
    assert_control(&sse.expect("control").await, 21, true, false);

    // With max_bytes, each event still holds whole messages.
    let mut sse = api.sse(&path, "offset=-1&max_bytes=1").await;
    assert_eq!(sse.expect("data").await.data, "{\"a\":1}\n");
    assert_control(&sse.expect("control").await, 8, false, false);
    assert_eq!(sse.expect("data").await.data, "{\"s\":\"x\\ny\"}\n");
    assert_control(&sse.expect("control").await, 21, true, false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_streams_send_arrays_in_array_mode() {
    let api = Api::start_array().await;
    let path = stream_path("sse-array");
    api.create_with(&path, "application/json", "[{\"a\": 1}, [2]]")
        .await;
    let mut sse = api.sse(&path, "offset=-1").await;
    assert_eq!(
        header(&sse.resp, "stream-data-content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(sse.expect("data").await.data, "[{\"a\":1},[2]]");
    assert_control(&sse.expect("control").await, 12, true, false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_bytes_bounds_each_event_without_splitting_a_character() {
    let api = Api::start().await;
    let path = stream_path("sse-utf8");
    // Characters of 2, 3, 4 and 1 bytes.
    let text = "é€😀aé€😀aéé€€😀😀";
    api.create_with(&path, "text/plain; charset=utf-8", text)
        .await;
    for max in [1, 4, 5, 7] {
        let mut sse = api.sse(&path, &format!("offset=-1&max_bytes={max}")).await;
        let mut got = String::new();
        loop {
            // A split character would not even parse: the event is not UTF-8.
            let data = sse.expect("data").await.data;
            assert!(!data.is_empty());
            assert!(
                data.len() <= max.max(4),
                "max_bytes={max}: {data:?} is {} bytes",
                data.len()
            );
            got.push_str(&data);
            let done = got.len() == text.len();
            assert_control(&sse.expect("control").await, got.len() as u64, done, false);
            if done {
                break;
            }
        }
        assert_eq!(got, text, "max_bytes={max}");
    }

    // Binary events are cut at any byte.
    let bin = stream_path("sse-max-bytes-binary");
    api.create_with(
        &bin,
        "application/octet-stream",
        (0..10u8).collect::<Vec<_>>(),
    )
    .await;
    let mut sse = api.sse(&bin, "offset=-1&max_bytes=3").await;
    let mut got = Vec::new();
    for chunk in [&[0u8, 1, 2][..], &[3, 4, 5], &[6, 7, 8], &[9]] {
        assert_eq!(sse.expect("data").await.base64(), chunk);
        got.extend_from_slice(chunk);
        assert_control(
            &sse.expect("control").await,
            got.len() as u64,
            got.len() == 10,
            false,
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stream_ends_the_connection_after_stream_closed() {
    let api = Api::start().await;
    let path = stream_path("sse-closed");
    let resp = send(
        api.put(&path)
            .header("content-type", "text/plain")
            .header("stream-closed", "true")
            .body("all"),
    )
    .await;
    assert_eq!(resp.status().as_u16(), 201);
    let mut sse = api.sse(&path, "offset=-1").await;
    assert_eq!(sse.expect("data").await.data, "all");
    assert_control(&sse.expect("control").await, 3, true, true);
    sse.expect_end().await;

    // At the end of a closed stream: one control event, then the end.
    for query in ["offset=0000000000000003", "offset=now"] {
        let mut sse = api.sse(&path, query).await;
        assert_control(&sse.expect("control").await, 3, true, true);
        sse.expect_end().await;
    }
    // A partial event does not say closed.
    let longer = stream_path("sse-closed-partial");
    let resp = send(
        api.put(&longer)
            .header("content-type", "text/plain")
            .header("stream-closed", "true")
            .body("abcdefgh"),
    )
    .await;
    assert_eq!(resp.status().as_u16(), 201);
    let mut sse = api.sse(&longer, "offset=-1&max_bytes=5").await;
    assert_eq!(sse.expect("data").await.data, "abcde");
    assert_control(&sse.expect("control").await, 5, false, false);
    assert_eq!(sse.expect("data").await.data, "fgh");
    assert_control(&sse.expect("control").await, 8, true, true);
    sse.expect_end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_reader_gets_the_final_append_then_the_end() {
    let api = Api::start().await;
    let path = stream_path("sse-close-live");
    api.create_with(&path, "text/plain", "a").await;
    let mut sse = api.sse(&path, "offset=-1").await;
    assert_eq!(sse.expect("data").await.data, "a");
    assert_control(&sse.expect("control").await, 1, true, false);
    let resp = send(
        api.post(&path)
            .header("content-type", "text/plain")
            .header("stream-closed", "true")
            .body("bye"),
    )
    .await;
    assert_eq!(resp.status().as_u16(), 204);
    assert_eq!(sse.expect("data").await.data, "bye");
    assert_control(&sse.expect("control").await, 4, true, true);
    sse.expect_end().await;

    // A close-only append at the reader's position: just the control event.
    let path = stream_path("sse-close-only-live");
    api.create_with(&path, "text/plain", "a").await;
    let mut sse = api.sse(&path, "offset=now").await;
    assert_control(&sse.expect("control").await, 1, true, false);
    api.close(&path).await;
    assert_control(&sse.expect("control").await, 1, true, true);
    sse.expect_end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reconnecting_from_stream_next_offset_repeats_nothing() {
    let api = Api::start().await;
    let path = stream_path("sse-reconnect");
    api.create_with(&path, "text/plain", "message 1|").await;
    api.append(&path, "text/plain", "message 2|").await;
    let mut sse = api.sse(&path, "offset=-1").await;
    assert_eq!(sse.expect("data").await.data, "message 1|message 2|");
    let control = sse.expect("control").await.json();
    let resume = control["streamNextOffset"].as_str().unwrap().to_owned();
    let cursor = control["streamCursor"].as_str().unwrap().to_owned();
    drop(sse);

    api.append(&path, "text/plain", "message 3|").await;
    let mut sse = api
        .sse(&path, &format!("offset={resume}&cursor={cursor}"))
        .await;
    assert_eq!(sse.expect("data").await.data, "message 3|");
    let c = assert_control(&sse.expect("control").await, 30, true, false);
    // The cursor sent back moves forward.
    let next: u64 = c["streamCursor"].as_str().unwrap().parse().unwrap();
    assert!(
        next > cursor.parse::<u64>().unwrap(),
        "{next} after {cursor}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_ends_by_itself_after_sse_session() {
    let api = Api::start_with(HttpConfig {
        sse_session: Duration::from_millis(500),
        ..HttpConfig::default()
    })
    .await;
    let path = stream_path("sse-session");
    api.create_with(&path, "text/plain", "x").await;
    let began = Instant::now();
    let mut sse = api.sse(&path, "offset=-1").await;
    assert_eq!(sse.expect("data").await.data, "x");
    assert_control(&sse.expect("control").await, 1, true, false);
    sse.expect_end().await;
    let took = began.elapsed();
    assert!(
        took >= Duration::from_millis(450),
        "the session lasted {took:?}"
    );
    assert!(took < WAIT);
    api.wait_for_metric("ds_origin_sse_open", 0).await;
    // The reader reconnects from where it stood.
    api.append(&path, "text/plain", "y").await;
    let mut sse = api.sse(&path, "offset=0000000000000001").await;
    assert_eq!(sse.expect("data").await.data, "y");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_stream_ends_a_tail_with_an_error_event() {
    let api = Api::start().await;
    let path = stream_path("sse-deleted");
    api.create(&path, "text/plain").await;
    let mut sse = api.sse(&path, "offset=-1").await;
    assert_control(&sse.expect("control").await, 0, true, false);
    assert_eq!(send(api.delete(&path)).await.status(), 204);
    let error = sse.expect("error").await.json();
    assert_eq!(error["error"]["code"], "STREAM_NOT_FOUND", "{error}");
    assert!(error["error"]["message"]
        .as_str()
        .is_some_and(|m| !m.is_empty()));
    sse.expect_end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_tail_sends_a_keepalive_each_period_and_then_the_next_append() {
    let every = Duration::from_millis(200);
    let api = Api::start_with(HttpConfig {
        sse_keepalive: every,
        ..HttpConfig::default()
    })
    .await;
    let path = stream_path("sse-keepalive");
    api.create_with(&path, "text/plain", "x").await;
    // Before the request: the tail's last write comes after this, and a
    // keepalive is never early, so three take at least three periods.
    let began = Instant::now();
    let mut sse = api.sse(&path, "offset=-1").await;
    assert_eq!(sse.expect("data").await.data, "x");
    assert_control(&sse.expect("control").await, 1, true, false);
    // Silent, the tail sends a comment every period and nothing else.
    for _ in 0..3 {
        assert_eq!(sse.expect_comment().await, ": keepalive");
    }
    let took = began.elapsed();
    assert!(took >= 3 * every, "{took:?}");
    // The keepalives change no event: the next append arrives as it would.
    api.append(&path, "text/plain", "y").await;
    assert_eq!(sse.expect("data").await.data, "y");
    assert_control(&sse.expect("control").await, 2, true, false);
}
