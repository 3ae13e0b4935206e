//! Every refusal the edge gives by itself, mapped to a status, headers and
//! the shared JSON error body in this one place. Refusals of the origin pass
//! through unchanged; these are only the edge's own (the origin cannot be
//! reached, a bound is reached, the edge is stopping). Causes are logged,
//! never shown.

use axum::body::Body;
use axum::response::IntoResponse;
use http::{HeaderValue, Response, StatusCode};
use shared::error::{ErrorBody, ErrorCode};

use crate::collapse::WaitError;
use crate::upstream::UpstreamError;

#[derive(Debug, thiserror::Error)]
pub enum EdgeError {
    #[error(transparent)]
    Upstream(#[from] UpstreamError),
    #[error(transparent)]
    Wait(#[from] WaitError),
    #[error("{0}")]
    Busy(&'static str),
}

/// An error answer: the shared body, `no-store`, and the headers the
/// origin's refusals carry for browsers (`nosniff`, CORP, and CORS, so a
/// page on another origin can read a 401 or a 503 and act on it instead of
/// seeing a network error).
pub fn error_response(code: ErrorCode, message: impl Into<String>) -> Response<Body> {
    let body = ErrorBody::new(code, message)
        .with_request_id(shell::request_id::current_id())
        .to_json();
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(code.status()).expect("valid status");
    let h = resp.headers_mut();
    h.insert("content-type", HeaderValue::from_static("application/json"));
    h.insert("cache-control", HeaderValue::from_static("no-store"));
    shared::headers::insert_safety(h);
    shared::headers::insert_cors(h);
    resp
}

/// A 503 the reader may send again after a second.
fn unavailable(message: &str) -> Response<Body> {
    let mut r = error_response(ErrorCode::Unavailable, message);
    r.headers_mut()
        .insert("retry-after", HeaderValue::from_static("1"));
    r
}

impl IntoResponse for EdgeError {
    fn into_response(self) -> Response<Body> {
        match &self {
            // The client's own body went silent while it was forwarded.
            EdgeError::Upstream(e) if shell::BodyIdle::find(e).is_some() => {
                let mut r = error_response(
                    ErrorCode::RequestTimeout,
                    "the request body stopped arriving",
                );
                r.headers_mut()
                    .insert("connection", HeaderValue::from_static("close"));
                r
            }
            EdgeError::Upstream(e) => {
                tracing::warn!(error = %e, source = ?std::error::Error::source(e), "origin request failed");
                unavailable("the origin cannot be reached")
            }
            EdgeError::Wait(WaitError::Full) => unavailable("too many long-polls are waiting"),
            EdgeError::Wait(WaitError::Closing) => unavailable("the edge is shutting down"),
            EdgeError::Wait(e) => {
                tracing::warn!(error = %e, "shared long-poll failed");
                unavailable("the origin did not answer the long-poll")
            }
            EdgeError::Busy(why) => unavailable(why),
        }
    }
}
