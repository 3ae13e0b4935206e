//! `POST {stream}/incarnation/{token}/restore`: rolls incarnation `token`
//! of the stream back to `Stream-Restore-Offset` (decision 0029).
//!
//! The answer (200) names the new incarnation (`Stream-Incarnation`), the
//! one it replaced (`Stream-Previous-Incarnation`), the point
//! (`Stream-Inherited-Offset`: below it, what a reader of the old
//! incarnation read stays true) and the new end (`Stream-Next-Offset`,
//! and `Stream-Closed` when still closed). The token in the URL is the
//! precondition: a rollback retried after it landed answers 412, whose
//! headers show the incarnation that replaced it. Access as for an append.
//!
//! A JSON stream is rolled back between messages only (as it is forked):
//! the handler reads the byte before the point, which the writer thread
//! does not do.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Response, StatusCode};
use axum::response::IntoResponse;
use shared::error::ErrorCode;
use shared::headers as h;
use shared::offset::Offset;

use super::error::ApiError;
use super::reading::{set, stream_headers};
use super::request::text;
use super::Shared;

pub async fn restore(state: Shared, path: String, token: String, req: Request) -> Response<Body> {
    match rollback(&state, path, token, req.headers()).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn rollback(
    state: &Shared,
    path: String,
    token: String,
    headers: &axum::http::HeaderMap,
) -> Result<Response<Body>, ApiError> {
    let Some(v) = text(headers, &h::STREAM_RESTORE_OFFSET)? else {
        return Err(ApiError::bad(
            "a rollback names its point in Stream-Restore-Offset",
        ));
    };
    let to = Offset::parse(v)
        .ok_or_else(|| {
            ApiError::Invalid(
                ErrorCode::InvalidOffset,
                format!("{v:?} is not an offset this server gives"),
            )
        })?
        .bytes();
    let view = state.store.find(&path)?;
    let end = view.end();
    if view.is_json()
        && to > end.retained
        && to <= end.next
        && view.read(to - 1, to).await?.as_ref() != b"\n"
    {
        return Err(ApiError::Invalid(
            ErrorCode::InvalidOffset,
            "a JSON stream is rolled back between messages".to_owned(),
        ));
    }
    let restored = state.store.restore(path, token, to).await?;
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::OK;
    stream_headers(&mut r, &restored.view);
    set(&mut r, h::STREAM_NEXT_OFFSET, Offset(restored.end.next));
    if restored.end.closed {
        set(&mut r, h::STREAM_CLOSED, "true");
    }
    set(&mut r, "cache-control", "no-store");
    Ok(r)
}
