//! `HEAD {stream}`: the stream's state without its bytes. HEAD is not a read
//! for the sliding TTL. It sees every append acknowledged before it was
//! sent (in a region too: it waits for the owner's round, `region::vouch`).

use axum::body::Body;
use axum::extract::Request;
use axum::http::Response;
use axum::response::IntoResponse;
use shared::headers as h;
use shared::offset::Offset;

use super::error::ApiError;
use super::reading::{check_incarnation, set, stream_headers};
use super::request::rfc3339;
use super::Shared;
use crate::core::config::Expiry;

pub async fn head(state: Shared, path: String, req: Request) -> Response<Body> {
    // "A `HEAD` sees every append acknowledged before it was sent": in a
    // region, only while this store still owns its partition, which the
    // bucket confirms (`region::vouch`; nothing to confirm for one origin).
    if let Err(e) = state.store.vouch().await {
        return ApiError::from(e).into_response();
    }
    let view = match state.store.find(&path) {
        Ok(view) => view,
        Err(e) => return ApiError::from(e).into_response(),
    };
    if let Err(e) = check_incarnation(&view, req.headers()) {
        return e.into_response();
    }
    let tail = view.end();
    let mut resp = Response::new(Body::empty());
    stream_headers(&mut resp, &view);
    set(&mut resp, "content-type", &*view.config.content_type);
    set(&mut resp, h::STREAM_NEXT_OFFSET, Offset(tail.next));
    if tail.closed {
        set(&mut resp, h::STREAM_CLOSED, "true");
    }
    set(&mut resp, h::STREAM_RETAINED_OFFSET, Offset(tail.retained));
    if view.is_public() {
        set(&mut resp, h::STREAM_PUBLIC, "true");
    }
    if let Some((snapshot, _)) = view.bootstrap_snapshot() {
        set(
            &mut resp,
            h::STREAM_SNAPSHOT_OFFSET,
            Offset(snapshot.offset),
        );
        set(&mut resp, h::STREAM_SNAPSHOT_DIGEST, snapshot.digest);
    }
    match view.config.expiry {
        Expiry::Never => {}
        Expiry::IdleSecs(s) => set(&mut resp, h::STREAM_TTL, s),
        Expiry::At(ms) => set(&mut resp, h::STREAM_EXPIRES_AT, rfc3339(ms)),
    }
    set(&mut resp, h::MAX_REQUEST_BYTES, state.config.max_body);
    set(&mut resp, h::MAX_SNAPSHOT_BYTES, state.config.max_snapshot);
    set(&mut resp, "cache-control", "no-store");
    resp
}
