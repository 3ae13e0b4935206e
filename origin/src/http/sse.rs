//! `GET {stream}?offset=…&live=sse`: a tail as Server-Sent Events.
//!
//! Each batch goes out as one `data` event and its `control` event in a
//! single write. The task writes into a queue of [`SSE_BUFFERED_FRAMES`]
//! frames (`shell::sse_body`, the answer's body), so a reader that stops reading holds at most that many frames of
//! memory and its task waits; the session ends after `sse_session` (about
//! 60 s) so a CDN can collapse readers onto fresh requests. A tail silent
//! for `sse_keepalive` sends a comment line (`shared::sse::KEEPALIVE`), so
//! no proxy's read timeout cuts it; one whose channel is full skips it
//! (bytes are waiting for that reader anyway).
//!
//! On the light path (HTTP/1.1) the task writes to the connection itself
//! (`shell::sse_out`, `shell::detached`): no queue, and no connection task
//! beside it; a reader that stops reading then holds at most the one frame
//! being written, its task waiting for the socket until its session ends
//! (and [`SEND_GRACE`]), when the task is ended wherever it waits.

use std::future::Future;
use std::task::Poll;

use axum::body::Body;
use axum::extract::Request;
use axum::http::Response;
use axum::response::IntoResponse;
use bytes::Bytes;
use shared::content_type::{sse_uses_base64, NDJSON};
use shared::error::{ErrorBody, ErrorCode};
use shared::headers as h;
use shared::offset::Offset;
use shared::params::ReadParams;
use shared::sse::{control_event, data_event, named_json_event, Control, KEEPALIVE};

use super::error::ApiError;
use super::reading::{
    cursor, negotiate, open_for_read, read_slice, resolve_start, set, stream_headers,
    vary_by_accept, Cut,
};
use super::{JsonReads, Shared};
use crate::core::json::ndjson_to_array;
use shell::keepalive::Keepalive;
use shell::peer;

/// Frames waiting for a slow reader before its task waits.
pub const SSE_BUFFERED_FRAMES: usize = 2;

/// How long past its session's end a tail's task may still be writing (its
/// last event, a `credential-expired`) before it is ended regardless.
pub const SEND_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

