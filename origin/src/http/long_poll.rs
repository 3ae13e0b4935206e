//! `GET {stream}?offset=…&live=long-poll`: wait at the end for the next append.
//!
//! The wait subscribes to the stream's tail before it looks at it, so an
//! append that lands between the look and the wait still wakes it.

use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Response, StatusCode};
use axum::response::IntoResponse;
use shared::headers as h;
use shared::negotiate::JsonReads;
use shared::offset::{Offset, ReadFrom};
use shared::params::{ReadParams, DEFAULT_LONG_POLL_MS};

use super::error::ApiError;
use super::read::CACHEABLE;
use super::reading::{
    cursor, negotiate, open_for_read, read_cut, read_slice, resolve_start, set, shape_body,
    slice_etag, slice_headers, stream_headers, vary_by_accept,
};
use super::Shared;
use crate::store::end_watch::EndReceiver;
use crate::store::{End, StreamView};
use shell::peer;

pub async fn long_poll(
    state: Shared,
    path: String,
    req: Request,
    params: ReadParams,
) -> Response<Body> {
    match park(&state, &path, req, params) {
        Ok(mut parked) => parked.answer().await,
        Err(e) => e.into_response(),
    }
}

/// A long-poll at the end of its stream, ready to wait: all a parked
/// long-poll keeps (its request is gone by then, and so is the state of
/// the routing and admission that led here: see `live`).
pub struct Parked {
    state: Shared,
    view: Arc<StreamView>,
    /// Boxed: 144 bytes, and most long-polls have none.
    caller: Option<Box<crate::auth::Caller>>,
    mode: JsonReads,
    rx: EndReceiver,
    first: End,
    start: u64,
    params: ReadParams,
}

/// Looks at the stream's tail (subscribed before the look, so an append
/// that lands between the look and the wait still wakes it).
pub fn park(
    state: &Shared,
    path: &str,
    req: Request,
    params: ReadParams,
) -> Result<Parked, ApiError> {
    let view = open_for_read(state, path, req.headers())?;
    let caller = req
        .extensions()
        .get::<crate::auth::Caller>()
        .cloned()
        .map(Box::new);
    let mode = negotiate(req.headers(), state.config.json_reads);
    // The request goes before the wait: its header values are slices of
    // the connection's read buffer, which hyper would otherwise have to
    // allocate again while this one stays pinned (8 KiB a parked reader).
    drop(req);
    let mut rx = view.watch_end();
    let first = rx.borrow_and_update();
    let start = resolve_start(params.offset, &first)?;
    Ok(Parked {
        state: state.clone(),
        view,
        caller,
        mode,
        rx,
        first,
        start,
        params,
    })
}

impl Parked {
    /// Waits (unless there is something to read already), then answers.
    /// (Borrowed, and its fields used where they are: a copy would keep
    /// room of its own in the waiting future, and a `Parked` taken by
    /// value is copied into it twice, 300 bytes each.)
    pub async fn answer(&mut self) -> Response<Body> {
        let wait = Duration::from_millis(self.params.long_poll_ms(DEFAULT_LONG_POLL_MS));
        let start = self.start;
        // Parked, then woken by a publish: the answer is a delivery.
        let mut parked = false;
        let end = if start < self.first.next || self.first.closed {
            self.first
        } else {
            let _tail = match &self.caller {
                Some(c) => match self.state.auth.open_tail(c) {
                    Ok(guard) => guard,
                    Err(after) => return ApiError::RateLimited(after.0).into_response(),
                },
                None => None,
            };
            let _waiting = self.state.metrics.long_poll_guard();
            // Ends early (as a timeout would) when the server shuts down,
            // or when the client leaves (its answer then goes nowhere).
            // Polled by hand, each wait in a slot (`shell::waker_set`):
            // futures for the three would make this one 480 bytes larger.
            let mut client = peer::watch(shell::request_id::client().and_then(|c| c.peer));
            let mut timeout = std::pin::pin!(tokio::time::sleep(wait));
            let mut stopping = self.state.stop.watch();
            let rx = &mut self.rx;
            let waited = std::future::poll_fn(|cx| {
                if let Poll::Ready(t) =
                    rx.poll_wait_for(cx, |t| t.next > start || t.closed || t.gone)
                {
                    return Poll::Ready(Some(t));
                }
                if stopping.poll(cx).is_ready()
                    || client.poll_left(cx).is_ready()
                    || timeout.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(None);
                }
                Poll::Pending
            })
            .await;
            rx.leave();
            // Only an end it was woken for is a delivery (its stamp read
            // with it); one read after a timeout is not.
            parked = waited.is_some();
            waited.unwrap_or_else(|| self.rx.borrow())
        };
        // The read and the answer run boxed: a waiting long-poll's future
        // need not carry their size.
        let answered = Box::pin(respond(
            &self.state,
            &self.view,
            self.mode,
            &self.rx,
            end,
            start,
            parked,
            &self.params,
        ))
        .await;
        answered.unwrap_or_else(IntoResponse::into_response)
    }
}

/// The answer at `tail`, for a long-poll from `start`.
#[allow(clippy::too_many_arguments)]
async fn respond(
    state: &Shared,
    view: &Arc<StreamView>,
    mode: JsonReads,
    rx: &EndReceiver,
    end: End,
    start: u64,
    parked: bool,
    params: &ReadParams,
) -> Result<Response<Body>, ApiError> {
    if end.gone {
        return Err(super::reading::gone(&state.store, view));
    }
    let now = state.store.clock().now_ms();
    if end.next <= start {
        // Timed out, or the stream closed at this offset.
        let mut resp = Response::new(Body::empty());
        *resp.status_mut() = StatusCode::NO_CONTENT;
        stream_headers(&mut resp, view);
        set(&mut resp, h::STREAM_NEXT_OFFSET, Offset(end.next));
        set(&mut resp, h::STREAM_UP_TO_DATE, "true");
        if end.closed {
            set(&mut resp, h::STREAM_CLOSED, "true");
        } else {
            set(
                &mut resp,
                h::STREAM_CURSOR,
                cursor(now, params.cursor.as_deref()),
            );
        }
        set(&mut resp, "cache-control", "no-store");
        return Ok(resp);
    }
    let slice = read_slice(view, start, params.max_bytes, end, read_cut(view, mode)).await?;
    let (body, content_type) = shape_body(view, mode, slice.bytes.clone());
    state.metrics.served(body.len());
    if let (true, Some(at)) = (parked, rx.published_at()) {
        state
            .metrics
            .delivered(crate::metrics::LONG_POLL, at.elapsed());
    }
    let mut resp = Response::new(Body::from(body));
    stream_headers(&mut resp, view);
    vary_by_accept(&mut resp, view);
    slice_headers(&mut resp, &slice);
    set(&mut resp, "content-type", content_type);
    set(&mut resp, "etag", slice_etag(view, mode, &slice));
    if !slice.closed {
        set(
            &mut resp,
            h::STREAM_CURSOR,
            cursor(now, params.cursor.as_deref()),
        );
    }
    // `offset=now` names no range: the same URL later waits for later
    // bytes, so no cache may hand this answer to the next reader.
    let cache = if params.offset == ReadFrom::Now {
        "no-store"
    } else {
        CACHEABLE
    };
    set(&mut resp, "cache-control", cache);
    Ok(resp)
}
