//! What one page of `GET /_streams` costs at the run's stream count:
//! pages of `limit` streams (100) from random cursors among the run's
//! streams, one at a time over one keep-alive connection, timed from
//! send to the whole body. The origin walks a range of its ordered index
//! from the cursor, so a page at a million streams should cost what one
//! at a thousand does.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;

use crate::append::connect;
use crate::pool::exchange;

/// The pages measured.
#[derive(Clone, Debug, Default)]
pub struct Pages {
    pub pages: usize,
    pub limit: usize,
    pub p50: Duration,
    pub p99: Duration,
    pub max: Duration,
    /// Streams per page on average (a page near the end holds fewer).
    pub mean_streams: f64,
    /// Pages answered with another status than 200, or unreadable.
    pub failures: usize,
}

/// A query value (the run's paths have no reserved character but `/`).
fn query_value(s: &str) -> String {
    s.replace('/', "%2F")
}

/// Asks `pages` pages of `limit` streams under `prefix`, each after the
/// path of a random one of the `streams` streams (`{prefix}{i}`).
pub async fn measure(
    addr: SocketAddr,
    prefix: &str,
    streams: usize,
    pages: usize,
    limit: usize,
) -> anyhow::Result<Pages> {
    let mut sender = connect(addr).await?;
    // xorshift, seeded from the clock: cursors spread over the streams.
    let mut x = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_nanos() as u64
        | 1;
    let mut took = Vec::with_capacity(pages);
    let (mut listed, mut failures) = (0usize, 0usize);
    for _ in 0..pages {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let after = format!("{prefix}{}", x as usize % streams.max(1));
        let uri = format!(
            "/_streams?prefix={}&after={}&limit={limit}",
            query_value(prefix),
            query_value(&after)
        );
        let req = Request::get(uri).body(Full::new(Bytes::new()))?;
        let started = Instant::now();
        let answer = exchange(&mut sender, req).await?;
        took.push(started.elapsed());
        let page: Option<serde_json::Value> = (answer.status == 200)
            .then(|| serde_json::from_slice(&answer.body).ok())
            .flatten();
        match page.as_ref().and_then(|p| p["streams"].as_array()) {
            Some(s) => listed += s.len(),
            None => failures += 1,
        }
    }
    took.sort();
    let at = |q: f64| {
        took.get(((took.len() as f64 * q) as usize).min(took.len().saturating_sub(1)))
            .copied()
            .unwrap_or_default()
    };
    Ok(Pages {
        pages,
        limit,
        p50: at(0.50),
        p99: at(0.99),
        max: took.last().copied().unwrap_or_default(),
        mean_streams: listed as f64 / pages.max(1) as f64,
        failures,
    })
}
