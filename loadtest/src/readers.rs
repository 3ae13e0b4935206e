//! Read workloads that any durable-streams server answers the same way:
//! - catch-up: readers replay a prefilled stream from the start, following
//!   `Stream-Next-Offset` until `Stream-Up-To-Date`, again and again;
//! - tails: waiters sit at the end of one stream (long-poll or SSE) while one
//!   writer appends at a fixed rate. Each append carries the microsecond it
//!   was sent, so a tail measures publish-to-receive latency (writer and
//!   readers share this process's clock). k6 cannot measure SSE this way.
//!
//! The servers differ in how much a read returns and how they frame SSE;
//! these loops rely only on the protocol's headers and `data:` lines.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use tokio::sync::watch;

use crate::append::{connect, send, with_host, Sender};
use crate::stats::Summary;

/// The shared clock of writers and tails.
fn since_base() -> u64 {
    static BASE: OnceLock<Instant> = OnceLock::new();
    BASE.get_or_init(Instant::now).elapsed().as_micros() as u64
}

/// Offsets are opaque tokens; escape anything outside the unreserved set so
/// that any server's format survives the query string.
pub(crate) fn escape(token: &str) -> String {
    let mut out = String::with_capacity(token.len());
    for b in token.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Creates a stream (201 or 200 both mean it is there).
pub async fn create(sender: &mut Sender, path: &str, content_type: &str) -> anyhow::Result<()> {
    let req = Request::put(path)
        .header("content-type", content_type)
        .body(Full::new(Bytes::new()))?;
    let status = send(sender, req).await?;
    anyhow::ensure!(status < 300, "creating {path}: HTTP {status}");
    Ok(())
}

/// Creates `path` and appends `mib` MiB to it in `body`-byte appends.
pub async fn prefill(addr: SocketAddr, path: &str, mib: usize, body: usize) -> anyhow::Result<u64> {
    let mut sender = connect(addr).await?;
    create(&mut sender, path, "application/octet-stream").await?;
    let chunk = Bytes::from(vec![b'c'; body.max(1)]);
    let total = (mib as u64) << 20;
    let mut written = 0u64;
    while written < total {
        let req = Request::post(path)
            .header("content-type", "application/octet-stream")
            .body(Full::new(chunk.clone()))?;
        let status = send(&mut sender, req).await?;
        anyhow::ensure!(status < 300, "prefilling {path}: HTTP {status}");
        written += chunk.len() as u64;
    }
    Ok(written)
}

/// A read workload's result: request latencies (catch-up) or delivery
/// latencies (tails), and the amount delivered in the measured window.
#[derive(Clone, Debug)]
pub struct ReadResult {
    pub summary: Summary,
    /// Bytes (catch-up) or events (tails) delivered while measuring.
    pub delivered: u64,
}

impl ReadResult {
    pub fn per_second(&self) -> f64 {
        self.delivered as f64 / self.summary.elapsed.as_secs_f64()
    }
}

/// Runs `tasks` until told to stop and gathers their latencies and counts.
async fn measure<F, Fut>(
    tasks: usize,
    warmup: Duration,
    seconds: Duration,
    task: F,
) -> anyhow::Result<ReadResult>
where
    F: Fn(usize, Arc<AtomicBool>, watch::Receiver<bool>) -> Fut,
    Fut: std::future::Future<Output = (Vec<u32>, u64, u64)> + Send + 'static,
{
    let measuring = Arc::new(AtomicBool::new(false));
    let (stop_tx, stop_rx) = watch::channel(false);
    let handles: Vec<_> = (0..tasks)
        .map(|i| tokio::spawn(task(i, measuring.clone(), stop_rx.clone())))
        .collect();
    tokio::time::sleep(warmup).await;
    measuring.store(true, Ordering::Relaxed);
    let started = Instant::now();
    tokio::time::sleep(seconds).await;
    measuring.store(false, Ordering::Relaxed);
    let elapsed = started.elapsed();
    let _ = stop_tx.send(true);
    let (mut lat, mut errors, mut delivered) = (Vec::new(), 0, 0);
    for h in handles {
        let (l, e, d) = h.await?;
        lat.extend(l);
        errors += e;
        delivered += d;
    }
    Ok(ReadResult {
        summary: Summary::from_latencies(lat, errors, elapsed),
        delivered,
    })
}

/// One GET: status, body, and the two headers a reader follows.
pub(crate) struct Answer {
    status: u16,
    body: Bytes,
    pub(crate) next_offset: Option<String>,
    up_to_date: bool,
    cursor: Option<String>,
}

pub(crate) async fn get(sender: &mut Sender, uri: &str) -> anyhow::Result<Answer> {
    sender.ready().await?;
    let resp = sender
        .send_request(with_host(Request::get(uri).body(Full::new(Bytes::new()))?))
        .await?;
    let header = |name: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let (next_offset, cursor) = (header("stream-next-offset"), header("stream-cursor"));
    let up_to_date = header("stream-up-to-date").is_some_and(|v| v == "true");
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok(Answer {
        status,
        body,
        next_offset,
        up_to_date,
        cursor,
    })
}

#[derive(Clone, Debug)]
pub struct CatchUp {
    pub addr: SocketAddr,
    pub path: String,
    pub readers: usize,
    /// The stream's size: a pass that reads less counts as an error. `None`
    /// for the ceiling, whose every GET is a whole pass.
    pub expect_bytes: Option<u64>,
    pub warmup: Duration,
    pub seconds: Duration,
}

/// Catch-up replay: each reader reads the stream from the start to its end,
/// then starts again. Latency is per request; `delivered` counts bytes.
pub async fn catch_up(w: &CatchUp) -> anyhow::Result<ReadResult> {
    let w = Arc::new(w.clone());
    measure(w.readers, w.warmup, w.seconds, |_, measuring, stop| {
        let w = w.clone();
        async move {
            let (mut lat, mut errors, mut bytes) = (Vec::new(), 0u64, 0u64);
            let Ok(mut sender) = connect(w.addr).await else {
                return (lat, 1, 0);
            };
            let (mut offset, mut pass) = ("-1".to_owned(), 0u64);
            while !*stop.borrow() {
                let t = Instant::now();
                let uri = format!("{}?offset={}", w.path, escape(&offset));
                let answer = match get(&mut sender, &uri).await {
                    Ok(a) if a.status == 200 => a,
                    _ => {
                        errors += 1;
                        match connect(w.addr).await {
                            Ok(s) => sender = s,
                            Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                        }
                        offset = "-1".into();
                        pass = 0;
                        continue;
                    }
                };
                pass += answer.body.len() as u64;
                if measuring.load(Ordering::Relaxed) {
                    lat.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                    bytes += answer.body.len() as u64;
                }
                match answer.next_offset {
                    Some(next) if !answer.up_to_date => offset = next,
                    _ => {
                        if w.expect_bytes.is_some_and(|n| pass < n) {
                            errors += 1;
                        }
                        offset = "-1".into();
                        pass = 0;
                    }
                }
            }
            (lat, errors, bytes)
        }
    })
    .await
}

/// How tails wait: long-poll requests, or one SSE response each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TailMode {
    LongPoll,
    Sse,
}

