//! `GET {stream}?offset=…&live=long-poll`: waiting at the end, `timeout_ms`,
//! cursors, and closed streams.

use std::time::{Duration, Instant};

use crate::common::*;

/// The long-polls waiting on an origin, from `/metrics`.
const WAITING: &str = "ds_origin_long_polls_waiting";

fn cursor_of(resp: &reqwest::Response) -> u64 {
    let c = header(resp, "stream-cursor").expect("Stream-Cursor");
    assert!(
        !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()),
        "a cursor of digits: {c:?}"
    );
    c.parse().expect("cursor")
}

fn assert_timed_out(resp: &reqwest::Response, next: &str) {
    assert_eq!(resp.status().as_u16(), 204);
    assert_eq!(header(resp, "stream-next-offset").as_deref(), Some(next));
    assert_eq!(header(resp, "stream-up-to-date").as_deref(), Some("true"));
    assert_eq!(header(resp, "stream-closed"), None);
    assert_eq!(header(resp, "cache-control").as_deref(), Some("no-store"));
    assert_eq!(
        header(resp, "x-content-type-options").as_deref(),
        Some("nosniff")
    );
    assert_eq!(header(resp, "etag"), None);
    cursor_of(resp);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeout_ms_bounds_the_wait() {
    let api = Api::start().await;
    let path = stream_path("long-poll-timeout");
    api.create_with(&path, "text/plain", "abc").await;
    for start in [offset(3), "now".to_owned()] {
        let began = Instant::now();
        let resp = send(api.get(&format!(
            "{path}?offset={start}&live=long-poll&timeout_ms=200"
        )))
        .await;
        let took = began.elapsed();
        assert_timed_out(&resp, &offset(3));
        assert!(resp.bytes().await.unwrap().is_empty());
        assert!(
            took >= Duration::from_millis(190),
            "waited {took:?} of 200 ms"
        );
        assert!(
            took < Duration::from_millis(900),
            "answered in {took:?}, well before the 1000 ms default"
        );
    }
    // Out-of-range values are clamped, so a 0 waits about a millisecond.
    let began = Instant::now();
    let resp = send(api.get(&format!("{path}?offset=now&live=long-poll&timeout_ms=0"))).await;
    assert_timed_out(&resp, &offset(3));
    assert!(began.elapsed() < Duration::from_millis(900));
    // A value that is not a number is the 1000 ms default.
    for value in ["abc", "1.5", ""] {
        let began = Instant::now();
        let resp = send(api.get(&format!(
            "{path}?offset=now&live=long-poll&timeout_ms={value}"
        )))
        .await;
        let took = began.elapsed();
        assert_timed_out(&resp, &offset(3));
        assert!(
            took >= Duration::from_millis(990) && took < Duration::from_secs(5),
            "{value:?}: waited {took:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_that_caught_up_moves_strictly_forward() {
    let api = Api::start().await;
    let path = stream_path("long-poll-cursor");
    api.create(&path, "text/plain").await;
    let poll = |cursor: Option<u64>| {
        let c = cursor.map(|c| format!("&cursor={c}")).unwrap_or_default();
        send(api.get(&format!("{path}?offset=now&live=long-poll&timeout_ms=1{c}")))
    };
    let first = cursor_of(&poll(None).await);
    let mut last = first;
    for _ in 0..5 {
        let next = cursor_of(&poll(Some(last)).await);
        assert!(next > last, "{next} after {last}");
        assert!(
            next <= last + 180,
            "jitter is at most 3600 s of 20 s intervals: {next} after {last}"
        );
        last = next;
    }
    let ahead = first + 10_000;
    assert!(cursor_of(&poll(Some(ahead)).await) > ahead);
    // A cursor behind the clock gets the current interval.
    let behind = cursor_of(&poll(Some(1)).await);
    assert!(
        behind >= first && behind <= first + 1,
        "{behind} vs {first}"
    );
    // Garbage is as if absent.
    let resp = send(api.get(&format!(
        "{path}?offset=now&live=long-poll&timeout_ms=1&cursor=abc"
    )))
    .await;
    assert!(cursor_of(&resp) >= first);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_wakes_a_waiting_long_poll() {
    let api = Api::start().await;
    let path = stream_path("long-poll-wake");
    api.create_with(&path, "text/plain", "abc").await;
    for (start, body) in [(offset(3), "def"), ("now".to_owned(), "ghi")] {
        let url = api.url(&format!(
            "{path}?offset={start}&live=long-poll&timeout_ms=60000"
        ));
        let waiting = tokio::spawn(api.http.get(url).send());
        api.wait_for_metric(WAITING, 1).await;
        let began = Instant::now();
        let appended = api.append(&path, "text/plain", body).await;
        let resp = tokio::time::timeout(WAIT, waiting)
            .await
            .expect("woken")
            .unwrap()
            .unwrap();
        assert!(began.elapsed() < Duration::from_secs(5));
        assert_eq!(resp.status().as_u16(), 200);
        assert_eq!(
            header(&resp, "stream-next-offset"),
            header(&appended, "stream-next-offset")
        );
        assert_eq!(header(&resp, "stream-up-to-date").as_deref(), Some("true"));
        assert_eq!(header(&resp, "content-type").as_deref(), Some("text/plain"));
        // From an offset the range is fixed and caches may keep it; from
        // `now` the same URL means later bytes next time.
        let cache = if start == "now" {
            "no-store"
        } else {
            "public, max-age=60, stale-while-revalidate=300"
        };
        assert_eq!(header(&resp, "cache-control").as_deref(), Some(cache));
        assert!(header(&resp, "etag").is_some());
        cursor_of(&resp);
        assert_eq!(resp.bytes().await.unwrap(), body);
        api.wait_for_metric(WAITING, 0).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_already_there_is_answered_at_once() {
    let api = Api::start().await;
    let path = stream_path("long-poll-ready");
    api.create(&path, "application/json").await;
    api.append(&path, "application/json", "[1, 2, 3]").await;
    let began = Instant::now();
    let resp = send(api.get(&format!(
        "{path}?offset=-1&live=long-poll&timeout_ms=60000&max_bytes=4"
    )))
    .await;
    assert!(began.elapsed() < Duration::from_secs(5));
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        header(&resp, "content-type").as_deref(),
        Some("application/x-ndjson")
    );
    assert_eq!(header(&resp, "stream-next-offset"), Some(offset(4)));
    assert_eq!(
        header(&resp, "stream-up-to-date"),
        None,
        "max_bytes bounds a long-poll answer too"
    );
    cursor_of(&resp);
    assert_eq!(resp.bytes().await.unwrap(), "1\n2\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stream_at_its_end_answers_204_at_once() {
    let api = Api::start().await;
    let path = stream_path("long-poll-closed");
    let resp = send(
        api.put(&path)
            .header("content-type", "text/plain")
            .header("stream-closed", "true")
            .body("bye"),
    )
    .await;
    assert_eq!(resp.status().as_u16(), 201);
    for start in [offset(3), "now".to_owned()] {
        let began = Instant::now();
        let resp = send(api.get(&format!(
            "{path}?offset={start}&live=long-poll&timeout_ms=60000"
        )))
        .await;
        assert!(
            began.elapsed() < Duration::from_secs(5),
            "no wait at the end of a closed stream"
        );
        assert_eq!(resp.status().as_u16(), 204);
        assert_eq!(header(&resp, "stream-closed").as_deref(), Some("true"));
        assert_eq!(header(&resp, "stream-up-to-date").as_deref(), Some("true"));
        assert_eq!(header(&resp, "stream-next-offset"), Some(offset(3)));
        assert_eq!(
            header(&resp, "stream-cursor"),
            None,
            "no cursor once closed"
        );
    }
    // Before the end it reads, and says closed when it reaches the end.
    let resp = send(api.get(&format!("{path}?offset=-1&live=long-poll&timeout_ms=60000"))).await;
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(header(&resp, "stream-closed").as_deref(), Some("true"));
    assert_eq!(header(&resp, "stream-cursor"), None);
    assert_eq!(resp.bytes().await.unwrap(), "bye");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_wakes_a_waiting_long_poll() {
    let api = Api::start().await;
    let path = stream_path("long-poll-close-wakes");
    api.create_with(&path, "text/plain", "abc").await;
    let url = api.url(&format!(
        "{path}?offset=now&live=long-poll&timeout_ms=60000"
    ));
    let waiting = tokio::spawn(api.http.get(url).send());
    api.wait_for_metric(WAITING, 1).await;
    api.close(&path).await;
    let resp = tokio::time::timeout(WAIT, waiting)
        .await
        .expect("woken")
        .unwrap()
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    assert_eq!(header(&resp, "stream-closed").as_deref(), Some("true"));
    assert_eq!(header(&resp, "stream-next-offset"), Some(offset(3)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_stream_ends_a_waiting_long_poll_with_404() {
    let api = Api::start().await;
    let path = stream_path("long-poll-deleted");
    api.create(&path, "text/plain").await;
    let url = api.url(&format!(
        "{path}?offset=now&live=long-poll&timeout_ms=60000"
    ));
    let waiting = tokio::spawn(api.http.get(url).send());
    api.wait_for_metric(WAITING, 1).await;
    assert_eq!(send(api.delete(&path)).await.status(), 204);
    let resp = tokio::time::timeout(WAIT, waiting)
        .await
        .expect("woken")
        .unwrap()
        .unwrap();
    expect_error(resp, 404, "STREAM_NOT_FOUND").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_poll_needs_an_offset() {
    let api = Api::start().await;
    let path = stream_path("long-poll-no-offset");
    api.create(&path, "text/plain").await;
    for query in ["live=long-poll", "live=long-poll&timeout_ms=10", "live=sse"] {
        expect_error(
            send(api.get(&format!("{path}?{query}"))).await,
            400,
            "INVALID_OFFSET",
        )
        .await;
    }
}
