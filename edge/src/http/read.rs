//! `GET {stream}?offset=…`: catch-up reads, cut from cached chunks where
//! the range reaches complete chunks (`core::catch_up`), from the origin
//! otherwise.
//!
//! The edge learns a lower bound of each stream's tail from the answers it
//! passes on ([`EndHints`]); only a read that starts in a chunk known to
//! be complete is made from chunks, with the headers and `ETag` the origin
//! would give. It needs the stream's state (incarnation, end, closed: the
//! origin's `offset=now` answer, which also resets the sliding TTL as every
//! read does), asked at most once per [`STATE_FRESH`](super::stream_state::STATE_FRESH) per stream, and again
//! for a read that reaches the known end. JSON streams
//! (their reads are shaped by the origin's JSON mode), `offset=now`,
//! `consistency=leader`, conditional requests and requests naming an
//! incarnation always go to the origin.
//!
//! A read with `min_next_offset` (decision 0025) is made from chunks only
//! with a state whose end is at or past it: a known state below it is
//! asked again, and if the origin's answer is still below it (a state
//! asked before the write, shared with this read), the read goes to the
//! origin as it came, floor and all.

use axum::body::Body;
use bytes::{Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use moka::sync::Cache;
use shared::headers as h;
use shared::offset::{Offset, ReadFrom, CHUNK_BYTES};
use shared::params::{floor_reached, Consistency, ReadParams};

use super::chunk::fill;
use super::forward::forward;
use super::Shared;
use crate::chunk_cache::Miss;
use crate::core::catch_up::{plan, worth_planning, Plan, CACHEABLE};
use crate::core::collapse_key::canonical_accept;

/// Streams whose tail the edge has seen, at most this many.
pub const END_HINTS: u64 = 100_000;

/// A lower bound of each stream's tail, learned from answers passing by,
/// per incarnation: an answer about another incarnation than the one noted
/// replaces the hint instead of raising it. A hint only decides whether a
/// read is worth planning from chunks; what is served comes from the
/// stream's state and its chunks, both covered (`core::cover`).
pub struct EndHints(Cache<String, Hint>);

#[derive(Clone)]
struct Hint {
    incarnation: std::sync::Arc<str>,
    tail: u64,
}

impl Default for EndHints {
    fn default() -> Self {
        EndHints(Cache::new(END_HINTS))
    }
}

impl EndHints {
    /// Notes the `Stream-Next-Offset` of an answer about `path`.
    pub fn learn(&self, path: &str, headers: &HeaderMap) {
        let Some(next) = headers
            .get(h::STREAM_NEXT_OFFSET)
            .and_then(|v| v.to_str().ok())
            .and_then(Offset::parse)
        else {
            return;
        };
        // Only the chunk the tail is in matters (`worth_planning`): a tail
        // in the first chunk, most streams' and most appends', costs
        // nothing, and a stream's entry changes once per chunk.
        let chunk = next.bytes() / CHUNK_BYTES;
        if chunk == 0 {
            return;
        }
        let Some(incarnation) = headers
            .get(h::STREAM_INCARNATION)
            .and_then(|v| v.to_str().ok())
        else {
            return;
        };
        let known = self.0.get(path);
        let raise = match &known {
            Some(k) if &*k.incarnation == incarnation => chunk > k.tail / CHUNK_BYTES,
            _ => true,
        };
        if raise {
            let hint = Hint {
                incarnation: incarnation.into(),
                tail: next.bytes(),
            };
            self.0.insert(path.to_owned(), hint);
        }
    }

    fn get(&self, path: &str) -> u64 {
        self.0.get(path).map_or(0, |h| h.tail)
    }
}

/// Request headers that send a read to the origin.
const ORIGIN_ONLY: [&str; 3] = ["if-none-match", "stream-incarnation", "authorization"];

pub async fn read(state: &Shared, req: Request<Body>, params: &ReadParams) -> Response<Body> {
    // `-1` is the retained offset, which the stream's state knows.
    let start = match params.offset {
        ReadFrom::Start | ReadFrom::At(_) => Some(params.offset),
        ReadFrom::Now => None,
    };
    let hint = |from: &ReadFrom| match from {
        ReadFrom::At(o) => o.bytes(),
        _ => 0,
    };
    let eligible = params.consistency == Consistency::Local
        && !ORIGIN_ONLY.iter().any(|n| req.headers().contains_key(*n));
    let path = req.uri().path().to_owned();
    let arrays = canonical_accept(req.headers()) == Some(shared::negotiate::JSON);
    if let Some(from) = start.filter(|s| eligible && worth_planning(hint(s), state.ends.get(&path)))
    {
        if let Some(resp) = from_chunks(state, &path, from, params, arrays).await {
            return resp;
        }
    }
    let resp = forward(state, req).await;
    state.ends.learn(&path, resp.headers());
    resp
}

/// The answer made from chunks, or `None` when the origin should answer.
/// `arrays`: the reader's `Accept` asks for JSON arrays.
async fn from_chunks(
    state: &Shared,
    path: &str,
    from: ReadFrom,
    params: &ReadParams,
    arrays: bool,
) -> Option<Response<Body>> {
    let (max, floor) = (params.max_bytes, params.floor);
    let recent = state.states.recent(state, path).await?;
    let start = match from {
        ReadFrom::At(o) => o.bytes(),
        _ => recent.retained,
    };
    // Before retention the origin answers 410, in its own words.
    if start < recent.retained {
        return None;
    }
    // A JSON stream read as NDJSON is its chunks' bytes, cut anywhere, as
    // a binary stream is; read as JSON arrays (the origin's default, or
    // what this reader accepts), the origin reshapes it. The headers here
    // are those of the origin's default, so an NDJSON read of a stream
    // whose default is arrays goes to the origin too.
    if recent.json && (arrays || !recent.ndjson_reads) {
        return None;
    }
    // A read that stops short of the known end is the same whatever was
    // appended since; one that reaches it needs the end as it is now, and
    // one whose floor is past the known end a state that holds its write.
    let fresh;
    let stream = if start.saturating_add(max) < recent.tail && floor_reached(floor, recent.tail) {
        recent.as_ref()
    } else {
        fresh = state.states.refresh(state, path).await?;
        fresh.as_ref()
    };
    if start < stream.retained
        || stream.incarnation != recent.incarnation
        || !floor_reached(floor, stream.tail)
    {
        return None;
    }
    let plan = plan(start, max, stream.tail, stream.closed)?;
    let incarnation = stream.incarnation.as_str();
    let mut parts = Vec::with_capacity(plan.pieces.len());
    for piece in &plan.pieces {
        let url = format!(
            "{path}/incarnation/{incarnation}/chunk/{}",
            Offset(piece.chunk)
        );
        let body = match state
            .chunks
            .get_or_fill(&url, fill(state, &url, None))
            .await
        {
            Ok((a, _)) if a.header(h::STREAM_INCARNATION) == Some(incarnation) => a.body.clone(),
            Ok(_) => return None,
            Err(miss) => match &*miss {
                Miss::NotImmutable(a)
                    if a.status == StatusCode::OK
                        && a.header(h::STREAM_INCARNATION) == Some(incarnation) =>
                {
                    a.body.clone()
                }
                _ => return None,
            },
        };
        let (from, to) = (
            (piece.from - piece.chunk) as usize,
            (piece.to - piece.chunk) as usize,
        );
        if body.len() < to {
            return None;
        }
        parts.push(body.slice(from..to));
    }
    // One piece (the common case) goes out without a copy.
    let body = if parts.len() == 1 {
        parts.pop().expect("one piece")
    } else {
        let mut all = BytesMut::with_capacity((plan.end - plan.start) as usize);
        for p in &parts {
            all.extend_from_slice(p);
        }
        all.freeze()
    };
    state.metrics.served(body.len());
    Some(respond(stream.headers.clone(), &plan, incarnation, body))
}

/// The origin's headers for this read: those of its `offset=now` answer
/// that every read shares, and the range's own.
fn respond(mut headers: HeaderMap, plan: &Plan, incarnation: &str, body: Bytes) -> Response<Body> {
    for name in [
        h::STREAM_UP_TO_DATE,
        h::STREAM_CLOSED,
        h::STREAM_CURSOR,
        http::header::ETAG,
        http::header::CACHE_CONTROL,
        http::header::CONTENT_LENGTH,
    ] {
        headers.remove(name);
    }
    headers.insert(h::STREAM_NEXT_OFFSET, Offset(plan.end).header_value());
    if plan.up_to_date {
        headers.insert(h::STREAM_UP_TO_DATE, HeaderValue::from_static("true"));
    }
    if plan.closed {
        headers.insert(h::STREAM_CLOSED, HeaderValue::from_static("true"));
    }
    if let Ok(tag) = HeaderValue::try_from(plan.etag(incarnation)) {
        headers.insert(http::header::ETAG, tag);
    }
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static(CACHEABLE),
    );
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::OK;
    *resp.headers_mut() = headers;
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(incarnation: &str, next: u64) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(h::STREAM_NEXT_OFFSET, Offset(next).header_value());
        h.insert(h::STREAM_INCARNATION, incarnation.parse().unwrap());
        h
    }

    #[test]
    fn a_hint_belongs_to_one_incarnation() {
        let hints = EndHints::default();
        let c = CHUNK_BYTES;
        hints.learn("/s", &answer("1-a", 100));
        assert_eq!(hints.get("/s"), 0, "the first chunk is not worth a hint");
        hints.learn("/s", &answer("1-a", 2 * c + 5));
        assert_eq!(hints.get("/s"), 2 * c + 5);
        hints.learn("/s", &answer("1-a", c + 5));
        assert_eq!(
            hints.get("/s"),
            2 * c + 5,
            "a lower tail of the same incarnation"
        );
        // Recreated: the new incarnation's tail replaces the old one's.
        hints.learn("/s", &answer("2-b", c + 7));
        assert_eq!(hints.get("/s"), c + 7);
        hints.learn("/s", &answer("2-b", 3 * c));
        assert_eq!(hints.get("/s"), 3 * c);
    }
}
