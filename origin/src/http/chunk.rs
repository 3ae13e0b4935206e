//! `GET {stream}/incarnation/{token}/chunk/{offset}`: a cacheable chunk.
//!
//! The answer holds the bytes from `offset` to the next 4 MiB boundary of the
//! chunk grid, or to the end of the stream. It is marked `Stream-Immutable`
//! (and cacheable for a year) exactly when it can never change: it reaches
//! the boundary, or it ends at the end of a closed stream. Any other answer
//! ends at the open end of the stream and is `no-store`. Chunks are byte
//! ranges of the log, so a JSON stream's chunk is NDJSON in every read mode
//! and may end inside a message.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Response, StatusCode};
use axum::response::IntoResponse;
use shared::content_type::NDJSON;
use shared::error::ErrorCode;
use shared::etag::{if_none_match_hits, read_etag};
use shared::headers as h;
use shared::offset::Offset;

use super::error::ApiError;
use super::reading::{set, stream_headers};
use super::Shared;
use crate::store::StoreError;

/// Cache-Control of an answer that never changes.
pub const IMMUTABLE: &str = "public, max-age=31536000, immutable";

pub async fn chunk(
    state: Shared,
    stream: String,
    token: String,
    offset: String,
    req: Request,
) -> Response<Body> {
    let has_query = req.uri().query().is_some();
    let if_none_match = req
        .headers()
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    run(
        &state,
        &stream,
        &token,
        &offset,
        has_query,
        if_none_match.as_deref(),
    )
    .await
    .unwrap_or_else(IntoResponse::into_response)
}

/// The checks every cacheable URL (`{stream}/incarnation/{token}/…/{offset}`)
/// makes, in this order: no query (400), an offset (400) and a token (400)
/// of the forms this server gives, the stream (404), its incarnation (412).
pub fn open_cacheable(
    state: &Shared,
    stream: &str,
    token: &str,
    offset: &str,
    has_query: bool,
) -> Result<(std::sync::Arc<crate::store::StreamView>, Offset), ApiError> {
    if has_query {
        return Err(ApiError::bad("a cacheable URL takes no query"));
    }
    let start = Offset::parse(offset).ok_or_else(|| {
        ApiError::Invalid(
            ErrorCode::InvalidOffset,
            format!("{offset:?} is not an offset this server gives"),
        )
    })?;
    if !token_form_ok(token) {
        return Err(ApiError::bad(format!(
            "{token:?} is not an incarnation token this server gives"
        )));
    }
    let view = state.store.find(stream)?;
    if *view.incarnation != *token {
        return Err(ApiError::Store(StoreError::mismatch(&view)));
    }
    view.touch(state.store.clock().now_ms());
    Ok((view, start))
}

/// Whether a token has the form this server gives (`{id hex}-{16 hex}`).
pub fn token_form_ok(token: &str) -> bool {
    let hex = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    matches!(token.split_once('-'), Some((id, rand)) if hex(id) && id.len() <= 16 && rand.len() == 16 && hex(rand))
}

async fn run(
    state: &Shared,
    stream: &str,
    token: &str,
    offset: &str,
    has_query: bool,
    if_none_match: Option<&str>,
) -> Result<Response<Body>, ApiError> {
    let (view, start) = open_cacheable(state, stream, token, offset, has_query)?;
    let tail = view.end();
    if start.bytes() > tail.next {
        return Err(ApiError::OffsetBeyondTail { tail: tail.next });
    }
    if start.bytes() < tail.retained {
        return Err(ApiError::Gone {
            retained: tail.retained,
        });
    }
    let boundary = start.next_chunk_boundary().bytes();
    let end = boundary.min(tail.next);
    let closed_end = tail.closed && end == tail.next;
    let immutable = end == boundary || closed_end;
    let etag = read_etag(&view.incarnation, start, Offset(end), closed_end);
    let not_modified = if_none_match.is_some_and(|inm| if_none_match_hits(inm, &etag));
    let mut resp = if not_modified {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        let bytes = view.read(start.bytes(), end).await?;
        state.metrics.served(bytes.len());
        Response::new(Body::from(bytes))
    };
    stream_headers(&mut resp, &view);
    let content_type = if view.is_json() {
        NDJSON
    } else {
        &*view.config.content_type
    };
    set(&mut resp, http::header::CONTENT_TYPE, content_type);
    set(&mut resp, h::STREAM_OFFSET, start);
    set(&mut resp, h::STREAM_NEXT_OFFSET, Offset(end));
    if closed_end {
        set(&mut resp, h::STREAM_CLOSED, "true");
    }
    if immutable {
        set(&mut resp, h::STREAM_IMMUTABLE, "true");
    }
    set(
        &mut resp,
        http::header::CACHE_CONTROL,
        if immutable { IMMUTABLE } else { "no-store" },
    );
    set(&mut resp, http::header::ETAG, etag);
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::token_form_ok;

    #[test]
    fn token_forms() {
        assert!(token_form_ok("1f-0123456789abcdef"));
        assert!(!token_form_ok("1f-0123456789ABCDEF"));
        assert!(!token_form_ok("1f0123456789abcdef"));
        assert!(!token_form_ok("-0123456789abcdef"));
        assert!(!token_form_ok("x-0123456789abcdef"));
    }
}
