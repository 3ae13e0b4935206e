//! `GET {stream}?offset=…&live=long-poll`: every reader waiting with the
//! same key shares one upstream long-poll (see `collapse`), and gets the
//! origin's own answer: status, headers (`Stream-Cursor`, `Cache-Control`:
//! `no-store` on a 204, short and shared on a 200) and body.

use std::time::Duration;

use axum::body::Body;
use axum::response::IntoResponse;
use http::{Request, Response};
use shared::params::{ReadParams, DEFAULT_LONG_POLL_MS};

use super::error::EdgeError;
use super::Shared;
use crate::core::collapse_key::{answer_headers, long_poll_key};
use crate::metrics;

pub async fn long_poll(state: &Shared, req: Request<Body>, params: &ReadParams) -> Response<Body> {
    match park(state, req, params) {
        Ok(mut parked) => parked.answer().await,
        Err(refused) => *refused,
    }
}

/// A long-poll joined to its flight, waiting for the shared answer: all a
/// parked long-poll keeps (its request is gone by then, and so is the
/// state of the routing and admission that led here: see `live`). Its
/// flight bounds its wait, and ends it when the edge shuts down
/// (`collapse`).
pub struct Parked {
    state: Shared,
    waiter: crate::collapse::Waiter,
}

/// Joins the flight of the long-poll's key (starting it when there is
/// none), or answers at once (too many waiting).
pub fn park(
    state: &Shared,
    req: Request<Body>,
    params: &ReadParams,
) -> Result<Parked, Box<Response<Body>>> {
    let uri = req.uri();
    let key = long_poll_key(uri.path(), uri.query(), req.headers());
    let path_and_query = uri
        .path_and_query()
        .map(|p| p.as_str().to_owned())
        .unwrap_or_else(|| uri.path().to_owned());
    let headers = answer_headers(req.headers());
    // The request goes before the wait: its header values are slices of
    // the connection's read buffer, which hyper would otherwise have to
    // allocate again while this one stays pinned (8 KiB a parked reader).
    drop(req);
    let upstream = state.upstream.clone();
    // The flight's bound: the long-poll's timeout, and a grace for the
    // origin's answer to arrive.
    let bound = Duration::from_millis(params.long_poll_ms(DEFAULT_LONG_POLL_MS))
        + state.config.limits.waiter_grace;
    let waiter = state
        .collapse
        .join(key, bound, move || async move {
            upstream
                .get(&path_and_query, headers, metrics::Upstream::LongPoll)
                .await
        })
        .map_err(|e| Box::new(EdgeError::from(e).into_response()))?;
    Ok(Parked {
        state: state.clone(),
        waiter,
    })
}

impl Parked {
    /// The origin's answer once the flight lands (or the failure, or the
    /// edge's own answer when it shuts down meanwhile).
    /// (Borrowed: taken by value, it would be copied into the waiting
    /// future.)
    pub async fn answer(&mut self) -> Response<Body> {
        let state = &self.state;
        match self.waiter.wait().await {
            Ok((answer, landed)) => {
                state.metrics.served(answer.body.len());
                // Only bytes of the stream are a delivery (an error's body
                // is not).
                if answer.status.is_success() && !answer.body.is_empty() {
                    state
                        .metrics
                        .delivered(crate::metrics::LONG_POLL, landed.elapsed());
                }
                answer.to_response()
            }
            Err(e) => EdgeError::from(e).into_response(),
        }
    }
}
