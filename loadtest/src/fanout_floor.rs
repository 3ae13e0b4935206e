//! The fan-out floor: what this machine's loopback TCP and the load client
//! allow at all. Bare threads write each event, one SSE frame of the shape
//! the servers send (`event: data`, `data: <stamp>`), to every reader's bare
//! socket: no HTTP, no stream, no hub. The readers are the same lean readers
//! (`lean_sse`) that time the servers, so a server's latency over this
//! floor's in the same run is what the server adds.
//!
//! The writer is a process of its own (`ds-load floor-writer`), as a server
//! is: 16,000 readers are 32,000 descriptors in one process, over this
//! machine's limit of 20,000. Writer and readers read the wall clock from
//! one base the parent hands over.

use std::io::{BufRead, Write};
use std::net::TcpStream;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::Command;

use crate::lean_sse::{self, wall_us, Clock, Outcome, Target};

#[derive(clap::Args)]
pub struct WriterArgs {
    /// Readers to accept.
    #[arg(long)]
    pub readers: usize,
    /// Events a second.
    #[arg(long)]
    pub rate: u64,
    /// Events in all.
    #[arg(long)]
    pub total: usize,
    /// Writer threads, each its share of the sockets.
    #[arg(long, default_value_t = 2)]
    pub threads: usize,
    /// The shared clock's base, microseconds since the Unix epoch.
    #[arg(long)]
    pub base_us: u64,
}

/// One floor round: the writer process, `readers` lean readers on
/// `client_threads`, `total` events at `rate`. Returns each reader's outcome,
/// the writes that found a socket full (a frame not written whole), and how
/// long the writing took.
pub async fn round(
    readers: usize,
    rate: u64,
    total: usize,
    client_threads: usize,
) -> anyhow::Result<(Vec<Outcome>, u64, Duration)> {
    let base_us = wall_us();
    let mut child = Command::new(std::env::current_exe()?)
        .args(["floor-writer", "--readers"])
        .arg(readers.to_string())
        .arg("--rate")
        .arg(rate.to_string())
        .arg("--total")
        .arg(total.to_string())
        .arg("--threads")
        .arg(client_threads.to_string())
        .arg("--base-us")
        .arg(base_us.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()?;
    let mut stdin = child.stdin.take().expect("piped");
    let mut lines = BufReader::new(child.stdout.take().expect("piped")).lines();
    // Every wait on the writer ends by the round's deadline.
    let deadline = Instant::now() + Duration::from_secs(120 + total as u64 / rate.max(1));
    let mut said = async || -> anyhow::Result<String> {
        tokio::time::timeout_at(deadline.into(), lines.next_line())
            .await
            .map_err(|_| anyhow::anyhow!("the floor's writer said nothing by the deadline"))??
            .ok_or_else(|| anyhow::anyhow!("the floor's writer ended early"))
    };
    let addr = said()
        .await?
        .strip_prefix("listening ")
        .ok_or_else(|| anyhow::anyhow!("the floor's writer named no address"))?
        .parse()?;
    let targets = (0..readers)
        .map(|_| Target {
            addr,
            request: None,
        })
        .collect();
    let reading = lean_sse::open(
        targets,
        total,
        client_threads,
        Clock::Wall { base_us },
        deadline,
    );
    anyhow::ensure!(
        said().await? == "accepted",
        "the floor's writer accepted no readers"
    );
    reading
        .all_open(readers, deadline)
        .await
        .map_err(|e| e.context("floor"))?;
    // As the servers' rounds do: let the readers settle first.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stdin.write_all(b"go\n").await?;
    let writing = Instant::now();
    let full = said()
        .await?
        .strip_prefix("full ")
        .ok_or_else(|| anyhow::anyhow!("the floor's writer did not finish"))?
        .parse()?;
    let window = writing.elapsed();
    let _ = child.wait().await;
    let outcomes = tokio::task::spawn_blocking(move || reading.finish()).await?;
    Ok((outcomes, full, window))
}

/// `ds-load floor-writer`: listens (printing `listening ADDR`), accepts
/// every reader (`accepted`), waits for `go` on stdin, writes every event,
/// and prints `full N`.
pub async fn writer(args: WriterArgs) -> anyhow::Result<()> {
    // Thousands of readers connect at once; std would listen with 128.
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind("127.0.0.1:0".parse()?)?;
    let listener = socket.listen(4096)?;
    println!("listening {}", listener.local_addr()?);
    let mut sockets = Vec::with_capacity(args.readers);
    while sockets.len() < args.readers {
        let (s, _) = listener.accept().await?;
        s.set_nodelay(true)?;
        let s = s.into_std()?;
        s.set_nonblocking(true)?;
        sockets.push(s);
    }
    println!("accepted");
    let mut go = String::new();
    tokio::task::spawn_blocking(move || std::io::stdin().lock().read_line(&mut go)).await??;
    let threads = args.threads.max(1);
    let mut shares: Vec<Vec<TcpStream>> = (0..threads).map(|_| Vec::new()).collect();
    for (i, s) in sockets.into_iter().enumerate() {
        shares[i % threads].push(s);
    }
    let start = Instant::now() + Duration::from_millis(10);
    let clock = Clock::Wall {
        base_us: args.base_us,
    };
    let writers: Vec<_> = shares
        .into_iter()
        .map(|mut share| {
            let (rate, total) = (args.rate, args.total);
            std::thread::spawn(move || write_events(&mut share, rate, total, start, clock))
        })
        .collect();
    let mut full = 0;
    for w in writers {
        full += w
            .join()
            .map_err(|_| anyhow::anyhow!("a floor writer panicked"))?;
    }
    println!("full {full}");
    Ok(())
}

/// Writes `total` events to every socket of `share`, the `k`th at `start +
/// k / rate`, each stamped with the microsecond its writing began.
fn write_events(
    share: &mut [TcpStream],
    rate: u64,
    total: usize,
    start: Instant,
    clock: Clock,
) -> u64 {
    let period = Duration::from_micros(1_000_000 / rate.max(1));
    let mut full = 0;
    for k in 0..total {
        let at = start + period * k as u32;
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let frame = format!("event: data\ndata: {}\n\n", clock.now_us());
        for s in share.iter_mut() {
            if !matches!(s.write(frame.as_bytes()), Ok(n) if n == frame.len()) {
                full += 1;
            }
        }
    }
    full
}
