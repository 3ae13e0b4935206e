//! `GET {stream}/incarnation/{token}/chunk/{offset}`: from the chunk cache, filled on a miss from the origin's
//! bucket when the edge reads it and the chunk is sealed there, from the
//! origin otherwise ([`fill`]). `If-None-Match` is answered here against
//! the kept `ETag`. A query, a `Range` or any other method goes to the
//! origin.

use axum::body::Body;
use axum::response::IntoResponse;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use shared::etag::{if_none_match_hits, read_etag};
use shared::headers as h;
use shared::object_keys::chunk_key;
use shared::offset::{Offset, CHUNK_BYTES};
use shared::paths::{classify, Target};

use super::error::EdgeError;
use super::forward::forward;
use super::Shared;
use crate::answer::Answer;
use crate::chunk_cache::Miss;
use crate::metrics;
use crate::upstream::UpstreamError;

/// Cache-Control of an answer that never changes (the origin's).
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

/// Fills a missing chunk: from the bucket when it can give exactly the
/// origin's answer, from the origin otherwise, with the credential of the
/// request that missed (the access gate verified it for this stream).
pub async fn fill(
    state: &Shared,
    path: &str,
    authorization: Option<HeaderValue>,
) -> Result<Answer, UpstreamError> {
    if let Some(answer) = from_bucket(state, path).await {
        return Ok(answer);
    }
    let mut headers = HeaderMap::new();
    if let Some(a) = authorization {
        headers.insert(http::header::AUTHORIZATION, a);
    }
    state
        .upstream
        .get(path, headers, metrics::Upstream::Chunk)
        .await
}

/// The answer the origin would give, made from a sealed 4 MiB object. Only
/// a chunk that ends before the stream's known end is made here: it is
/// complete and cannot carry `Stream-Closed`. A closed stream's short last
/// chunk, and any doubt, go to the origin.
async fn from_bucket(state: &Shared, path: &str) -> Option<Answer> {
    let objects = state.objects.as_ref()?;
    let Target::Chunk {
        stream,
        token,
        offset,
    } = classify(path)
    else {
        return None;
    };
    let start = Offset::parse(offset)?.bytes();
    let aligned = start - start % CHUNK_BYTES;
    // An offset from the URL: the last chunk of the range has no end.
    let end = aligned.checked_add(CHUNK_BYTES)?;
    let stream_state = state.states.recent(state, stream).await?;
    if stream_state.incarnation != token
        || end >= stream_state.tail
        || start < stream_state.retained
    {
        return None;
    }
    let bytes = objects
        .get(&chunk_key(stream, token, Offset(aligned)))
        .await?;
    if bytes.len() as u64 != CHUNK_BYTES {
        return None;
    }
    let mut headers = stream_state.headers.clone();
    // What only a read answer says: its range, its shape (`Vary`), and
    // where the stream now begins.
    for name in [
        h::STREAM_NEXT_OFFSET,
        h::STREAM_UP_TO_DATE,
        h::STREAM_CLOSED,
        h::STREAM_CURSOR,
        h::STREAM_RETAINED_OFFSET,
        http::header::ETAG,
        http::header::CACHE_CONTROL,
        http::header::CONTENT_TYPE,
        http::header::CONTENT_LENGTH,
        http::header::VARY,
    ] {
        headers.remove(name);
    }
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_str(&stream_state.chunk_type).ok()?,
    );
    headers.insert(h::STREAM_OFFSET, Offset(start).header_value());
    headers.insert(h::STREAM_NEXT_OFFSET, Offset(end).header_value());
    headers.insert(h::STREAM_IMMUTABLE, HeaderValue::from_static("true"));
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static(IMMUTABLE),
    );
    headers.insert(
        http::header::ETAG,
        HeaderValue::try_from(read_etag(token, Offset(start), Offset(end), false)).ok()?,
    );
    Some(Answer {
        status: StatusCode::OK,
        headers,
        // The cache weighs what an answer holds: a slice of the object
        // would keep all 4 MiB of it alive under a small weight.
        body: match (start - aligned) as usize {
            0 => bytes,
            from => Bytes::copy_from_slice(&bytes[from..]),
        },
    })
}

/// Whether a request for an immutable URL (a chunk, a snapshot) may be
/// answered from memory: a plain `GET`; a query, a `Range` or any other
/// method goes to the origin.
pub(super) fn answerable_from_memory(req: &Request<Body>) -> bool {
    req.method() == Method::GET
        && req.uri().query().is_none()
        && !req.headers().contains_key(http::header::RANGE)
}

pub async fn chunk(state: &Shared, req: Request<Body>) -> Response<Body> {
    if !answerable_from_memory(&req) {
        return forward(state, req).await;
    }
    let if_none_match = req
        .headers()
        .get(http::header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let path = req.uri().path();
    let authorization = req.headers().get(http::header::AUTHORIZATION).cloned();
    match state
        .chunks
        .get_or_fill(path, fill(state, path, authorization))
        .await
    {
        Ok((answer, _)) => respond(state, &answer, if_none_match.as_deref()),
        Err(miss) => match &*miss {
            Miss::NotImmutable(answer) => respond(state, answer, if_none_match.as_deref()),
            Miss::Upstream(e) => upstream_failed(e),
        },
    }
}

/// A kept answer for one reader: `304` when its `If-None-Match` names it.
pub(super) fn respond(
    state: &Shared,
    answer: &Answer,
    if_none_match: Option<&str>,
) -> Response<Body> {
    let etag = answer.header(http::header::ETAG);
    let hit = answer.status.is_success()
        && matches!((if_none_match, etag), (Some(inm), Some(tag)) if if_none_match_hits(inm, tag));
    if hit {
        return answer.not_modified();
    }
    state.metrics.served(answer.body.len());
    answer.to_response()
}

fn upstream_failed(e: &UpstreamError) -> Response<Body> {
    // The error is shared by every reader of the miss; each logs and answers.
    let e = match e {
        UpstreamError::Uri(_) => "bad uri",
        UpstreamError::Connect(_) => "connect",
        UpstreamError::Body(_) => "body",
        UpstreamError::Multiplexed(_) => "waiting request",
        UpstreamError::Gateway(_) => "gateway",
    };
    tracing::warn!(error = e, "chunk fill failed");
    EdgeError::Busy("the origin cannot be reached").into_response()
}
