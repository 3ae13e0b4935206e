//! Pooled appends: a fixed pool of `C` connections appending round-robin
//! across `N` streams, closed loop (each connection sends its next append
//! when the last is answered).
//!
//! `append` gives every stream a writer and a connection of its own, which
//! caps the streams at what the machine's connections allow. Here the
//! connections stay fixed while `N` grows to a million, so what changes from
//! row to row is only what the server pays per stream: its index, its open
//! files, its memory. Connection `c` appends to streams `c, c + C, c + 2C, …`
//! and starts over, so every stream is written and no two connections share
//! one (with `N < C`, only `N` connections are used).
//!
//! The streams are created first, over the same pool, and that phase is
//! timed on its own: a create is not an append.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;

use crate::append::{connect, send};
use crate::pool::{self, Job, Tally};
use crate::stats::Summary;

/// One pooled run's shape.
#[derive(Clone, Debug)]
pub struct Pooled {
    pub addr: SocketAddr,
    /// Stream `i` is `{prefix}{i}`.
    pub prefix: String,
    pub streams: usize,
    pub connections: usize,
    /// Bytes per append.
    pub body: usize,
    pub warmup: Duration,
    pub seconds: Duration,
}

impl Pooled {
    /// Connections actually used: no more than there are streams.
    pub fn used_connections(&self) -> usize {
        self.connections.clamp(1, self.streams.max(1))
    }
}

/// `PUT {prefix}{i}`, empty.
struct Create {
    prefix: String,
}

impl Job for Create {
    fn request(&self, i: usize) -> anyhow::Result<Request<Full<Bytes>>> {
        Ok(Request::put(format!("{}{i}", self.prefix))
            .header("content-type", "application/octet-stream")
            .body(Full::new(Bytes::new()))?)
    }
}

/// Creates the `N` streams over the pool's connections.
pub async fn create(p: &Pooled) -> Tally {
    let job = Arc::new(Create {
        prefix: p.prefix.clone(),
    });
    pool::run(p.addr, p.used_connections(), p.streams, job).await
}

/// What one connection measured: latencies, errors, the first error.
type Measured = (Vec<u32>, u64, Option<String>);

/// The appends: `warmup`, then `seconds` measured.
pub async fn append(p: &Pooled) -> anyhow::Result<Summary> {
    let connections = p.used_connections();
    let body = Bytes::from(vec![b'a'; p.body]);
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    // Every connection first, so that all of them run the whole window.
    let mut senders = Vec::with_capacity(connections);
    for _ in 0..connections {
        senders.push(connect(p.addr).await?);
    }
    let tasks: Vec<_> = senders
        .into_iter()
        .enumerate()
        .map(|(c, sender)| {
            let (p, body, stop, measuring) =
                (p.clone(), body.clone(), stop.clone(), measuring.clone());
            tokio::spawn(async move {
                one_connection(&p, c, connections, sender, body, &stop, &measuring).await
            })
        })
        .collect();
    crate::stats::measure_window(tasks, &measuring, &stop, p.warmup, p.seconds).await
}

/// Connection `c` of `connections`: its streams, round and round.
async fn one_connection(
    p: &Pooled,
    c: usize,
    connections: usize,
    mut sender: crate::append::Sender,
    body: Bytes,
    stop: &AtomicBool,
    measuring: &AtomicBool,
) -> Measured {
    let mut lat = Vec::with_capacity(64 * 1024);
    let (mut errors, mut first_error) = (0u64, None);
    let mut stream = c;
    while !stop.load(Ordering::Relaxed) {
        let req = Request::post(format!("{}{stream}", p.prefix))
            .header("content-type", "application/octet-stream")
            .body(Full::new(body.clone()))
            .expect("request");
        let t = Instant::now();
        match send(&mut sender, req).await {
            Ok(s) if s < 300 => {
                if measuring.load(Ordering::Relaxed) {
                    lat.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                }
            }
            failed => {
                errors += 1;
                let lost = failed.is_err();
                first_error.get_or_insert_with(|| match failed {
                    Ok(s) => format!("HTTP {s}"),
                    Err(e) => format!("{e:#}"),
                });
                if lost {
                    match connect(p.addr).await {
                        Ok(s) => sender = s,
                        // A server that is gone refuses at once; do not spin.
                        Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                    }
                }
            }
        }
        stream = next_stream(stream, connections, p.streams, c);
    }
    (lat, errors, first_error)
}

/// The stream after `stream` for connection `c`: `C` further on, or back to
/// its first.
fn next_stream(stream: usize, connections: usize, streams: usize, c: usize) -> usize {
    match stream + connections {
        next if next < streams => next,
        _ => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_connection_cycles_through_its_own_streams() {
        let walk = |c: usize| {
            let mut s = c;
            let mut seen = vec![s];
            for _ in 0..5 {
                s = next_stream(s, 3, 8, c);
                seen.push(s);
            }
            seen
        };
        assert_eq!(walk(0), [0, 3, 6, 0, 3, 6]);
        assert_eq!(walk(1), [1, 4, 7, 1, 4, 7]);
        assert_eq!(walk(2), [2, 5, 2, 5, 2, 5]);
    }

    #[test]
    fn there_are_never_more_connections_than_streams() {
        let p = |streams, connections| Pooled {
            addr: ([127, 0, 0, 1], 1).into(),
            prefix: "/s/".into(),
            streams,
            connections,
            body: 1,
            warmup: Duration::ZERO,
            seconds: Duration::ZERO,
        };
        assert_eq!(p(1000, 256).used_connections(), 256);
        assert_eq!(p(10, 256).used_connections(), 10);
        assert_eq!(p(0, 256).used_connections(), 1);
    }

    #[tokio::test]
    async fn the_ceiling_takes_creates_and_pooled_appends() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(crate::ceiling::serve(listener, Bytes::from_static(b"x")));
        let p = Pooled {
            addr,
            prefix: "/v1/stream/pooled-".into(),
            streams: 50,
            connections: 8,
            body: 16,
            warmup: Duration::ZERO,
            seconds: Duration::from_millis(200),
        };
        let created = create(&p).await;
        assert_eq!((created.items, created.failures()), (50, 0));
        let appended = append(&p).await.expect("appends");
        assert!(appended.requests > 0);
        assert_eq!(appended.errors, 0);
    }
}
