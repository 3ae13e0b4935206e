//! Immutable chunk and snapshot answers, kept in memory and weighted by
//! their bytes.
//!
//! Keys are request paths (`{stream}/incarnation/{token}/chunk/{offset}`),
//! which name the incarnation: a stream deleted and created again has new
//! URLs, so nothing kept can be served as the new stream's bytes. A miss is
//! filled from the origin's bucket or from the origin; concurrent misses for
//! one key make one fill (moka runs one initializer per key and hands its result to every
//! caller that arrived meanwhile). Only answers the origin marks immutable
//! are kept (`core::cacheable`); any other answer goes to the readers that
//! asked for it and is forgotten.
//!
//! An answer kept is served only while the origin's invalidation feed
//! covers its stream (`invalidations`): after a delete, a recreate or
//! a retention change (or while the feed is lost) the next request asks the
//! origin again, so an edge never keeps serving what the origin refuses.

use std::sync::Arc;

use moka::future::Cache;

use shared::paths::{classify, Target};

use crate::answer::Answer;
use crate::core::cacheable::is_immutable;
use crate::core::cover::Mark;
use crate::invalidations::Feed;
use crate::metrics::Metrics;
use crate::upstream::UpstreamError;

/// Why a lookup did not produce a kept answer.
#[derive(Debug)]
pub enum Miss {
    /// The origin's answer may not be kept (a growing chunk, a 412, ...).
    NotImmutable(Answer),
    Upstream(UpstreamError),
}

/// Where a served answer came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Cache,
    Origin,
}

/// An answer kept, with the mark of when it was asked of the origin.
#[derive(Clone)]
struct Kept {
    answer: Arc<Answer>,
    mark: Mark,
}

#[derive(Clone)]
pub struct ChunkCache {
    cache: Cache<String, Kept>,
    metrics: Arc<Metrics>,
    feed: Arc<Feed>,
}

impl ChunkCache {
    pub fn new(capacity_bytes: u64, metrics: Arc<Metrics>, feed: Arc<Feed>) -> ChunkCache {
        let cache = Cache::builder()
            .max_capacity(capacity_bytes)
            .weigher(|key: &String, value: &Kept| {
                u32::try_from(key.len() + value.answer.weight()).unwrap_or(u32::MAX)
            })
            .build();
        ChunkCache {
            cache,
            metrics,
            feed,
        }
    }

    /// The answer for `path`, from memory, or from `fill` (see
    /// `http::chunk::fill`) when it is missing.
    pub async fn get_or_fill(
        &self,
        path: &str,
        fill: impl std::future::Future<Output = Result<Answer, UpstreamError>>,
    ) -> Result<(Arc<Answer>, Source), Arc<Miss>> {
        if let Some(answer) = self.get(path).await {
            return Ok((answer, Source::Cache));
        }
        let entry = self
            .cache
            .entry_by_ref(path)
            .or_try_insert_with(async move {
                let mark = self.feed.mark();
                let answer = fill.await.map_err(Miss::Upstream)?;
                if is_immutable(answer.status, &answer.headers) {
                    Ok(Kept {
                        answer: Arc::new(answer),
                        mark,
                    })
                } else {
                    Err(Miss::NotImmutable(answer))
                }
            })
            .await?;
        let kept = entry.value();
        let source = if entry.is_fresh() {
            self.metrics
                .cache_miss(stream_of(path).1, kept.answer.body.len());
            Source::Origin
        } else {
            self.metrics
                .cache_hit(stream_of(path).1, kept.answer.body.len());
            Source::Cache
        };
        Ok((Arc::clone(&kept.answer), source))
    }

    /// The answer kept for `path`, while the feed covers it.
    pub async fn get(&self, path: &str) -> Option<Arc<Answer>> {
        let (stream, kind) = stream_of(path);
        let kept = self
            .feed
            .covered(&self.cache, path, stream, |k| k.mark)
            .await?;
        self.metrics.cache_hit(kind, kept.answer.body.len());
        Some(kept.answer)
    }

    /// Keeps an answer asked of the origin after `mark` (an answer that
    /// streamed through: see `http::snapshot`).
    pub async fn insert(&self, path: &str, answer: Answer, mark: Mark) {
        self.metrics
            .cache_miss(stream_of(path).1, answer.body.len());
        let kept = Kept {
            answer: Arc::new(answer),
            mark,
        };
        self.cache.insert(path.to_owned(), kept).await;
    }

    /// The mark to stamp on an answer about to be asked of the origin.
    pub fn mark(&self) -> Mark {
        self.feed.mark()
    }

    /// Bytes held (an estimate until moka's pending work runs) and entries.
    pub fn usage(&self) -> (u64, u64) {
        (self.cache.weighted_size(), self.cache.entry_count())
    }
}

/// The stream a chunk or snapshot URL belongs to, and which of the two
/// it is (for `/metrics`).
fn stream_of(path: &str) -> (&str, crate::metrics::Kept) {
    match classify(path) {
        Target::Chunk { stream, .. } => (stream, crate::metrics::Kept::Chunk),
        Target::IncarnationSnapshot { stream, .. } => (stream, crate::metrics::Kept::Snapshot),
        _ => (path, crate::metrics::Kept::Snapshot),
    }
}
