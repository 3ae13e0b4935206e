//! Rollbacks while the origin is killed: one log record each, so whatever
//! moment the SIGKILL hits, a stream holds its old history or the new
//! one, never a mix (decision 0029).
//!
//! One client at a time appends to and rolls back a few streams, noting
//! before each request what it asked; the origin is killed after a random
//! delay, so at most one request is unanswered. After the restart each
//! stream must read as the model says, or (for the unanswered request's
//! stream) as the model after that request: anything else is a mix, a
//! loss or a duplicate.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use shared::offset::Offset;

use super::{spawn_origin, Rng};
use crate::common;

const STREAMS: usize = 4;
const CYCLES: usize = 20;

/// What a stream holds, as acknowledged.
#[derive(Clone, Debug, PartialEq)]
struct Model {
    bytes: Vec<u8>,
    token: String,
}

/// The request in flight when the origin died.
#[derive(Clone, Debug)]
enum Pending {
    Append(usize, Vec<u8>),
    Rollback(usize, usize),
}

/// Appends to and rolls back the streams one request at a time until a
/// request finds the origin gone.
async fn work(
    base: String,
    models: Arc<Mutex<Vec<Model>>>,
    pending: Arc<Mutex<Option<Pending>>>,
    mut rng: Rng,
) {
    let client = common::client();
    for k in 0.. {
        let i = (rng.next() % STREAMS as u64) as usize;
        let path = format!("{base}/v1/stream/rb/s{i}");
        let model = models.lock()[i].clone();
        let rollback = k % 3 == 2 && !model.bytes.is_empty();
        if rollback {
            let to = (rng.next() % model.bytes.len() as u64) as usize;
            *pending.lock() = Some(Pending::Rollback(i, to));
            let sent = client
                .post(format!("{path}/incarnation/{}/restore", model.token))
                .header("stream-restore-offset", Offset(to as u64).to_string())
                .send()
                .await;
            let Ok(r) = sent else { return };
            assert_eq!(r.status(), 200, "rollback of s{i} to {to}");
            let token = common::header(&r, "stream-incarnation").unwrap();
            let mut m = models.lock();
            m[i].bytes.truncate(to);
            m[i].token = token;
        } else {
            let body = format!("<{k}>").into_bytes();
            *pending.lock() = Some(Pending::Append(i, body.clone()));
            let sent = client
                .post(&path)
                .header("content-type", "application/octet-stream")
                .body(body.clone())
                .send()
                .await;
            let Ok(r) = sent else { return };
            assert_eq!(r.status(), 204, "append to s{i}");
            models.lock()[i].bytes.extend_from_slice(&body);
        }
        *pending.lock() = None;
    }
}

/// The stream as the restarted origin serves it.
async fn read(client: &reqwest::Client, base: &str, i: usize) -> Model {
    let r = client
        .get(format!("{base}/v1/stream/rb/s{i}?offset=-1"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "read s{i}");
    let token = common::header(&r, "stream-incarnation").unwrap();
    Model {
        bytes: r.bytes().await.unwrap().to_vec(),
        token,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_killed_at_any_moment_leaves_one_history() {
    let seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    eprintln!("rollbacks under SIGKILL: seed {seed}");
    let mut rng = Rng(seed);
    let dir = tempfile::tempdir().unwrap();
    let client = common::client();
    let proc = spawn_origin(dir.path());
    let base = format!("http://{}", proc.addr);
    let mut models = Vec::new();
    for i in 0..STREAMS {
        let r = client
            .put(format!("{base}/v1/stream/rb/s{i}"))
            .header("content-type", "application/octet-stream")
            .body("start")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 201);
        let token = common::header(&r, "stream-incarnation").unwrap();
        models.push(Model {
            bytes: b"start".to_vec(),
            token,
        });
    }
    drop(proc);
    let models = Arc::new(Mutex::new(models));
    let mut rollbacks_in_flight = 0;
    for cycle in 0..CYCLES {
        let mut proc = spawn_origin(dir.path());
        let base = format!("http://{}", proc.addr);
        // What the restart holds, then work on it until the kill.
        let pending = Arc::new(Mutex::new(None));
        let worker = tokio::spawn(work(
            base.clone(),
            Arc::clone(&models),
            Arc::clone(&pending),
            Rng(rng.next() | 1),
        ));
        tokio::time::sleep(Duration::from_millis(20 + rng.next() % 200)).await;
        proc.kill();
        worker.await.unwrap();
        drop(proc);

        let proc = spawn_origin(dir.path());
        let base = format!("http://{}", proc.addr);
        let in_flight = pending.lock().clone();
        let mut m = models.lock().clone();
        for (i, model) in m.iter_mut().enumerate() {
            let got = read(&client, &base, i).await;
            let mut after = model.clone();
            match &in_flight {
                Some(Pending::Append(j, body)) if *j == i => after.bytes.extend_from_slice(body),
                Some(Pending::Rollback(j, to)) if *j == i => {
                    after.bytes.truncate(*to);
                    after.token = got.token.clone();
                }
                _ => {}
            }
            if got == *model {
                continue;
            }
            assert_eq!(
                got, after,
                "cycle {cycle}, s{i} (seed {seed}): neither the acknowledged history nor it after {in_flight:?}"
            );
            if matches!(in_flight, Some(Pending::Rollback(..))) {
                rollbacks_in_flight += 1;
            }
            *model = got;
        }
        *models.lock() = m;
        drop(proc);
    }
    eprintln!("rollbacks under SIGKILL: {rollbacks_in_flight} unanswered rollbacks found landed");
}
