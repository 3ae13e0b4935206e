//! `GET {stream}/incarnation/{token}/chunk/{offset}` (and snapshot URLs of
//! the same form): from the chunk cache, filled from the origin on a miss.
//! `If-None-Match` is answered here against the kept `ETag`. A query, a
//! `Range` or any other method goes to the origin.

use axum::body::Body;
use axum::response::IntoResponse;
use http::{Method, Request, Response};
use shared::etag::if_none_match_hits;

use super::error::EdgeError;
use super::forward::forward;
use super::Shared;
use crate::answer::Answer;
use crate::chunk_cache::Miss;
use crate::upstream::UpstreamError;

pub async fn chunk(state: &Shared, req: Request<Body>) -> Response<Body> {
    if req.method() != Method::GET
        || req.uri().query().is_some()
        || req.headers().contains_key(http::header::RANGE)
    {
        return forward(state, req).await;
    }
    let if_none_match = req
        .headers()
        .get(http::header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match state.chunks.get(req.uri().path()).await {
        Ok((answer, _)) => respond(state, &answer, if_none_match.as_deref()),
        Err(miss) => match &*miss {
            Miss::NotImmutable(answer) => respond(state, answer, if_none_match.as_deref()),
            Miss::Upstream(e) => upstream_failed(e),
        },
    }
}

fn respond(state: &Shared, answer: &Answer, if_none_match: Option<&str>) -> Response<Body> {
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
    };
    tracing::warn!(error = e, "chunk fill failed");
    EdgeError::Busy("the origin cannot be reached").into_response()
}
