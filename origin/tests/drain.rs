//! Draining (`--drain-delay`): from SIGTERM the origin answers `/readyz`
//! 503 draining and goes on serving, new connections included, so a
//! balancer takes it out of rotation before its listener closes; a second
//! SIGTERM ends the delay at once and it stops with status 0. What it
//! acknowledged meanwhile is there after a restart.
//!
//! The delay is ten minutes: the test never waits for it (its end by time
//! is `shell::signal`'s paused-clock test), only for the signals.
//!
//! A stop signal during recovery stops the origin at once, cleanly.

use crate::common;
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

/// A stop signal while the origin replays its log stops it cleanly (status
/// 0, "stopped during recovery"), not by the signal's default action; what
/// it had acknowledged is there at the next start. The replay is held
/// without any hook in the origin: its newest log segment is replaced by a
/// named pipe, whose open waits for a writer, so the signal surely lands
/// during recovery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_recovery_stops_cleanly_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().as_os_str();
    let client = reqwest::Client::new();
    let first = spawn(&[], &["--data".as_ref(), data]);
    let stream = format!("http://{}/v1/stream/kept", first.addr);
    let created = client
        .put(&stream)
        .header("content-type", "text/plain")
        .body("acknowledged")
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    first.terminate();

    let wal = dir.path().join("wal");
    let newest = std::fs::read_dir(&wal)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "wal"))
        .max()
        .expect("a log segment");
    let aside = dir.path().join("segment-aside");
    std::fs::rename(&newest, &aside).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&newest)
        .status()
        .unwrap();
    assert!(made.success());

    let mut held = spawn(&[], &["--data".as_ref(), data]);
    let base = format!("http://{}", held.addr);
    let ready = client.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503, "recovering");
    held.signal("TERM");
    let status = wait_exit(&mut held.child);
    assert!(status.success(), "exit status {status}");
    let said = std::iter::from_fn(|| held.log.recv_timeout(Duration::from_secs(5)).ok())
        .any(|line| line.contains("stopped during recovery"));
    assert!(said, "no \"stopped during recovery\" line");

    std::fs::remove_file(&newest).unwrap();
    std::fs::rename(&aside, &newest).unwrap();
    let again = spawn(&[], &["--data".as_ref(), data]);
    let read = client
        .get(format!("http://{}/v1/stream/kept?offset=-1", again.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 200);
    assert_eq!(read.text().await.unwrap(), "acknowledged");
}
