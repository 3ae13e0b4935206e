//! `conn-cost`: where an idle reader's memory goes. Opens N raw HTTP/1.1
//! connections to a fresh edge (or its origin) in one state each run and
//! prints the server's RSS growth per connection:
//! - `silent`: accepted, nothing sent (the server only peeks for HTTP/2);
//! - `idle`: one small read answered, the connection kept alive, idle;
//! - `sse`: an SSE tail at `offset=now`, its first events read;
//! - `long-poll`: a long-poll at `offset=now` parked for 60 s.
//!
//! The difference between the states is the cost of each layer: the
//! accepted socket, the HTTP connection with its buffers, the tail.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::edge::{request, rss_kib, Binaries, Pair};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pub bins: Binaries,
    /// Connections held open at once in each state.
    #[arg(long, default_value_t = 4000)]
    pub connections: usize,
}

const PATH: &str = "/v1/stream/conn-cost";

/// The request a connection in `state` sends (none when silent).
fn request_head(state: &str) -> Option<String> {
    let query = match state {
        "silent" => return None,
        "idle" => "offset=-1",
        "sse" => "offset=now&live=sse",
        _ => "offset=now&live=long-poll&timeout_ms=60000&cursor=1",
    };
    Some(format!(
        "GET {PATH}?{query} HTTP/1.1\r\nhost: bench\r\n\r\n"
    ))
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    for server in ["edge", "origin"] {
        for state in ["silent", "idle", "sse", "long-poll"] {
            // A fresh pair each time: memory one state freed does not hide
            // what the next takes.
            let pair = Pair::start(&args.bins).await?;
            let (addr, pid) = match server {
                "edge" => (pair.edge_addr, pair.edge.id().unwrap_or(0)),
                _ => (pair.origin_addr, pair.origin.id().unwrap_or(0)),
            };
            let status = request(addr, "PUT", PATH, "text/plain", Bytes::new()).await?;
            anyhow::ensure!(status == 201, "create: {status}");
            tokio::time::sleep(Duration::from_millis(300)).await;
            let base = rss_kib(pid);
            let mut held = Vec::with_capacity(args.connections);
            for _ in 0..args.connections {
                let mut c = TcpStream::connect(addr).await?;
                if let Some(head) = request_head(state) {
                    c.write_all(head.as_bytes()).await?;
                }
                held.push(c);
            }
            // Every answer that comes at once has begun (the long-polls'
            // do not): read what each was sent so far.
            if state == "idle" || state == "sse" {
                let mut buf = vec![0u8; 16 * 1024];
                for c in &mut held {
                    let n =
                        tokio::time::timeout(Duration::from_secs(10), c.read(&mut buf)).await??;
                    anyhow::ensure!(n > 0, "{server} {state}: closed");
                }
            }
            tokio::time::sleep(Duration::from_millis(1000)).await;
            let now = rss_kib(pid);
            println!(
                "{server} {state:>9}: {:5.1} KiB per connection (RSS {base} -> {now} KiB for {})",
                now.saturating_sub(base) as f64 / args.connections.max(1) as f64,
                args.connections
            );
            drop(held);
            pair.stop().await;
        }
    }
    Ok(())
}
