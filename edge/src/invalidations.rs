//! The edge's side of the origin's invalidation feed: one task per edge
//! partitions_followed `GET /_invalidations` (`shared::invalidation`) and moves the
//! [`Cover`] that every answer from memory asks first
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
//!
//! A region of several partitions (`shared::partition`) has a feed per
//! partition, each served by the partition's owner: the first answer names
//! the count (`ds-region-partitions`), and the edge then partitions_followed each
//! (`partition=N`) on a task of its own. The feed counts as answered only
//! while every partition's has; a loss in any is a loss of all.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, HeaderValue, StatusCode};
use parking_lot::Mutex;
use shared::headers as h;
use shared::invalidation::{decode, stream_id, Change, MAX_EVENTS_PER_ANSWER, PATH};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::Limits;
use crate::core::cover::{Cover, Mark};
use crate::metrics::{self, Metrics};
use crate::upstream::Upstream;

/// The first wait after a loss before the feed is asked again; it doubles
/// up to the feed's poll.
const RETRY_FIRST: Duration = Duration::from_millis(50);

pub struct Feed {
    cover: Mutex<Cover>,
    upstream: Upstream,
    metrics: Arc<Metrics>,
    poll: Duration,
    /// The region's partition count as its feed last named it (1: none).
    partitions: watch::Sender<u32>,
    /// When each partition's feed last reached its end (None: not since
    /// it was followed from its end, or since a loss).
    answered: Mutex<Vec<Option<Instant>>>,
    /// Every partition's feed reached its end once (readiness: see
    /// `http::ready`).
    caught_up_once: std::sync::atomic::AtomicBool,
}

impl Feed {
    pub fn new(upstream: Upstream, metrics: Arc<Metrics>, limits: &Limits) -> Arc<Feed> {
        metrics.feed_partitions(1);
        Arc::new(Feed {
            cover: Mutex::new(Cover::new(limits.feed_stale_after)),
            upstream,
            metrics,
            poll: limits.feed_poll,
            partitions: watch::Sender::new(1),
            answered: Mutex::new(vec![None]),
            caught_up_once: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// The mark of something about to be asked of the origin.
    pub fn mark(&self) -> Mark {
        self.cover.lock().mark()
    }

    /// Whether something kept about the stream at `path`, marked `mark`,
    /// may still be served (counted when not).
    pub fn covers(&self, path: &str, mark: Mark) -> bool {
        let id = stream_id(path);
        let ok = self.cover.lock().covers(id, mark, Instant::now());
        if !ok {
            self.metrics.not_covered();
        }
        ok
    }

    /// What `cache` keeps under `key` (about the stream at `stream`) while
    /// the feed covers it; what it no longer covers is dropped,
    /// so the caller asks the origin again.
    pub async fn covered<V>(
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
        if self.covers(stream, mark(&kept)) {
            return Some(kept);
        }
        cache.invalidate(key).await;
        None
    }

    /// Whether every partition's feed has reached its end at least once
    /// since the edge started.
    pub fn caught_up_once(&self) -> bool {
        self.caught_up_once
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    pub fn is_live(&self) -> bool {
        self.cover.lock().is_live(Instant::now())
    }

    /// Follows the feed (every partition's) until the edge shuts down.
    pub async fn follow(self: Arc<Self>, closing: watch::Receiver<bool>) {
        let mut partitions_followed = tokio::task::JoinSet::new();
        let mut learned = self.partitions.subscribe();
        let mut followed = 0;
        loop {
            let count = *learned.borrow_and_update();
            for p in followed..count {
                partitions_followed.spawn(Arc::clone(&self).follow_partition(p, closing.clone()));
            }
            followed = followed.max(count);
            let mut closed = closing.clone();
            tokio::select! {
                changed = learned.changed() => if changed.is_err() { return },
                _ = closed.wait_for(|c| *c) => break,
            }
        }
        while partitions_followed.join_next().await.is_some() {}
    }

    /// Follows partition `p`'s feed until the edge shuts down.
    async fn follow_partition(self: Arc<Self>, p: u32, mut closing: watch::Receiver<bool>) {
        let mut retry = RETRY_FIRST;
        let mut at: Option<(HeaderValue, u64)> = None;
        loop {
            let step = tokio::select! {
                s = self.step(p, at.clone()) => s,
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
                self.answered.lock()[p as usize] = None;
                self.cover.lock().lost();
                self.metrics.feed_lost();
                tracing::warn!(partition = p, "the invalidation feed missed events; answering from the origin until it is followed again");
            }
            tokio::select! {
                _ = tokio::time::sleep(retry) => {}
                _ = closing.wait_for(|c| *c) => return,
            }
            retry = (retry * 2).min(self.poll);
        }
    }

    /// Partition `p`'s feed reached its end at `now`: the feed is answered
    /// as of the oldest of the partitions' last answers, once all have one.
    fn answered(&self, p: u32, now: Instant, cover: &mut Cover) {
        let mut answered = self.answered.lock();
        answered[p as usize] = Some(now);
        if let Some(oldest) = answered.iter().copied().collect::<Option<Vec<_>>>() {
            if let Some(at) = oldest.into_iter().min() {
                cover.answered(at);
                self.caught_up_once
                    .store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// The partition count the answers so far named (`Upstream` reads it
    /// off every answer, the feed's included), if more than known.
    fn learn(&self) {
        let count = self.upstream.partitions();
        if count > *self.partitions.borrow() {
            self.answered.lock().resize(count as usize, None);
            self.metrics.feed_partitions(count);
            self.partitions.send_replace(count);
        }
    }

    /// A change this edge made through the origin itself (a delete, a
    /// create, a snapshot or retention it forwarded and the origin
    /// acknowledged): the same as its event, so the client that made it
    /// reads its own change through this edge at once.
    pub fn touch(&self, path: &str) {
        self.cover.lock().event(stream_id(path));
    }

    /// One request of partition `p`'s feed: from its end (`at` none) or
    /// from a position of one incarnation.
    async fn step(&self, p: u32, at: Option<(HeaderValue, u64)>) -> Step {
        let mut headers = HeaderMap::new();
        let partition = if p == 0 {
            String::new()
        } else {
            format!("&partition={p}")
        };
        let pq = match &at {
            None => format!("{PATH}?offset=now&timeout_ms=0{partition}"),
            Some((incarnation, pos)) => {
                headers.insert(h::STREAM_INCARNATION, incarnation.clone());
                format!(
                    "{PATH}?offset={pos}&timeout_ms={}{partition}",
                    self.poll.as_millis()
                )
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
        self.learn();
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
        let mut cover = self.cover.lock();
        if at.is_none() {
            // Followed from its end: whatever was kept before is void, and
            // everything asked from now on is covered by the events to come.
            cover.lost();
        }
        for e in &events {
            // A creation voids nothing: the edge keeps nothing of a stream
            // that did not exist, and a recreation's delete came first.
            if e.change != Change::Created {
                cover.event(e.stream);
            }
            self.metrics.invalidation();
        }
        if events.len() < MAX_EVENTS_PER_ANSWER {
            self.answered(p, Instant::now(), &mut cover);
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
