//! Two servers under the same closed-loop append workload, in alternating
//! slices of a second or so: each has its own writers and connections, and
//! only one side's writers run at a time.
//!
//! This machine's speed drifts by tens of percent within a minute (other
//! tenants of the host), which swamped a comparison of two runs made one
//! after the other. Slices this short see the same drift on both sides, so
//! the ratio of the two sides' totals cancels it. Requests in flight at a
//! switch finish in the next slice's ramp, which is not counted.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;
use tokio::sync::watch;

use crate::append::{connect, send, Workload};
use crate::stats::Summary;

/// Which side runs, or none (`STOP`).
const STOP: u8 = u8::MAX;

pub struct Side {
    pub label: String,
    pub addr: SocketAddr,
}

/// Both sides' totals over their measured slices.
pub struct Interleaved {
    pub summaries: [Summary; 2],
    /// The second side's rate over the first's, slice pair by slice pair.
    pub pair_ratios: Vec<f64>,
}

/// Runs `pairs` pairs of slices of `slice` each (after `ramp` uncounted at
/// every switch, and one warm-up slice per side) and returns both
/// sides' totals. (Long by design: one loop whose slices must share its
/// state; split, each piece would take all of it.)
pub async fn run(
    sides: &[Side; 2],
    workload: &Workload,
    pairs: usize,
    slice: Duration,
    ramp: Duration,
) -> anyhow::Result<Interleaved> {
    let (active_tx, active_rx) = watch::channel(STOP);
    let measuring = Arc::new(AtomicU8::new(STOP));
    let counts = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let errors = [Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0))];
    let body = Bytes::from(vec![b'a'; workload.body]);
    let mut tasks = Vec::new();
    for (side, s) in sides.iter().enumerate() {
        for i in 0..workload.streams {
            let path = format!("/v1/stream/interleave-{side}-{i}");
            let mut sender = connect(s.addr).await?;
            let req = Request::put(&path)
                .header("content-type", "application/octet-stream")
                .body(Full::new(Bytes::new()))?;
            let status = send(&mut sender, req).await?;
            anyhow::ensure!(status < 300, "creating {path} on {}: {status}", s.label);
            let mut active = active_rx.clone();
            let (body, measuring) = (body.clone(), Arc::clone(&measuring));
            let (count, errors, addr) =
                (Arc::clone(&counts[side]), Arc::clone(&errors[side]), s.addr);
            let side = side as u8;
            tasks.push(tokio::spawn(async move {
                let mut lat = Vec::with_capacity(16 * 1024);
                loop {
                    let now = *active.borrow_and_update();
                    if now != side {
                        if active.changed().await.is_err() {
                            break;
                        }
                        continue;
                    }
                    let req = Request::post(&path)
                        .header("content-type", "application/octet-stream")
                        .body(Full::new(body.clone()))
                        .expect("request");
                    let t = Instant::now();
                    let counted = measuring.load(Ordering::Relaxed) == side;
                    match send(&mut sender, req).await {
                        Ok(s) if s < 300 => {
                            if counted && measuring.load(Ordering::Relaxed) == side {
                                count.fetch_add(1, Ordering::Relaxed);
                                lat.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                            }
                        }
                        _ => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            if let Ok(s) = connect(addr).await {
                                sender = s;
                            }
                        }
                    }
                }
                (side, lat)
            }));
        }
    }
    // One uncounted slice per side first: connections, caches, files.
    for side in [0u8, 1] {
        active_tx.send_replace(side);
        tokio::time::sleep(slice).await;
    }
    let mut elapsed = [Duration::ZERO; 2];
    let mut pair_rates = Vec::with_capacity(pairs);
    for pair in 0..pairs {
        // Alternate which side goes first, so neither always follows the other.
        let order = if pair % 2 == 0 { [0u8, 1] } else { [1u8, 0] };
        let mut rates = [0f64; 2];
        for side in order {
            active_tx.send_replace(side);
            tokio::time::sleep(ramp).await;
            let before = counts[side as usize].load(Ordering::Relaxed);
            let started = Instant::now();
            measuring.store(side, Ordering::Relaxed);
            tokio::time::sleep(slice).await;
            measuring.store(STOP, Ordering::Relaxed);
            let took = started.elapsed();
            let done = counts[side as usize].load(Ordering::Relaxed) - before;
            elapsed[side as usize] += took;
            rates[side as usize] = done as f64 / took.as_secs_f64();
        }
        pair_rates.push(rates);
    }
    active_tx.send_replace(STOP);
    drop(active_tx);
    let mut lat: [Vec<u32>; 2] = [Vec::new(), Vec::new()];
    for t in tasks {
        let (side, l) = t.await?;
        lat[side as usize].extend(l);
    }
    let [l0, l1] = lat;
    Ok(Interleaved {
        summaries: [
            Summary::from_latencies(l0, errors[0].load(Ordering::Relaxed), elapsed[0]),
            Summary::from_latencies(l1, errors[1].load(Ordering::Relaxed), elapsed[1]),
        ],
        pair_ratios: pair_rates.iter().map(|r| r[1] / r[0]).collect(),
    })
}
