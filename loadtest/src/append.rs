//! Closed-loop appenders: each writer has its own connection and stream, and
//! sends its next append as soon as the last one is answered.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1;
use hyper::Request;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::stats::Summary;

#[derive(clap::Args, Clone)]
pub struct Args {
    /// Server address (host:port).
    #[arg(long)]
    pub addr: SocketAddr,
    /// Stream paths are `{prefix}{i}`.
    #[arg(long, default_value = "/v1/stream/bench-")]
    pub prefix: String,
    #[command(flatten)]
    pub workload: Workload,
    /// Send producer headers (exactly-once appends).
    #[arg(long)]
    pub producer: bool,
    /// Create the streams first (PUT).
    #[arg(long, default_value_t = true)]
    pub create: bool,
    #[arg(long, default_value = "append")]
    pub label: String,
}

/// The shape of an append workload, shared by `append` and `compare-append`.
#[derive(clap::Args, Clone, Debug)]
pub struct Workload {
    /// Streams, one closed-loop writer each.
    #[arg(long, default_value_t = 500)]
    pub streams: usize,
    /// Bytes per append.
    #[arg(long, default_value_t = 256)]
    pub body: usize,
    /// Seconds measured, after the warm-up.
    #[arg(long, default_value_t = 10)]
    pub seconds: u64,
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
}

pub type Sender = http1::SendRequest<Full<Bytes>>;

pub async fn connect(addr: SocketAddr) -> anyhow::Result<Sender> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    Ok(sender)
}

/// HTTP/1.1 requires a Host header, and some servers (Node's) refuse a
/// request without one; this client's connections do not add it.
pub fn with_host(mut req: Request<Full<Bytes>>) -> Request<Full<Bytes>> {
    req.headers_mut()
        .entry(hyper::header::HOST)
        .or_insert(hyper::header::HeaderValue::from_static("127.0.0.1"));
    req
}

pub async fn send(sender: &mut Sender, req: Request<Full<Bytes>>) -> anyhow::Result<u16> {
    let req = with_host(req);
    sender.ready().await?;
    let resp = sender.send_request(req).await?;
    let status = resp.status().as_u16();
    resp.into_body().collect().await?;
    Ok(status)
}

pub async fn run(args: &Args) -> anyhow::Result<Summary> {
    let body = Bytes::from(vec![b'a'; args.workload.body]);
    let stop = Arc::new(AtomicBool::new(false));
    let measuring = Arc::new(AtomicBool::new(false));
    // Connect and create every stream first, all at once, so that every
    // writer runs for the whole measured window.
    let mut setup = Vec::with_capacity(args.workload.streams);
    for i in 0..args.workload.streams {
        let (addr, path, create) = (args.addr, format!("{}{i}", args.prefix), args.create);
        setup.push(tokio::spawn(async move {
            let mut sender = connect(addr).await?;
            if create {
                let req = Request::put(&path)
                    .header("content-type", "application/octet-stream")
                    .body(Full::new(Bytes::new()))?;
                let status = send(&mut sender, req).await?;
                anyhow::ensure!(status < 300, "creating {path}: {status}");
            }
            anyhow::Ok((sender, path))
        }));
    }
    let mut ready = Vec::with_capacity(args.workload.streams);
    for s in setup {
        ready.push(s.await??);
    }
    let mut tasks = Vec::with_capacity(args.workload.streams);
    for (i, (mut sender, path)) in ready.into_iter().enumerate() {
        let (body, stop, measuring, producer, addr) = (
            body.clone(),
            stop.clone(),
            measuring.clone(),
            args.producer,
            args.addr,
        );
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::with_capacity(64 * 1024);
            let mut errors = 0u64;
            let mut first_error = None;
            let mut seq = 0u64;
            let producer_id = format!("bench-{i}");
            while !stop.load(Ordering::Relaxed) {
                let mut req =
                    Request::post(&path).header("content-type", "application/octet-stream");
                if producer {
                    req = req
                        .header("producer-id", &producer_id)
                        .header("producer-epoch", "0")
                        .header("producer-seq", seq.to_string());
                }
                let req = req.body(Full::new(body.clone())).expect("request");
                let t = Instant::now();
                match send(&mut sender, req).await {
                    Ok(s) if s < 300 => {
                        seq += 1;
                        if measuring.load(Ordering::Relaxed) {
                            lat.push(t.elapsed().as_micros().min(u32::MAX as u128) as u32);
                        }
                    }
                    failed => {
                        if first_error.is_none() {
                            first_error = Some(match failed {
                                Ok(s) => format!("HTTP {s}"),
                                Err(e) => format!("{e:#}"),
                            });
                        }
                        errors += 1;
                        if let Ok(s) = connect(addr).await {
                            sender = s;
                        }
                    }
                }
            }
            (lat, errors, first_error)
        }));
    }
    crate::stats::measure_window(
        tasks,
        &measuring,
        &stop,
        Duration::from_secs(args.workload.warmup),
        Duration::from_secs(args.workload.seconds),
    )
    .await
}
