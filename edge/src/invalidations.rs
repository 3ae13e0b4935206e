//! The edge's side of the origin's invalidation feed: one task per edge
//! tails `GET /_invalidations` (`shared::invalidation`) and moves the
//! [`Vouch`] that every answer from memory asks first
//! (`docs/decisions/0006-edge-invalidation.md`).
//!
//! The task starts from the feed's end (`offset=now`), then long-polls from
//! each answer's `Stream-Next-Offset`, naming the feed's incarnation. Any
//! answer but an event list or a timeout (`412`: the origin restarted; `410`:
//! it forgot events this edge had not read; an error; no answer within the
//! poll and its grace) is a loss: nothing kept before it is served again,
//! and nothing at all until the feed is followed again from its end.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, StatusCode};
use parking_lot::Mutex;
use shared::headers as h;
use shared::invalidation::{decode, stream_id, PATH};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::Limits;
use crate::core::vouch::{Mark, Vouch};
use crate::metrics::{self, Metrics};
use crate::upstream::Upstream;

/// The first wait after a loss before the feed is asked again; it doubles
/// up to the feed's poll.
const RETRY_FIRST: Duration = Duration::from_millis(50);

pub struct Feed {
    vouch: Mutex<Vouch>,
    upstream: Upstream,
    metrics: Arc<Metrics>,
    poll: Duration,
}

impl Feed {
    pub fn new(upstream: Upstream, metrics: Arc<Metrics>, limits: &Limits) -> Arc<Feed> {
        Arc::new(Feed {
            vouch: Mutex::new(Vouch::new(limits.feed_stale_after)),
            upstream,
            metrics,
            poll: limits.feed_poll,
        })
    }

    /// The mark of something about to be asked of the origin.
    pub fn mark(&self) -> Mark {
        self.vouch.lock().mark()
    }

    /// Whether something kept about the stream at `path`, marked `mark`,
    /// may still be served (counted when not).
    pub fn vouches(&self, path: &str, mark: Mark) -> bool {
        let id = stream_id(path);
        let ok = self.vouch.lock().vouches(id, mark, Instant::now());
        if !ok {
            self.metrics.not_vouched();
        }
        ok
    }

    pub fn is_live(&self) -> bool {
        self.vouch.lock().is_live(Instant::now())
    }

    /// Follows the feed until the edge shuts down.
    pub async fn follow(self: Arc<Self>, mut closing: watch::Receiver<bool>) {
        let mut retry = RETRY_FIRST;
        let mut at: Option<(HeaderValue, u64)> = None;
        loop {
            let step = tokio::select! {
                s = self.step(at.clone()) => s,
                _ = closing.wait_for(|c| *c) => return,
            };
            match step {
                Some(next) => {
                    at = Some(next);
                    retry = RETRY_FIRST;
                }
                None => {
                    if at.take().is_some() {
                        self.vouch.lock().lost();
                        self.metrics.feed_lost();
                        tracing::warn!("the invalidation feed was lost; answering from the origin until it is followed again");
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(retry) => {}
                        _ = closing.wait_for(|c| *c) => return,
                    }
                    retry = (retry * 2).min(self.poll);
                }
            }
        }
    }

    /// One request of the feed: from its end (`at` none) or from a position
    /// of one incarnation. The next position, or `None` for a loss.
    async fn step(&self, at: Option<(HeaderValue, u64)>) -> Option<(HeaderValue, u64)> {
        let mut headers = HeaderMap::new();
        let pq = match &at {
            None => format!("{PATH}?offset=now&timeout_ms=0"),
            Some((incarnation, pos)) => {
                headers.insert(h::STREAM_INCARNATION, incarnation.clone());
                format!("{PATH}?offset={pos}&timeout_ms={}", self.poll.as_millis())
            }
        };
        // An answer takes the poll at most; a feed silent for longer is lost.
        let limit = self.poll + self.poll / 2 + Duration::from_millis(250);
        let answer = tokio::time::timeout(
            limit,
            self.upstream.get(&pq, headers, metrics::Upstream::Feed),
        )
        .await
        .ok()?
        .ok()?;
        let incarnation = answer.headers.get(h::STREAM_INCARNATION)?.clone();
        let next: u64 = answer.header(h::STREAM_NEXT_OFFSET)?.parse().ok()?;
        let events = match answer.status {
            StatusCode::OK => decode(&answer.body)?,
            StatusCode::NO_CONTENT => Vec::new(),
            _ => return None,
        };
        let mut vouch = self.vouch.lock();
        if at.is_none() {
            // Followed from its end: whatever was kept before is void, and
            // everything asked from now on is covered by the events to come.
            vouch.lost();
        }
        for e in &events {
            vouch.event(e.stream);
            self.metrics.invalidation();
        }
        vouch.answered(Instant::now());
        Some((incarnation, next))
    }
}
