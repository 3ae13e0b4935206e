//! The edge's side of the origin's invalidation feed: one task per edge
//! tails `GET /_invalidations` (`shared::invalidation`) and moves the
//! [`Vouch`] that every answer from memory asks first
//! (`docs/decisions/0006-edge-invalidation.md`).
//!
//! The task starts from the feed's end (`offset=now`), then long-polls from
//! each answer's `Stream-Next-Offset`, naming the feed's incarnation. An
//! answer that says events were missed (`412`: the origin restarted; `410`:
//! it forgot events this edge had not read; `416`, or a body that is not the
//! feed's) is a loss: nothing kept before it is served again, and nothing at
//! all until the feed is followed again from its end. A request that fails
//! (no connection, no answer within the poll and its grace) loses nothing:
//! the origin keeps the events, and the edge asks again from the same
//! position; meanwhile the feed falls silent, and past `feed_stale_after`
//! nothing is served from memory until it answers again. The feed counts as
//! answered only by an answer that reached its end (fewer events than an
//! answer can carry): an edge catching up on many events serves nothing from
//! memory until it has read them all.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, StatusCode};
use parking_lot::Mutex;
use shared::headers as h;
use shared::invalidation::{decode, stream_id, Change, MAX_EVENTS_PER_ANSWER, PATH};
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

    /// What `cache` keeps under `key` (about the stream at `stream`) while
    /// the feed vouches for it; what it no longer vouches for is dropped,
    /// so the caller asks the origin again.
    pub async fn vouched<V>(
        &self,
        cache: &moka::future::Cache<String, V>,
        key: &str,
        stream: &str,
        mark: impl Fn(&V) -> Mark,
    ) -> Option<V>
    where
        V: Clone + Send + Sync + 'static,
    {
        let kept = cache.get(key).await?;
        if self.vouches(stream, mark(&kept)) {
            return Some(kept);
        }
        cache.invalidate(key).await;
        None
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
            let failed = match step {
                Step::Next(next) => {
                    at = Some(next);
                    retry = RETRY_FIRST;
                    continue;
                }
                Step::Failed => true,
                Step::Missed => false,
            };
            if !failed && at.take().is_some() {
                self.vouch.lock().lost();
                self.metrics.feed_lost();
                tracing::warn!("the invalidation feed missed events; answering from the origin until it is followed again");
            }
            tokio::select! {
                _ = tokio::time::sleep(retry) => {}
                _ = closing.wait_for(|c| *c) => return,
            }
            retry = (retry * 2).min(self.poll);
        }
    }

    /// A change this edge made through the origin itself (a delete, a
    /// create, a snapshot or retention it forwarded and the origin
    /// acknowledged): the same as its event, so the client that made it
    /// reads its own change through this edge at once.
    pub fn touch(&self, path: &str) {
        self.vouch.lock().event(stream_id(path));
    }

    /// One request of the feed: from its end (`at` none) or from a position
    /// of one incarnation.
    async fn step(&self, at: Option<(HeaderValue, u64)>) -> Step {
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
        let answer = match tokio::time::timeout(
            limit,
            self.upstream.get(&pq, headers, metrics::Upstream::Feed),
        )
        .await
        {
            Ok(Ok(a)) => a,
            _ => return Step::Failed,
        };
        if answer.status.is_server_error() {
            return Step::Failed;
        }
        let (Some(incarnation), Some(next)) = (
            answer.headers.get(h::STREAM_INCARNATION).cloned(),
            answer
                .header(h::STREAM_NEXT_OFFSET)
                .and_then(|n| n.parse::<u64>().ok()),
        ) else {
            return Step::Missed;
        };
        let events = match answer.status {
            StatusCode::OK => match decode(&answer.body) {
                Some(e) => e,
                None => return Step::Missed,
            },
            StatusCode::NO_CONTENT => Vec::new(),
            _ => return Step::Missed,
        };
        let mut vouch = self.vouch.lock();
        if at.is_none() {
            // Followed from its end: whatever was kept before is void, and
            // everything asked from now on is covered by the events to come.
            vouch.lost();
        }
        for e in &events {
            // A creation voids nothing: the edge keeps nothing of a stream
            // that did not exist, and a recreation's delete came first.
            if e.change != Change::Created {
                vouch.event(e.stream);
            }
            self.metrics.invalidation();
        }
        if events.len() < MAX_EVENTS_PER_ANSWER {
            vouch.answered(Instant::now());
        }
        Step::Next((incarnation, next))
    }
}

/// What one request of the feed came to.
enum Step {
    /// Read up to this position of this incarnation.
    Next((HeaderValue, u64)),
    /// Events may have been missed (412, 410, 416, a body not the feed's).
    Missed,
    /// No answer (no connection, too slow, the origin's 5xx): ask again.
    Failed,
}