#[derive(Clone, Debug)]
pub struct Tail {
    pub addr: SocketAddr,
    pub path: String,
    pub mode: TailMode,
    pub tailers: usize,
    /// Appends per second by the one writer.
    pub rate: u32,
    pub warmup: Duration,
    pub seconds: Duration,
}

/// The events in `data` (lines of microsecond stamps); their latencies go
/// to `lat` while measuring. Callers count events only while measuring too.
fn stamps(data: &[u8], measuring: bool, lat: &mut Vec<u32>) -> u64 {
    let now = since_base();
    let mut events = 0;
    for line in data.split(|&b| b == b'\n') {
        let Some(sent) = std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
        else {
            continue;
        };
        events += 1;
        if measuring {
            lat.push(now.saturating_sub(sent).min(u32::MAX as u64) as u32);
        }
    }
    events
}

/// Tails of one stream with one writer at a fixed rate. Latency is from the
/// writer sending an append to a tail receiving it; `delivered` counts
/// events received by all tails.
pub async fn tail(w: &Tail) -> anyhow::Result<ReadResult> {
    let mut sender = connect(w.addr).await?;
    create(&mut sender, &w.path, "text/plain").await?;
    let (writer_stop_tx, writer_stop) = watch::channel(false);
    let writer = tokio::spawn(write_at_rate(
        w.addr,
        sender,
        w.path.clone(),
        w.rate.max(1),
        writer_stop,
    ));
    let w = Arc::new(w.clone());
    let result = measure(w.tailers, w.warmup, w.seconds, |_, measuring, stop| {
        let w = w.clone();
        async move {
            let mut lat = Vec::new();
            let (mut errors, mut events) = (0u64, 0u64);
            let mut stop = stop;
            let run = async {
                loop {
                    let r = match w.mode {
                        TailMode::LongPoll => {
                            long_poll(&w, &measuring, &mut lat, &mut events).await
                        }
                        TailMode::Sse => sse(&w, &measuring, &mut lat, &mut events).await,
                    };
                    if r.is_err() {
                        errors += 1;
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            };
            tokio::select! {
                _ = run => {}
                _ = stop.wait_for(|s| *s) => {}
            }
            (lat, errors, events)
        }
    })
    .await;
    let _ = writer_stop_tx.send(true);
    let write_errors = writer.await?;
    let mut result = result?;
    result.summary.errors += write_errors;
    Ok(result)
}

/// The writer of a tail workload: one append per tick, each the microsecond
/// it was sent and a newline. Returns its failed appends.
async fn write_at_rate(
    addr: SocketAddr,
    mut sender: Sender,
    path: String,
    rate: u32,
    mut stop: watch::Receiver<bool>,
) -> u64 {
    let mut tick = tokio::time::interval(Duration::from_secs(1) / rate);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut errors = 0;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|s| *s) => return errors,
        }
        let body = Bytes::from(format!("{}\n", since_base()));
        let req = Request::post(&path)
            .header("content-type", "text/plain")
            .body(Full::new(body))
            .expect("request");
        match send(&mut sender, req).await {
            Ok(s) if s < 300 => {}
            _ => {
                errors += 1;
                if let Ok(s) = connect(addr).await {
                    sender = s;
                }
            }
        }
    }
}

