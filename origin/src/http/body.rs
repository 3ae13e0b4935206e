//! Request bodies, bounded twice: each body by `max_body` (413), and all
//! bodies in memory together by the ingress budget (503 with `Retry-After`
//! when a request cannot get room in time). This is where the memory bound
//! for large and many concurrent bodies lives.
//!
//! A body takes its room frame by frame, as its bytes arrive, not for what
//! it declares: clients that send a large `Content-Length` and then nothing
//! (or a trickle) hold only what they sent, and a body silent for
//! `body_idle_timeout` answers 408 and lets go of it. Before, 40 such
//! connections held the whole 256 MiB budget, and every append of every
//! account answered 503 for as long as they stayed.
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
    let mut body: Body = req.into_body();
    let mut permit = None;
    let bytes = match gather(state, &mut body, limit, &mut permit).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            drop(permit);
            Box::pin(discard(body, limit)).await;
            return Err(ApiError::PayloadTooLarge { limit });
        }
        Err(e) => return Err(e),
    };
    Ok(BoundedBody {
        bytes,
        _permit: permit,
    })
}

/// The body's next frame: at once when it is there (a small append's
/// only frame is, as a rule: no timer then), else within the idle timeout.
async fn next_frame(
    state: &AppState,
    body: &mut Body,
) -> Result<Option<Result<http_body::Frame<Bytes>, axum::Error>>, ApiError> {
    use futures::FutureExt;
    if let Some(frame) = body.frame().now_or_never() {
        return Ok(frame);
    }
    Box::pin(tokio::time::timeout(
        state.config.body_idle_timeout,
        body.frame(),
    ))
    .await
    .map_err(|_| ApiError::BodyTimeout(state.config.body_idle_timeout))
}

/// The body's bytes, or `None` past `limit`. A body that arrives in one
/// frame (most small appends) is kept as that frame, without a copy or a
/// list of frames; a longer one is gathered into one buffer.
/// (Trailers are read past and dropped: no operation uses them.)
async fn gather<'a>(
    state: &'a AppState,
    body: &mut Body,
    limit: u64,
    permit: &mut Option<SemaphorePermit<'a>>,
) -> Result<Option<Bytes>, ApiError> {
    let mut one: Option<Bytes> = None;
    let mut many = BytesMut::new();
    while let Some(frame) = next_frame(state, body).await? {
        let frame =
            frame.map_err(|e| ApiError::bad(format!("could not read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let len = one.as_ref().map_or(many.len(), Bytes::len) + data.len();
        if len as u64 > limit {
            return Ok(None);
        }
        // Room for what arrived, before it is kept.
        let room = reserve(state, data.len() as u64).await?;
        match permit {
            Some(p) => p.merge(room),
            None => *permit = Some(room),
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
