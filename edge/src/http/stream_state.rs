//! What the origin said of a stream a moment ago (its `offset=now` answer):
//! incarnation, end, closed, content type, and the headers every answer
//! about the stream shares. Catch-up reads cut from chunks and chunk fills
//! from the bucket need it to give the origin's own headers.

use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, StatusCode};
use shared::content_type::{is_json, is_media_type, NDJSON};
use shared::headers as h;
use shared::offset::Offset;

use super::Shared;
use crate::metrics;

/// Streams whose state is kept, at most this many.
pub const STREAM_STATES: u64 = 100_000;

/// How long the edge answers from a stream's state without asking again:
/// within it a read that stops short of the known end needs no request to
/// the origin (a read reaching the end always asks). Deletes, recreations
/// and retention void it at once (the invalidation feed); this bounds only
/// how old the end it knows may be.
pub const STATE_FRESH: Duration = Duration::from_secs(1);

#[derive(Clone, Debug)]
pub struct StreamState {
    pub incarnation: String,
    pub tail: u64,
    /// Reads before this answer 410 (`Stream-Retained-Offset`; 0 when the
    /// answer has none).
    pub retained: u64,
    /// When it was asked (see `core::cover`).
    pub mark: crate::core::cover::Mark,
    pub closed: bool,
    /// A JSON stream (its reads are shaped by the origin's JSON mode).
    pub json: bool,
    /// The origin reads this JSON stream as NDJSON (cut anywhere, the chunk
    /// bytes as they are); in its array mode it reshapes them.
    pub ndjson_reads: bool,
    /// The content type of the stream's chunks.
    pub chunk_type: String,
    /// The `offset=now` answer's headers.
    pub headers: HeaderMap,
}

/// Streams' recent states: one origin request per stream per
/// [`STATE_FRESH`] however many readers (concurrent misses share one).
pub struct StreamStates(moka::future::Cache<String, Arc<StreamState>>);

impl Default for StreamStates {
    fn default() -> Self {
        StreamStates(
            moka::future::Cache::builder()
                .max_capacity(STREAM_STATES)
                .time_to_live(STATE_FRESH)
                .build(),
        )
    }
}

impl StreamStates {
    /// The state from within the last [`STATE_FRESH`] while the
    /// invalidation feed covers it, or asked now.
    pub async fn recent(&self, state: &Shared, path: &str) -> Option<Arc<StreamState>> {
        if let Some(kept) = state.feed.covered(&self.0, path, path, |s| s.mark).await {
            state.metrics.cache_hit(crate::metrics::Kept::State, 0);
            return Some(kept);
        }
        state.metrics.cache_miss(crate::metrics::Kept::State, 0);
        self.0
            .try_get_with_by_ref(path, async {
                fetch(state, path).await.map(Arc::new).ok_or(())
            })
            .await
            .ok()
    }

    /// The state asked now (and kept for the next readers).
    pub async fn refresh(&self, state: &Shared, path: &str) -> Option<Arc<StreamState>> {
        let fresh = Arc::new(fetch(state, path).await?);
        self.0.insert(path.to_owned(), Arc::clone(&fresh)).await;
        Some(fresh)
    }
}

/// The stream's state now, from the origin (`None` for a refusal).
async fn fetch(state: &Shared, path: &str) -> Option<StreamState> {
    let mark = state.feed.mark();
    let now = state
        .upstream
        .get(
            &format!("{path}?offset=now"),
            HeaderMap::new(),
            metrics::Upstream::Forward,
        )
        .await
        .ok()?;
    if now.status != StatusCode::OK {
        return None;
    }
    let content_type = now.header(http::header::CONTENT_TYPE)?;
    let json = is_json(content_type) || is_media_type(content_type, NDJSON);
    state.ends.learn(path, &now.headers);
    Some(StreamState {
        incarnation: now.header(h::STREAM_INCARNATION)?.to_owned(),
        tail: now
            .header(h::STREAM_NEXT_OFFSET)
            .and_then(Offset::parse)?
            .bytes(),
        retained: now
            .header(h::STREAM_RETAINED_OFFSET)
            .and_then(Offset::parse)
            .map_or(0, Offset::bytes),
        mark,
        closed: now.header(h::STREAM_CLOSED) == Some("true"),
        json,
        ndjson_reads: is_media_type(content_type, NDJSON),
        chunk_type: if json {
            NDJSON.to_owned()
        } else {
            content_type.to_owned()
        },
        headers: now.headers,
    })
}