/// A tail's start: a new connection and the stream's current end, found
/// by reading it from the start (the stream is small: it is new). Every
/// server answers this; not every one knows `offset=now`.
async fn tail_start(w: &Tail) -> anyhow::Result<(Sender, String, Option<String>)> {
    let mut sender = connect(w.addr).await?;
    let mut offset = "-1".to_owned();
    loop {
        let a = get(
            &mut sender,
            &format!("{}?offset={}", w.path, escape(&offset)),
        )
        .await?;
        anyhow::ensure!(a.status == 200, "tail start: HTTP {}", a.status);
        offset = a
            .next_offset
            .ok_or_else(|| anyhow::anyhow!("no Stream-Next-Offset"))?;
        if a.up_to_date {
            return Ok((sender, offset, a.cursor));
        }
    }
}

/// One tail's life with long-polls: wait at the end, sending back the
/// cursor, as a CDN needs to collapse waiters.
async fn long_poll(
    w: &Tail,
    measuring: &AtomicBool,
    lat: &mut Vec<u32>,
    events: &mut u64,
) -> anyhow::Result<()> {
    let (mut sender, mut offset, mut cursor) = tail_start(w).await?;
    loop {
        let mut uri = format!("{}?offset={}&live=long-poll", w.path, escape(&offset));
        if let Some(c) = &cursor {
            uri.push_str(&format!("&cursor={}", escape(c)));
        }
        let a = get(&mut sender, &uri).await?;
        match a.status {
            200 => {
                let measuring = measuring.load(Ordering::Relaxed);
                let n = stamps(&a.body, measuring, lat);
                *events += if measuring { n } else { 0 };
            }
            204 => {}
            s => anyhow::bail!("long-poll: HTTP {s}"),
        }
        if let Some(next) = a.next_offset {
            offset = next;
        }
        if a.cursor.is_some() {
            cursor = a.cursor;
        }
    }
}

/// One tail's life with SSE: one response from the stream's end, read as it
/// arrives. A session the server ends counts as an error; the next starts
/// at the end again (events in between are not counted).
async fn sse(
    w: &Tail,
    measuring: &AtomicBool,
    lat: &mut Vec<u32>,
    events: &mut u64,
) -> anyhow::Result<()> {
    let (mut sender, offset, _) = tail_start(w).await?;
    sender.ready().await?;
    let uri = format!("{}?offset={}&live=sse", w.path, escape(&offset));
    let resp = sender
        .send_request(with_host(Request::get(uri).body(Full::new(Bytes::new()))?))
        .await?;
    anyhow::ensure!(resp.status() == 200, "sse: HTTP {}", resp.status());
    let mut body = resp.into_body();
    let mut pending: Vec<u8> = Vec::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue;
        };
        pending.extend_from_slice(&data);
        // Only whole lines; SSE payload lines start with "data:".
        let Some(end) = pending.iter().rposition(|&b| b == b'\n') else {
            continue;
        };
        let measuring = measuring.load(Ordering::Relaxed);
        for line in pending[..end].split(|&b| b == b'\n') {
            if let Some(payload) = line.strip_prefix(b"data:") {
                let n = stamps(payload, measuring, lat);
                *events += if measuring { n } else { 0 };
            }
        }
        pending.drain(..=end);
    }
    anyhow::bail!("the SSE session ended")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_are_escaped_for_the_query_string() {
        assert_eq!(escape("-1"), "-1");
        assert_eq!(escape("0000_0010"), "0000_0010");
        assert_eq!(escape("a/b+c=d"), "a%2Fb%2Bc%3Dd");
    }

    #[test]
    fn stamps_count_lines_of_numbers_and_skip_the_rest() {
        let now = since_base() + 1;
        let data = format!(
            "{}\n{}\n\n{{\"streamNextOffset\":\"7\"}}\n",
            now - 1,
            now - 1
        );
        let mut lat = Vec::new();
        assert_eq!(stamps(data.as_bytes(), true, &mut lat), 2);
        assert_eq!(lat.len(), 2);
        assert_eq!(stamps(data.as_bytes(), false, &mut lat), 2);
        assert_eq!(lat.len(), 2, "not measuring: counted, not timed");
    }
}
