//! Request bodies, bounded twice: each body by `max_body` (413), and all
//! bodies in memory together by the ingress budget (503 with `Retry-After`
//! when a request cannot get room in time). This is where the memory bound
//! for large and many concurrent bodies lives.
//!
//! A refused body is read to its end and dropped (up to a bound) before the
//! 413 goes out: a server that closes a connection with request bytes still
//! unread resets it, and a client that is still sending then sees a broken
//! pipe instead of the refusal (the "lingering close" of other servers).

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use tokio::sync::SemaphorePermit;

use super::error::ApiError;
use super::AppState;

/// A request body and the room it holds in the ingress budget.
pub struct BoundedBody<'a> {
    pub bytes: Bytes,
    _permit: Option<SemaphorePermit<'a>>,
}

pub async fn read_body(state: &AppState, req: Request) -> Result<BoundedBody<'_>, ApiError> {
    let limit = state.config.max_body;
    let declared = req
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        // A client that waits for `100 Continue` never sends this body.
        let waits = req
            .headers()
            .get(http::header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        if !waits {
            Box::pin(discard(req.into_body(), limit)).await;
        }
        return Err(ApiError::PayloadTooLarge { limit });
    }
    if declared == Some(0) {
        return Ok(BoundedBody {
            bytes: Bytes::new(),
            _permit: None,
        });
    }
    // Without a length, reserve room for the largest body.
    let permit = reserve(state, declared.unwrap_or(limit)).await?;
    let mut body: Body = req.into_body();
    let bytes = match gather(&mut body, limit).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            drop(permit);
            Box::pin(discard(body, limit)).await;
            return Err(ApiError::PayloadTooLarge { limit });
        }
        Err(e) => {
            return Err(ApiError::bad(format!(
                "could not read the request body: {e}"
            )))
        }
    };
    Ok(BoundedBody {
        bytes,
        _permit: Some(permit),
    })
}

/// The body's bytes, or `None` past `limit`. A body that arrives in one
/// frame (most small appends) is kept as that frame, without a copy or a
/// list of frames; a longer one is gathered into one buffer.
/// (Trailers are read past and dropped: no operation uses them.)
async fn gather(body: &mut Body, limit: u64) -> Result<Option<Bytes>, axum::Error> {
    let mut one: Option<Bytes> = None;
    let mut many = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame?.into_data() else {
            continue; // trailers
        };
        let len = one.as_ref().map_or(many.len(), Bytes::len) + data.len();
        if len as u64 > limit {
            return Ok(None);
        }
        match one.take() {
            None if many.is_empty() => one = Some(data),
            None => many.extend_from_slice(&data),
            Some(first) => {
                many.reserve(len);
                many.extend_from_slice(&first);
                many.extend_from_slice(&data);
            }
        }
        // A body of known length ends with its last byte: asking for the
        // end once more would cost another trip through the body's layers.
        if http_body::Body::is_end_stream(body) {
            break;
        }
    }
    Ok(Some(one.unwrap_or_else(|| many.freeze())))
}

/// Takes room for `bytes` in memory from the ingress budget (at most the
/// whole budget), waiting `ingress_wait` at most: 503 + Retry-After past it.
pub async fn reserve(state: &AppState, bytes: u64) -> Result<SemaphorePermit<'_>, ApiError> {
    let permits = u32::try_from(bytes.max(1).min(state.config.ingress_budget)).unwrap_or(u32::MAX);
    // The fast path takes room at once; only a full budget arms a timer.
    match state.ingress.try_acquire_many(permits) {
        Ok(p) => Ok(p),
        // Boxed, like every rare wait on a request's path: a future is as
        // large as everything it may wait on (see `super::dispatch`).
        Err(_) => Box::pin(tokio::time::timeout(
            state.config.ingress_wait,
            state.ingress.acquire_many(permits),
        ))
        .await
        .map_err(|_| ApiError::Busy("too many request bodies in flight; retry shortly"))?
        .map_err(|_| ApiError::Busy("shutting down")),
    }
}

/// How long a refused body may take to arrive before the connection is
/// closed on it anyway.
pub const DISCARD_WITHIN: Duration = Duration::from_secs(5);

/// Reads what is left of a refused body and drops it, up to `2 × limit`
/// bytes and [`DISCARD_WITHIN`]; past either, hyper closes the connection.
async fn discard(mut body: Body, limit: u64) {
    let mut left = limit.saturating_mul(2);
    let drain = async {
        while let Some(Ok(frame)) = body.frame().await {
            let n = frame.data_ref().map_or(0, |d| d.len() as u64);
            left = left.saturating_sub(n);
            if left == 0 {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(DISCARD_WITHIN, drain).await;
}