pub async fn sse(state: Shared, path: String, req: Request, params: ReadParams) -> Response<Body> {
    run(state, path, req, params)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

/// Long by design: the reader's task is one block whose every wait is
/// polled in place, so a waiting reader's task stays within the idle-reader
/// budget (decision 0020); split into awaited functions, each would keep
/// its captures' room again.
async fn run(
    state: Shared,
    path: String,
    req: Request,
    params: ReadParams,
) -> Result<Response<Body>, ApiError> {
    let view = open_for_read(&state, &path, req.headers())?;
    let caller = req.extensions().get::<crate::auth::Caller>().cloned();
    let tail_guard = match &caller {
        Some(c) => state
            .auth
            .open_tail(c)
            .map_err(|after| ApiError::RateLimited(after.0))?,
        None => None,
    };
    // A token's tail ends at its expiry, with a `credential-expired` event.
    let now_secs = state.store.clock().now_ms() / 1000;
    let credential_end = caller
        .as_ref()
        .and_then(|c| c.grant.as_ref())
        .and_then(|g| g.expires_at)
        .map(|exp| {
            tokio::time::Instant::now()
                + std::time::Duration::from_secs(exp.saturating_sub(now_secs))
        });
    let mut rx = view.watch_end();
    let first = rx.borrow_and_update();
    let mut pos = resolve_start(params.offset, &first)?;
    let base64 = sse_uses_base64(&view.config.content_type);
    let json = view.is_json();
    let array = json && negotiate(req.headers(), state.config.json_reads) == JsonReads::Array;
    let cut = if json {
        Cut::Message
    } else if base64 {
        Cut::Bytes
    } else {
        Cut::Char
    };
    // A text event carries at least one whole character.
    let max = if base64 {
        params.max_bytes
    } else {
        params.max_bytes.max(4)
    };

    // On the light path the task writes to the connection itself (no
    // connection task waits beside it: `shell::detached`).
    let (mut out, answer) = shell::sse_out::answer(&req, SSE_BUFFERED_FRAMES);
    let task_state = state.clone();
    let task_view = view.clone();
    let client_cursor = params.cursor.clone();
    let peer = shell::request_id::client().and_then(|c| c.peer);
    // However its writes go (a client that stops reading holds a write up
    // for as long as it likes), the task ends at its session's end and a
    // grace, or when the server stops.
    // One block, every wait polled in place: a session future awaited
    // inside another would keep its captures' room twice (1,424 bytes a
    // waiting tail's task, against the 2 KiB a reader may cost).
    tokio::spawn(async move {
        if out.ready().await.is_err() {
            return; // the client left, or the server drains, before the head
        }
        // Counted from here, as the session is.
        let mut hard_end = std::pin::pin!(tokio::time::sleep_until(shell::clock::deadline(
            task_state.config.sse_session.saturating_add(SEND_GRACE)
        )));
        let mut stopping = task_state.stop.watch();
        // A write waits for the reader at most until the hard end, and
        // never past the server's shutdown.
        macro_rules! send {
            ($sent:expr) => {{
                let mut sent = std::pin::pin!($sent);
                std::future::poll_fn(|cx| {
                    if let Poll::Ready(r) = sent.as_mut().poll(cx) {
                        return Poll::Ready(r);
                    }
                    if hard_end.as_mut().poll(cx).is_ready() || stopping.poll(cx).is_ready() {
                        return Poll::Ready(Err(shell::sse_out::Gone));
                    }
                    Poll::Pending
                })
                .await
            }};
        }
        {
            // A client that leaves an idle tail ends it at once (a busy one
            // ends it with the first write that fails).
            let mut client = peer::watch(peer);
            let _open = task_state.metrics.sse_guard();
            let _tail = tail_guard;
            let session_end = shell::clock::deadline(task_state.config.sse_session);
            let deadline = credential_end.map_or(session_end, |c| c.min(session_end));
            let mut announced = false;
            // Woken by a publish: the frame that follows is a delivery, timed
            // from the publish (not a catch-up read).
            let mut woken = false;
            let mut keepalive = Keepalive::new(task_state.config.sse_keepalive);
            // Its waits are polled by hand (`shell::waker_set`): futures for
            // them would make every waiting tail's task larger.
            let mut timer = std::pin::pin!(tokio::time::sleep_until(keepalive.until(deadline)));
            loop {
                if tokio::time::Instant::now() >= deadline {
                    if credential_end.is_some_and(|c| c <= session_end) {
                        let _ = send!(out.send(Bytes::from(named_json_event(
                            "credential-expired",
                            r#"{"reason":"credential_expired"}"#,
                        ))));
                    }
                    return;
                }
                let tail = rx.borrow_and_update();
                if tail.gone {
                    use crate::store::StoreError;
                    let event = match super::reading::gone(&task_state.store, &task_view) {
                        ApiError::Store(StoreError::IncarnationMismatch { .. }) => {
                            shared::sse::rolled_back_event()
                        }
                        ApiError::Store(StoreError::SoftDeleted) => {
                            let body =
                                ErrorBody::new(ErrorCode::StreamDeleted, "the stream was deleted");
                            named_json_event("error", &body.to_json())
                        }
                        _ => shared::sse::deleted_event(),
                    };
                    let _ = send!(out.send(Bytes::from(event)));
                    return;
                }
                if pos < tail.next {
                    // Boxed: the read's future is large, and a waiting tail's
                    // task should not carry its room (1.4 KB a task unboxed).
                    let slice = match Box::pin(read_slice(&task_view, pos, max, tail, cut)).await {
                        Ok(s) => s,
                        Err(_) => return,
                    };
                    let payload = if array {
                        Bytes::from(ndjson_to_array(&slice.bytes))
                    } else {
                        slice.bytes.clone()
                    };
                    let mut frame = data_event(&payload, base64);
                    let now = task_state.store.clock().now_ms();
                    frame.extend(control_event(&Control {
                        stream_next_offset: Offset(slice.end).to_string(),
                        stream_cursor: (!slice.closed)
                            .then(|| cursor(now, client_cursor.as_deref())),
                        up_to_date: slice.up_to_date,
                        stream_closed: slice.closed,
                    }));
                    task_state.metrics.served(payload.len());
                    pos = slice.end;
                    announced = true;
                    keepalive.wrote();
                    if send!(out.send(Bytes::from(frame))).is_err() || slice.closed {
                        return;
                    }
                    if let (true, Some(at)) = (std::mem::take(&mut woken), rx.published_at()) {
                        task_state
                            .metrics
                            .delivered(crate::metrics::SSE, at.elapsed());
                    }
                    continue;
                }
                if tail.closed || !announced {
                    let now = task_state.store.clock().now_ms();
                    let frame = control_event(&Control {
                        stream_next_offset: Offset(tail.next).to_string(),
                        stream_cursor: (!tail.closed)
                            .then(|| cursor(now, client_cursor.as_deref())),
                        up_to_date: true,
                        stream_closed: tail.closed,
                    });
                    announced = true;
                    keepalive.wrote();
                    if send!(out.send(Bytes::from(frame))).is_err() || tail.closed {
                        return;
                    }
                }
                // The next publish; the session's end, or the keepalive's
                // time; the server's shutdown, the reader's leaving.
                timer.as_mut().reset(keepalive.until(deadline));
                let waited = std::future::poll_fn(|cx| {
                    if rx.poll_changed(cx).is_ready() {
                        return Poll::Ready(Some(true));
                    }
                    if timer.as_mut().poll(cx).is_ready() {
                        return Poll::Ready(Some(false));
                    }
                    if stopping.poll(cx).is_ready()
                        || out.poll_closed(cx).is_ready()
                        || client.poll_left(cx).is_ready()
                    {
                        return Poll::Ready(None);
                    }
                    Poll::Pending
                })
                .await;
                let keep_alive = match waited {
                    None => return,
                    Some(true) => {
                        woken = true;
                        false
                    }
                    Some(false) => keepalive.is_due(),
                };
                if keep_alive {
                    keepalive.wrote();
                    if send!(out.keep_alive(KEEPALIVE)).is_err() {
                        return;
                    }
                }
            }
        }
    });

    let mut resp = answer.response(Body::new, Body::empty());
    stream_headers(&mut resp, &view);
    vary_by_accept(&mut resp, &view);
    set(&mut resp, "content-type", "text/event-stream");
    set(&mut resp, "cache-control", "no-cache");
    // JSON events are NDJSON, unless JSON reads are arrays.
    let data_type = if json && !array {
        NDJSON
    } else {
        &*view.config.content_type
    };
    set(&mut resp, h::STREAM_DATA_CONTENT_TYPE, data_type);
    if base64 {
        set(&mut resp, h::STREAM_SSE_DATA_ENCODING, "base64");
    }
    Ok(resp)
}
