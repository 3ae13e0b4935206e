//! Draining (`--drain-delay`): from SIGTERM the origin answers `/readyz`
//! 503 draining and goes on serving, new connections included, so a
//! balancer takes it out of rotation before its listener closes; a second
//! SIGTERM ends the delay at once and it stops with status 0. What it
//! acknowledged meanwhile is there after a restart.
//!
//! The delay is ten minutes: the test never waits for it (its end by time
//! is `shell::signal`'s paused-clock test), only for the signals.

mod common;

use std::time::{Duration, Instant};

use common::process::{spawn, spawn_at};

fn wait_exit(child: &mut std::process::Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the origin did not stop");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_while_serving_and_a_second_one_stops_it() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().as_os_str();
    let mut origin = spawn(
        &[],
        &[
            "--data".as_ref(),
            data,
            "--drain-delay".as_ref(),
            "600s".as_ref(),
        ],
    );
    let base = format!("http://{}", origin.addr);
    let stream = format!("{base}/v1/stream/drained");
    let client = reqwest::Client::new();
    // Ready once its (empty) log is replayed: serving, its stop signal's
    // handler in place.
    let deadline = Instant::now() + Duration::from_secs(10);
    while client
        .get(format!("{base}/readyz"))
        .send()
        .await
        .unwrap()
        .status()
        != 200
    {
        assert!(Instant::now() < deadline, "never ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let created = client
        .put(&stream)
        .header("content-type", "text/plain")
        .body("before ")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);

    origin.signal("TERM");
    let deadline = Instant::now() + Duration::from_secs(10);
    let body: serde_json::Value = loop {
        let r = client.get(format!("{base}/readyz")).send().await.unwrap();
        if r.status() == 503 {
            assert_eq!(r.headers()["retry-after"], "1");
            break r.json().await.unwrap();
        }
        assert_eq!(r.status(), 200);
        assert!(Instant::now() < deadline, "SIGTERM did not make it unready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(body["error"]["code"], "NOT_READY");
    assert_eq!(body["error"]["message"], "draining: shutting down");

    // Still serving, on a connection opened after the signal too.
    let fresh = reqwest::Client::new();
    assert_eq!(
        fresh
            .get(format!("{base}/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let appended = fresh
        .post(&stream)
        .header("content-type", "text/plain")
        .body("during")
        .send()
        .await
        .unwrap();
    assert_eq!(appended.status(), 204, "an append while draining");
    assert_eq!(origin.child.try_wait().unwrap(), None, "still running");

    origin.signal("TERM");
    let status = wait_exit(&mut origin.child);
    assert!(status.success(), "exit status {status}");

    let again = spawn_at(
        &origin.addr.to_string(),
        &[],
        &["--data".as_ref(), data],
        &[],
    );
    let read = client
        .get(format!("http://{}/v1/stream/drained?offset=-1", again.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(read.text().await.unwrap(), "before during");
}
