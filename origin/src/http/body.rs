//! Request bodies, bounded twice: each body by `max_body` (413), and all
//! bodies in memory together by the ingress budget (503 with `Retry-After`
//! when a request cannot get room in time). This is where the memory bound
//! for large and many concurrent bodies lives.

use axum::body::Body;
use axum::extract::Request;
use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
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
    let declared = req.headers().get("content-length").and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::PayloadTooLarge { limit });
    }
    if declared == Some(0) {
        return Ok(BoundedBody { bytes: Bytes::new(), _permit: None });
    }
    // Without a length, reserve room for the largest body.
    let reserve = declared.unwrap_or(limit).max(1);
    let permits = u32::try_from(reserve.min(state.config.ingress_budget)).unwrap_or(u32::MAX);
    let permit = tokio::time::timeout(state.config.ingress_wait, state.ingress.acquire_many(permits))
        .await
        .map_err(|_| ApiError::Busy("too many request bodies in flight; retry shortly"))?
        .map_err(|_| ApiError::Busy("shutting down"))?;
    let body: Body = req.into_body();
    let bytes = match Limited::new(body, limit as usize).collect().await {
        Ok(c) => c.to_bytes(),
        Err(e) if e.downcast_ref::<http_body_util::LengthLimitError>().is_some() => {
            return Err(ApiError::PayloadTooLarge { limit })
        }
        Err(e) => return Err(ApiError::bad(format!("could not read the request body: {e}"))),
    };
    Ok(BoundedBody { bytes, _permit: Some(permit) })
}
