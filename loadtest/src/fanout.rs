//! `sse-fanout`: N SSE readers on one stream while one writer appends
//! timestamped events at a fixed rate; every reader must get every event,
//! in order. One round per system, each on fresh processes, in one run:
//! - `edge`: our edge in front of our durable origin, the writer writing
//!   through the edge;
//! - `origin`: our origin directly;
//! - `electric`, `ursula-disk`: the peers (`peers/systems.rs`);
//! - `floor`: bare threads writing the same frames to bare sockets
//!   (`fanout_floor`), what this machine allows at all.
//!
//! Every round reads with the same client, the lean one (`lean_sse`) unless
//! `--client hyper` (or HTTP/2) asks for hyper's. Latency is from each
//! append's answer to a reader's receipt (the measure) and from its
//! send. Each round also reports the system's RSS per idle reader (its
//! growth from before the readers to when all are in place). Then, for the
//! edge, a fresh pair measures memory per parked long-poll.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;

use crate::edge::{metric, request, rss_kib, wait_metric, write_stamped, Binaries, Pair, Readers};
use crate::fanout_floor;
use crate::fanout_hyper;
use crate::lean_sse::{self, Clock, Outcome, Target};
use crate::peers::systems::{self, Programs, Running, SYSTEMS};
use crate::stats::Summary;

#[derive(clap::Args)]
pub struct FanoutArgs {
    #[command(flatten)]
    pub bins: Binaries,
    /// SSE readers, all on one stream.
    #[arg(long, default_value_t = 1000)]
    pub readers: usize,
    /// Events appended per second.
    #[arg(long, default_value_t = 50)]
    pub rate: u64,
    /// Seconds of appends measured.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    /// Systems, a round each in this order (edge, origin, electric,
    /// ursula-disk, ursula-memory, floor), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "edge,origin")]
    pub systems: Vec<String>,
    /// The readers' client: `lean` (a few threads reading every socket) or
    /// `hyper` (a task and an HTTP client each; HTTP/2 always uses it).
    #[arg(long, default_value = "lean")]
    pub client: String,
    /// Threads of the lean client (and writer threads of the floor).
    #[arg(long, default_value_t = 2)]
    pub client_threads: usize,
    /// Long-pollers waiting at once at a fresh edge, for the memory figure
    /// (0: skip).
    #[arg(long, default_value_t = 1000)]
    pub long_pollers: usize,
    /// Readers and long-pollers share this many HTTP/2 connections (prior
    /// knowledge), spread evenly; 0: HTTP/1.1, one connection each. Each
    /// connection carries at most the server's 256 streams.
    #[arg(long, default_value_t = 0)]
    pub http2_connections: usize,
    /// Open readers a hundred at a time, each hundred once the last is in
    /// (hyper client only).
    #[arg(long)]
    pub trickle: bool,
    /// The Ursula 0.11.5 binary; default ~/.cache/ds-peers/ursula/bin/ursula.
    #[arg(long, env = "DS_URSULA")]
    pub ursula: Option<PathBuf>,
    /// Electric's `durable-streams-server`; default
    /// ~/.cache/ds-peers/electric/bin/durable-streams-server.
    #[arg(long, env = "DS_ELECTRIC")]
    pub electric: Option<PathBuf>,
}

/// What one fan-out round measured.
pub(crate) struct Fanned {
    /// Delivery latency from each append's send...
    pub(crate) from_send: Summary,
    /// ...and from its answer.
    pub(crate) from_answer: Summary,
    /// The measured process's RSS before the readers and once all were in.
    pub(crate) rss_kib: (u64, u64),
    /// Why the first short reader stopped.
    pub(crate) first_error: Option<String>,
}

