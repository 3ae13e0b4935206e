//! Forks made while the origin is killed: a fork exists with its whole
//! prefix or not at all, whatever moment the SIGKILL hits.
//!
//! A forker runs beside the writers: it forks a stream at its end then,
//! and now and then forks one of its own forks (chains). A fork that got
//! its 201 must read back exactly its source's bytes up to the fork point;
//! one whose answer was lost must either not exist or read the same.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

/// A fork the forker asked for.
#[derive(Clone, Debug)]
pub struct Asked {
    pub path: String,
    pub source: String,
    /// The source's `Stream-Next-Offset` it was forked at (its bytes then).
    pub at: String,
    /// Whether its 201 came back.
    pub acknowledged: bool,
}

/// Forks streams `{base}/v1/stream/crash/s{i}` (`i < streams`) until
/// `stop`, noting each one in `asked`; `cycle` keeps paths apart.
pub async fn run(
    client: reqwest::Client,
    base: String,
    streams: usize,
    cycle: usize,
    stop: Arc<AtomicBool>,
    asked: Arc<Mutex<Vec<Asked>>>,
) {
    let mut k = 0usize;
    while !stop.load(Ordering::Relaxed) {
        k += 1;
        // Every fourth fork forks the newest acknowledged fork (a chain).
        let chained = k
            .is_multiple_of(4)
            .then(|| {
                asked
                    .lock()
                    .iter()
                    .rev()
                    .find(|a| a.acknowledged)
                    .map(|a| a.path.clone())
            })
            .flatten();
        let source = chained.unwrap_or_else(|| format!("/v1/stream/crash/s{}", k % streams));
        let Ok(head) = client.head(format!("{base}{source}")).send().await else {
            return; // killed
        };
        assert_eq!(head.status(), 200, "HEAD {source}");
        let at = super::common::header(&head, "stream-next-offset").unwrap();
        let path = format!("/v1/stream/crash/f{cycle}-{k}");
        asked.lock().push(Asked {
            path: path.clone(),
            source: source.clone(),
            at: at.clone(),
            acknowledged: false,
        });
        let resp = client
            .put(format!("{base}{path}"))
            .header("stream-forked-from", &source)
            .header("stream-fork-offset", &at)
            .send()
            .await;
        match resp {
            Ok(r) if r.status() == 201 => {
                if let Some(a) = asked.lock().iter_mut().rev().find(|a| a.path == path) {
                    a.acknowledged = true;
                }
            }
            Ok(r) => panic!("fork {path} of {source}: status {}", r.status()),
            Err(_) => return, // killed: the fork may or may not exist
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Reads a whole stream (None when it does not exist).
async fn read(client: &reqwest::Client, base: &str, path: &str) -> Option<Vec<u8>> {
    let mut offset = "-1".to_owned();
    let mut body = Vec::new();
    loop {
        let r = client
            .get(format!("{base}{path}?offset={offset}"))
            .send()
            .await
            .unwrap();
        if r.status() == 404 {
            assert!(body.is_empty(), "{path} vanished while read");
            return None;
        }
        assert_eq!(r.status(), 200, "GET {path}");
        offset = super::common::header(&r, "stream-next-offset").unwrap();
        let done = super::common::header(&r, "stream-up-to-date").is_some();
        body.extend_from_slice(&r.bytes().await.unwrap());
        if done {
            return Some(body);
        }
    }
}

/// Checks every fork asked for after the final restart; returns how many
/// exist.
pub async fn verify(client: &reqwest::Client, base: &str, asked: &[Asked]) -> usize {
    let mut present = 0;
    for a in asked {
        let at = u64::from_str_radix(&a.at, 16).expect("our offsets are hex") as usize;
        let source = read(client, base, &a.source)
            .await
            .unwrap_or_else(|| panic!("the source {} of {} is gone", a.source, a.path));
        assert!(
            source.len() >= at,
            "{} is shorter than {}'s fork point",
            a.source,
            a.path
        );
        match read(client, base, &a.path).await {
            Some(fork) => {
                assert!(
                    fork == source[..at],
                    "fork {} holds {} bytes, not the {at} of its source {} up to its fork point",
                    a.path,
                    fork.len(),
                    a.source
                );
                present += 1;
            }
            None => assert!(!a.acknowledged, "acknowledged fork {} lost", a.path),
        }
    }
    present
}
