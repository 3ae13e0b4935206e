//! Everything the edge does not answer itself goes to the origin as it
//! came, and the origin's answer comes back as it streams: statuses,
//! headers and bodies intact (only the headers of one connection are
//! dropped), so producer semantics, errors and `ETag`s are the origin's.

use std::convert::Infallible;

use axum::body::Body;
use axum::response::IntoResponse;
use futures::StreamExt;
use http::{Request, Response};
use http_body_util::BodyStream;

use super::error::EdgeError;
use super::Shared;
use crate::metrics;

pub async fn forward(state: &Shared, req: Request<Body>) -> Response<Body> {
    match state
        .upstream
        .forward(req, metrics::Upstream::Forward)
        .await
    {
        Ok(resp) => resp.map(Body::new),
        Err(e) => EdgeError::from(e).into_response(),
    }
}

/// A live answer (SSE) passed through: like [`forward`], but its body ends
/// when the edge shuts down, so stopping never waits for a reader.
pub async fn forward_live(state: &Shared, req: Request<Body>) -> Response<Body> {
    let resp = match state
        .upstream
        .forward(req, metrics::Upstream::Forward)
        .await
    {
        Ok(resp) => resp,
        Err(e) => return EdgeError::from(e).into_response(),
    };
    let state = state.clone();
    resp.map(move |body| {
        let frames = BodyStream::new(body)
            .take_until(async move { state.closed().await })
            .filter_map(|frame| async move {
                match frame {
                    Ok(f) => f.into_data().ok().map(Ok::<_, Infallible>),
                    Err(_) => None,
                }
            });
        Body::from_stream(frames)
    })
}
