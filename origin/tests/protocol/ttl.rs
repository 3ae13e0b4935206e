//! Expiry: a sliding `Stream-TTL` that reads and writes renew and `HEAD` does
//! not, and an absolute `Stream-Expires-At`. Time must really pass here, so
//! the tests poll (never a fixed sleep standing in for an event).

use std::time::{Duration, Instant};

use crate::common::*;

/// Polls with `HEAD` (which does not renew a TTL) until the stream is gone.
async fn wait_until_gone(api: &Api, path: &str) -> Instant {
    let deadline = Instant::now() + WAIT;
    loop {
        let resp = send(api.head(path)).await;
        match resp.status().as_u16() {
            200 => {}
            404 => return Instant::now(),
            other => panic!("HEAD {path}: {other}"),
        }
        assert!(
            Instant::now() < deadline,
            "{path} did not expire within {WAIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn assert_gone(api: &Api, path: &str) {
    expect_error(
        send(api.get(&format!("{path}?offset=-1"))).await,
        404,
        "STREAM_NOT_FOUND",
    )
    .await;
    expect_error(
        send(
            api.post(path)
                .header("content-type", "text/plain")
                .body("x"),
        )
        .await,
        404,
        "STREAM_NOT_FOUND",
    )
    .await;
    expect_error(
        send(api.get(&format!("{path}?offset=now&live=long-poll&timeout_ms=1"))).await,
        404,
        "STREAM_NOT_FOUND",
    )
    .await;
    expect_error(
        send(api.get(&format!("{path}?offset=-1&live=sse"))).await,
        404,
        "STREAM_NOT_FOUND",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_stream_expires_and_head_does_not_renew_it() {
    let api = Api::start().await;
    let path = stream_path("ttl-idle");
    let began = Instant::now();
    let created = send(
        api.put(&path)
            .header("content-type", "text/plain")
            .header("stream-ttl", "1")
            .body("abc"),
    )
    .await;
    assert_eq!(created.status().as_u16(), 201);
    let old = header(&created, "stream-incarnation").unwrap();
    let gone = wait_until_gone(&api, &path).await;
    let lived = gone - began;
    assert!(
        lived >= Duration::from_millis(900),
        "expired after {lived:?}, before its TTL of 1 s"
    );
    assert_gone(&api, &path).await;

    // The path is free again: a new stream, with nothing of the old one.
    let again = api.create(&path, "text/plain").await;
    assert_ne!(header(&again, "stream-incarnation"), Some(old));
    assert_eq!(api.read_all(&path).await, b"");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_and_appends_renew_a_sliding_ttl() {
    let api = Api::start().await;
    let path = stream_path("ttl-renewed");
    let began = Instant::now();
    let created = send(
        api.put(&path)
            .header("content-type", "text/plain")
            .header("stream-ttl", "2"),
    )
    .await;
    assert_eq!(created.status().as_u16(), 201);
    // Touch it well within every 2 s for twice its TTL: it stays.
    let mut read = true;
    while began.elapsed() < Duration::from_secs(5) {
        let resp = if read {
            send(api.get(&format!("{path}?offset=-1"))).await
        } else {
            send(
                api.post(&path)
                    .header("content-type", "text/plain")
                    .body("x"),
            )
            .await
        };
        assert!(
            resp.status().is_success(),
            "after {:?}: {}",
            began.elapsed(),
            resp.status()
        );
        read = !read;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let head = send(api.head(&path)).await;
    assert_eq!(
        head.status().as_u16(),
        200,
        "renewed past {:?}",
        began.elapsed()
    );
    assert_eq!(header(&head, "stream-ttl").as_deref(), Some("2"));
    // Left alone, it expires.
    let idle_from = Instant::now();
    let gone = wait_until_gone(&api, &path).await;
    assert!(gone - idle_from < Duration::from_secs(4));
    assert_gone(&api, &path).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_expires_at_its_expires_at() {
    let api = Api::start().await;
    let path = stream_path("ttl-expires-at");
    let at = time::OffsetDateTime::now_utc() + time::Duration::milliseconds(1500);
    let value = at
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap();
    let began = Instant::now();
    let created = send(
        api.put(&path)
            .header("content-type", "text/plain")
            .header("stream-expires-at", &value)
            .body("abc"),
    )
    .await;
    assert_eq!(created.status().as_u16(), 201);
    let head = send(api.head(&path)).await;
    assert!(header(&head, "stream-expires-at").is_some_and(|v| v.ends_with('Z')));
    assert_eq!(header(&head, "stream-ttl"), None);
    // Reads do not move an absolute expiry.
    let deadline = Instant::now() + WAIT;
    loop {
        let resp = send(api.get(&format!("{path}?offset=-1"))).await;
        if resp.status().as_u16() == 404 {
            expect_error(resp, 404, "STREAM_NOT_FOUND").await;
            break;
        }
        assert_eq!(resp.status().as_u16(), 200);
        assert!(Instant::now() < deadline, "did not expire");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        began.elapsed() >= Duration::from_millis(1300),
        "expired after {:?}",
        began.elapsed()
    );
    assert_gone(&api, &path).await;
    expect_head_error(&send(api.head(&path)).await, 404);
}
