//! The fan-out's readers through hyper's client: a task and an HTTP/1.1
//! connection each, or streams shared on a few HTTP/2 connections. What
//! `sse-fanout` used before the lean client (`lean_sse`); kept for HTTP/2
//! readers and to show what the client itself costs (`--client hyper`).

use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use tokio::task::JoinHandle;

use crate::edge::{wait_metric, Readers};
use crate::fanout::FanoutArgs;
use crate::sse_framing::Lines;

/// A hyper reader's task: its `(sent, received)` records.
pub type ReaderTask = JoinHandle<anyhow::Result<Vec<(u32, u32)>>>;

/// Opens `args.readers` SSE readers of `uri` at `addr`; each collects
/// `(sent, received)` until it has `expected`. `trickle(i)` names a metric
/// to wait on (reaching `i + 1`) after the `i`th reader.
pub async fn open(
    addr: SocketAddr,
    uri: &str,
    args: &FanoutArgs,
    expected: usize,
    clock: Instant,
    trickle: impl Fn(usize) -> Option<&'static str>,
) -> anyhow::Result<Vec<ReaderTask>> {
    let via = Readers::open(addr, args.http2_connections).await?;
    let mut readers = Vec::with_capacity(args.readers);
    for i in 0..args.readers {
        let (via, uri) = (via.clone(), uri.to_owned());
        readers.push(tokio::spawn(async move {
            let resp = via
                .send(i, Request::get(uri).body(Full::new(Bytes::new()))?)
                .await?;
            anyhow::ensure!(resp.status() == 200, "SSE: {}", resp.status());
            let mut body = resp.into_body();
            let mut lines = Lines::default();
            let mut got: Vec<(u32, u32)> = Vec::with_capacity(expected);
            while got.len() < expected {
                let Some(frame) = body.frame().await else {
                    break;
                };
                let Ok(data) = frame?.into_data() else {
                    continue;
                };
                let now = clock.elapsed().as_micros().min(u32::MAX as u128) as u32;
                lines.feed(&data, |sent| {
                    got.push((sent.min(u32::MAX as u64) as u32, now));
                });
            }
            anyhow::Ok(got)
        }));
        if let Some(series) = trickle(i) {
            wait_metric(addr, series, i as i64 + 1).await?;
        }
    }
    Ok(readers)
}
