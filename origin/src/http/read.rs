//! `GET {stream}?offset=…`: catch-up reads.
//!
//! Cache-Control: an answer with bytes names an immutable range of the log,
//! so caches may keep it (`public, max-age=60, stale-while-revalidate=300`,
//! the protocol's advice; `private` once credentials exist). An empty answer
//! at the open end changes with the next append and is `no-store`, as is
//! every `offset=now` answer.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Response, StatusCode};
use axum::response::IntoResponse;
use shared::etag::if_none_match_hits;
use shared::headers as h;
use shared::offset::{Offset, ReadFrom};
use shared::params::ReadParams;

use super::error::ApiError;
use super::reading::{
    negotiate, open_for_read, read_cut, read_slice, resolve_start, set, shape_body, slice_etag,
    slice_headers, stream_headers, vary_by_accept,
};
use super::Shared;

pub const CACHEABLE: &str = "public, max-age=60, stale-while-revalidate=300";

pub async fn read(state: Shared, path: String, req: Request, params: ReadParams) -> Response<Body> {
    run(&state, path, req, params)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn run(
    state: &Shared,
    path: String,
    req: Request,
    params: ReadParams,
) -> Result<Response<Body>, ApiError> {
    let view = open_for_read(state, &path, req.headers())?;
    let tail = view.end();
    let start = resolve_start(params.offset, &tail)?;
    let mode = negotiate(req.headers(), state.config.json_reads);
    let slice = read_slice(&view, start, params.max_bytes, tail, read_cut(&view, mode)).await?;
    let now = params.offset == ReadFrom::Now;
    let etag = (!now).then(|| slice_etag(&view, mode, &slice));
    let cache = if now || (slice.bytes.is_empty() && !slice.closed) {
        "no-store"
    } else {
        CACHEABLE
    };
    let not_modified = etag.as_deref().is_some_and(|tag| {
        req.headers()
            .get("if-none-match")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|inm| if_none_match_hits(inm, tag))
    });
    let (body, content_type) = shape_body(&view, mode, slice.bytes.clone());
    let mut resp = if not_modified {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else {
        state.metrics.served(body.len());
        Response::new(Body::from(body))
    };
    stream_headers(&mut resp, &view);
    vary_by_accept(&mut resp, &view);
    // Once retention moved, reads say where the stream now begins (the
    // edge's reads cut from chunks need it; HEAD always says it).
    if tail.retained > 0 {
        set(&mut resp, h::STREAM_RETAINED_OFFSET, Offset(tail.retained));
    }
    slice_headers(&mut resp, &slice);
    set(&mut resp, "content-type", content_type);
    set(&mut resp, "cache-control", cache);
    if let Some(tag) = etag {
        set(&mut resp, "etag", tag);
    }
    Ok(resp)
}
