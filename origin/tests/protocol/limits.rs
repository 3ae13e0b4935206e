//! Bounds under load: the ingress budget refuses with 503 and `Retry-After`
//! instead of growing memory, and a graceful stop does not wait for live
//! readers.

use std::time::{Duration, Instant};

use futures::StreamExt;
use origin::http::HttpConfig;

use super::common::{expect_error, header, stream_path, Api, TestOrigin};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_ingress_budget_answers_503_with_retry_after() {
    let api = Api::start_with(HttpConfig {
        ingress_budget: 1200,
        ingress_wait: Duration::from_millis(200),
        ..HttpConfig::default()
    })
    .await;
    let path = stream_path("ingress");
    api.create(&path, "application/octet-stream").await;

    // A body of 1,000 bytes whose second half is held back: the 500 bytes
    // it sent keep their room in the budget until it is released, and a
    // body of 1,000 more does not fit beside them.
    let (release, held) = tokio::sync::oneshot::channel::<()>();
    let body = futures::stream::once(async { Ok::<_, std::io::Error>(vec![b'a'; 500]) }).chain(
        futures::stream::once(async move {
            let _ = held.await;
            Ok(vec![b'b'; 500])
        }),
    );
    let slow = api
        .post(&path)
        .header("content-type", "application/octet-stream")
        .header("content-length", "1000")
        .body(reqwest::Body::wrap_stream(body))
        .send();
    let slow = tokio::spawn(slow);
    // Wait until the first body holds its room (the server is reading it).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let second = api
            .post(&path)
            .header("content-type", "application/octet-stream")
            .body(vec![b'c'; 1000])
            .send()
            .await
            .unwrap();
        if second.status() == 503 {
            assert_eq!(header(&second, "retry-after").as_deref(), Some("1"));
            expect_error(second, 503, "UNAVAILABLE").await;
            break;
        }
        // The slow body had not started yet; this append went through.
        assert_eq!(second.status(), 204);
        assert!(Instant::now() < deadline, "the budget never filled");
    }
    release.send(()).unwrap();
    let slow = slow.await.unwrap().unwrap();
    assert_eq!(
        slow.status(),
        204,
        "the held body is appended once released"
    );
    let all = api.read_all(&path).await;
    assert!(all
        .windows(1000)
        .any(|w| w[..500].iter().all(|&b| b == b'a') && w[500..].iter().all(|&b| b == b'b')));
    assert!(!all.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_stop_ends_live_readers_at_once() {
    let origin = TestOrigin::start().await;
    let api = Api::on(origin);
    let path = stream_path("stop");
    api.create(&path, "text/plain").await;
    let mut sse = api.sse(&path, "offset=-1").await;
    sse.expect("control").await;
    let long_poll = tokio::spawn(
        api.get(&format!(
            "{path}?offset=now&live=long-poll&timeout_ms=60000"
        ))
        .send(),
    );
    api.wait_for_metric("ds_origin_long_polls_waiting", 1).await;
    let started = Instant::now();
    let Api { origin, .. } = api;
    origin.stop().await;
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "stop waited {:?} for live readers",
        started.elapsed()
    );
    let lp = long_poll.await.unwrap().unwrap();
    assert_eq!(
        lp.status(),
        204,
        "a long-poll cut short by shutdown answers as a timeout"
    );
    sse.expect_end().await;
}