pub async fn fanout(args: FanoutArgs) -> anyhow::Result<()> {
    let programs = Programs {
        origin: args.bins.origin.clone(),
        edge: args.bins.edge.clone(),
        ursula: systems::peer_program(&args.ursula, "ursula/bin/ursula"),
        electric: systems::peer_program(&args.electric, "electric/bin/durable-streams-server"),
        node_dir: PathBuf::from("loadtest/peers"),
        node: PathBuf::from("node"),
        ceiling_get_bytes: 0,
    };
    let mut rows = Vec::new();
    for name in &args.systems {
        let fanned = if name == "floor" {
            floor_round(&args).await?
        } else {
            let system_name = match name.as_str() {
                "edge" => "edge-sync",
                "origin" => "origin-sync",
                other => other,
            };
            let system = SYSTEMS
                .iter()
                .find(|s| s.name == system_name)
                .ok_or_else(|| anyhow::anyhow!("unknown system {name:?}"))?;
            if let Some(why) = programs.missing(system) {
                println!("{name}: not run: {why}");
                continue;
            }
            let dir = std::env::temp_dir()
                .join(format!("ds-fanout-{}-{system_name}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir)?;
            let running = systems::start(system, &programs, &dir).await?;
            let result = system_round(&running, name, &args).await;
            running.stop().await;
            match &result {
                // Why readers were short may be in the server's log.
                Ok(f) if f.from_send.errors > 0 => {
                    println!("{name}: its log and data kept in {}", dir.display())
                }
                _ => {
                    let _ = std::fs::remove_dir_all(&dir);
                }
            }
            result?
        };
        println!("{}", fanout_line(name, &args, &fanned));
        rows.push((name.clone(), fanned));
    }
    println!("\n{}", table(&args, &rows));
    if args.long_pollers > 0 && args.systems.iter().any(|s| s == "edge") {
        long_poll_memory(&args).await?;
    }
    Ok(())
}

/// A server's round: create the stream, open the readers at its end, wait
/// until all are in, write, gather.
async fn system_round(running: &Running, name: &str, args: &FanoutArgs) -> anyhow::Result<Fanned> {
    let addr = running.addr;
    let path = format!("{}fanout", running.prefix);
    let status = request(addr, "PUT", &path, "text/plain", Bytes::new()).await?;
    anyhow::ensure!(status < 300, "{name}: create: {status}");
    let end = stream_end(addr, &path).await?;
    // Let the server settle before the baseline.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let base = rss_kib(running.pid());
    let clock = Instant::now();
    let expected = (args.rate * args.seconds) as usize;
    let uri = format!("{path}?offset={end}&live=sse");
    let deadline = Instant::now() + Duration::from_secs(120 + args.seconds);
    // Where the server counts its open readers (ours do).
    let open_series = match name {
        "edge" => Some("ds_edge_sse_open"),
        "origin" => Some("ds_origin_sse_open"),
        _ => None,
    };
    let reading = if args.client == "hyper" || args.http2_connections > 0 {
        Reading::Hyper(
            fanout_hyper::open(addr, &uri, args, expected, clock, |i| {
                open_series.filter(|_| args.trickle && i % 100 == 99)
            })
            .await?,
        )
    } else {
        let targets = (0..args.readers).map(|_| Target::get(addr, &uri)).collect();
        let lean = lean_sse::open(
            targets,
            expected,
            args.client_threads,
            Clock::Since(clock),
            deadline,
        );
        lean.all_open(args.readers, deadline)
            .await
            .map_err(|e| e.context(name.to_owned()))?;
        Reading::Lean(lean)
    };
    // Where the server counts its readers, wait until it has every one.
    if let Some(series) = open_series {
        wait_metric(addr, series, args.readers as i64).await?;
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let rss = rss_kib(running.pid());
    let written = write_stamped(addr, args.rate, expected, clock, |_| path.clone()).await?;
    // The writer's window, its first send to its last answer: deliveries a
    // second over it (a writer slower than its rate makes it longer).
    let window = match (written.first(), written.last()) {
        (Some(first), Some(last)) => Duration::from_micros(last.1.saturating_sub(first.0)),
        _ => Duration::ZERO,
    };
    let outcomes = reading.finish().await?;
    if name == "edge" {
        let mut said = Vec::new();
        for series in [
            "ds_edge_upstream_requests_total{kind=\"tail\"}",
            "ds_edge_sse_dropped_slow_total",
            "ds_edge_sse_writers_behind_total",
            "ds_edge_sse_rings_over_budget_total",
        ] {
            said.push(format!("{series} {}", metric(addr, series).await?));
        }
        println!("{name}: {}", said.join(", "));
    }
    Ok(gather(&outcomes, &written, expected, window, (base, rss)))
}

/// The floor's round (`fanout_floor`).
async fn floor_round(args: &FanoutArgs) -> anyhow::Result<Fanned> {
    let expected = (args.rate * args.seconds) as usize;
    let (outcomes, full, window) =
        fanout_floor::round(args.readers, args.rate, expected, args.client_threads).await?;
    if full > 0 {
        println!("floor: {full} frames found a socket full");
    }
    // The floor's stamp is when its writing began: send and answer at once.
    Ok(gather(&outcomes, &[], expected, window, (0, 0)))
}

enum Reading {
    Lean(lean_sse::Readers),
    Hyper(Vec<fanout_hyper::ReaderTask>),
}

impl Reading {
    async fn finish(self) -> anyhow::Result<Vec<Outcome>> {
        match self {
            Reading::Lean(r) => Ok(tokio::task::spawn_blocking(move || r.finish()).await?),
            Reading::Hyper(tasks) => {
                // One deadline for all: readers that stall are not waited
                // for one after another.
                let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
                let mut all = Vec::with_capacity(tasks.len());
                for mut t in tasks {
                    let outcome = match tokio::time::timeout_at(deadline, &mut t).await {
                        Ok(Ok(Ok(got))) => Outcome { got, error: None },
                        Ok(Ok(Err(e))) => Outcome {
                            got: Vec::new(),
                            error: Some(e.to_string()),
                        },
                        _ => {
                            t.abort();
                            Outcome {
                                got: Vec::new(),
                                error: Some("did not finish in 30 s".into()),
                            }
                        }
                    };
                    all.push(outcome);
                }
                Ok(all)
            }
        }
    }
}

/// The offset at a stream's end, from one plain read (every server answers
/// it; not every one knows `offset=now`).
async fn stream_end(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<String> {
    let mut s = crate::append::connect(addr).await?;
    let end = crate::readers::get(&mut s, &format!("{path}?offset=-1"))
        .await?
        .next_offset
        .ok_or_else(|| anyhow::anyhow!("no Stream-Next-Offset from {path}"))?;
    Ok(crate::readers::escape(&end))
}

fn gather(
    outcomes: &[Outcome],
    written: &[(u64, u64)],
    expected: usize,
    window: Duration,
    rss_kib: (u64, u64),
) -> Fanned {
    let (mut from_send, mut from_answer) = (Vec::new(), Vec::new());
    let (mut short, mut first_error) = (0, None);
    for o in outcomes {
        if o.got.len() < expected || !in_order(&o.got) {
            short += 1;
            first_error = first_error.or_else(|| o.error.clone());
        }
        let (s, a) = latencies(&o.got, written);
        from_send.extend(s);
        from_answer.extend(a);
    }
    Fanned {
        from_send: Summary::from_latencies(from_send, short, window),
        from_answer: Summary::from_latencies(from_answer, short, window),
        rss_kib,
        first_error,
    }
}

/// Stamps rise with every append, so a reader's must too.
fn in_order(got: &[(u32, u32)]) -> bool {
    got.windows(2).all(|w| w[0].0 < w[1].0)
}

/// Delivery latencies from `(sent, received)` records: from each append's
/// send, and from its answer (`written`, from [`write_stamped`]; a reader
/// may receive an event before its writer has the answer: 0 then; a stamp
/// not in `written` was answered as it was sent).
fn latencies(records: &[(u32, u32)], written: &[(u64, u64)]) -> (Vec<u32>, Vec<u32>) {
    let mut from_send = Vec::with_capacity(records.len());
    let mut from_answer = Vec::with_capacity(records.len());
    for &(sent, got) in records {
        from_send.push(got.saturating_sub(sent));
        let answered = written
            .binary_search_by_key(&u64::from(sent), |w| w.0)
            .map_or(u64::from(sent), |k| written[k].1);
        from_answer.push(u64::from(got).saturating_sub(answered).min(u32::MAX as u64) as u32);
    }
    (from_send, from_answer)
}

fn per_reader_kib(f: &Fanned, readers: usize) -> f64 {
    f.rss_kib.1.saturating_sub(f.rss_kib.0) as f64 / readers.max(1) as f64
}

fn fanout_line(label: &str, args: &FanoutArgs, f: &Fanned) -> String {
    let ms = |us: u64| us as f64 / 1000.0;
    let (s, a) = (&f.from_send, &f.from_answer);
    let why = f
        .first_error
        .as_ref()
        .map(|e| format!("; first short reader: {e}"))
        .unwrap_or_default();
    format!(
        "{label}: {} readers, {} events at {}/s: answer-to-receive p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms; send-to-receive p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms  ({} deliveries, {:.0}/s over the writer's {:.1} s, {} readers short{why}); RSS {} -> {} KiB, {:.1} KiB per reader",
        args.readers,
        args.rate * args.seconds,
        args.rate,
        ms(a.p50_us),
        ms(a.p99_us),
        ms(a.max_us),
        ms(s.p50_us),
        ms(s.p99_us),
        ms(s.max_us),
        s.requests,
        s.rps(),
        s.elapsed.as_secs_f64(),
        s.errors,
        f.rss_kib.0,
        f.rss_kib.1,
        per_reader_kib(f, args.readers),
    )
}

fn table(args: &FanoutArgs, rows: &[(String, Fanned)]) -> String {
    let mut out = format!(
        "{} readers × {} appends/s, {} s, {} client\n\n| system | answer→receive p50 / p99 / max | send→receive p50 / p99 | deliveries | received/s | readers short | RSS per idle reader |\n|---|---|---|---:|---:|---:|---:|\n",
        args.readers,
        args.rate,
        args.seconds,
        if args.client == "hyper" || args.http2_connections > 0 { "hyper" } else { "lean" }
    );
    let ms = |us: u64| format!("{:.1}", us as f64 / 1000.0);
    for (name, f) in rows {
        let (a, s) = (&f.from_answer, &f.from_send);
        let memory = if f.rss_kib == (0, 0) {
            "–".to_owned()
        } else {
            format!("{:.1} KiB", per_reader_kib(f, args.readers))
        };
        out.push_str(&format!(
            "| {name} | {} / {} / {} ms | {} / {} ms | {} | {:.0} | {} | {memory} |\n",
            ms(a.p50_us),
            ms(a.p99_us),
            ms(a.max_us),
            ms(s.p50_us),
            ms(s.p99_us),
            s.requests,
            s.rps(),
            s.errors,
        ));
    }
    out
}

/// A fresh edge's memory per parked long-poll (memory the SSE readers freed
/// would hide what the waiters take).
async fn long_poll_memory(args: &FanoutArgs) -> anyhow::Result<()> {
    let pair = Pair::start(&args.bins).await?;
    let edge = pair.edge_addr;
    let path = "/v1/stream/fanout";
    let status = request(edge, "PUT", path, "text/plain", Bytes::new()).await?;
    anyhow::ensure!(status == 201, "create: {status}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let base = pair.edge_rss_kib();
    let mut pollers = Vec::with_capacity(args.long_pollers);
    let via = Readers::open(edge, args.http2_connections).await?;
    for i in 0..args.long_pollers {
        let via = via.clone();
        pollers.push(tokio::spawn(async move {
            let req = Request::get(format!(
                "{path}?offset=now&live=long-poll&timeout_ms=60000&cursor=1"
            ))
            .body(Full::new(Bytes::new()))?;
            let resp = via.send(i, req).await?;
            let status = resp.status().as_u16();
            resp.into_body().collect().await?;
            anyhow::Ok(status)
        }));
    }
    wait_metric(edge, "ds_edge_long_polls_waiting", args.long_pollers as i64).await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let waiting = pair.edge_rss_kib();
    let flights = metric(edge, "ds_edge_long_poll_flights").await?;
    println!(
        "edge memory per waiting long-poller: {:.1} KiB (RSS {} -> {} KiB for {} waiters, {} upstream long-poll)",
        waiting.saturating_sub(base) as f64 / args.long_pollers as f64,
        base,
        waiting,
        args.long_pollers,
        flights
    );
    let status = request(edge, "POST", path, "text/plain", Bytes::from("0\n")).await?;
    anyhow::ensure!(status < 300, "append: {status}");
    for p in pollers {
        let _ = p.await;
    }
    pair.stop().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latency_counts_from_the_answer_and_never_below_zero() {
        let written = [(100, 150), (200, 260)];
        let (send, answer) = latencies(&[(100, 170), (200, 240), (300, 310)], &written);
        assert_eq!(send, [70, 40, 10]);
        assert_eq!(answer, [20, 0, 10], "received before its answer: 0");
    }

    #[test]
    fn a_reader_out_of_order_or_short_counts_as_short() {
        let good = Outcome {
            got: vec![(1, 5), (2, 6)],
            error: None,
        };
        let swapped = Outcome {
            got: vec![(2, 5), (1, 6)],
            error: None,
        };
        let short = Outcome {
            got: vec![(1, 5)],
            error: Some("closed".into()),
        };
        let f = gather(
            &[good, swapped, short],
            &[],
            2,
            Duration::from_secs(1),
            (0, 0),
        );
        assert_eq!(f.from_send.errors, 2);
        assert_eq!(f.first_error.as_deref(), Some("closed"));
    }
}
