//! `GET {stream}/incarnation/{token}/snapshot/{offset}`: a snapshot at its
//! cacheable URL, of any size up to the origin's `Ursula-Max-Snapshot-Bytes`.
//!
//! Snapshots are too large to buffer before answering (128 MiB by
//! default), so a miss streams the origin's answer through as it comes,
//! and keeps a copy on the way when the origin marks it immutable, it is
//! at most [`max_kept`] bytes, and the bytes of all copies being made stay
//! within `Limits::snapshot_fill_bytes` (past either, the answer streams
//! and is not kept). The copy is kept once the whole body went through; a
//! reader that stops early keeps nothing. Later requests are answered from
//! memory while the invalidation feed covers the stream, with `304`
//! for a matching `If-None-Match`. Concurrent misses each stream from the
//! origin: snapshots are read rarely, and a single-flight fill would make
//! every reader wait for the whole body first.

use std::sync::Arc;

use axum::body::Body;
use bytes::BytesMut;
use futures::StreamExt;
use http::{Request, Response};
use http_body_util::BodyStream;
use parking_lot::Mutex;
use tokio::sync::OwnedSemaphorePermit;

use super::chunk::{answerable_from_memory, respond};
use super::forward::forward;
use super::Shared;
use crate::answer::{strip_hop_by_hop, Answer};
use crate::core::cacheable::is_immutable;

/// The largest snapshot kept in memory: an eighth of the cache, so one
/// snapshot cannot push most chunks out.
pub fn max_kept(cache_bytes: u64) -> u64 {
    cache_bytes / 8
}

pub async fn snapshot(state: &Shared, req: Request<Body>) -> Response<Body> {
    if !answerable_from_memory(&req) {
        return forward(state, req).await;
    }
    let path = req.uri().path().to_owned();
    let if_none_match = req
        .headers()
        .get(http::header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    if let Some(kept) = state.chunks.get(&path).await {
        return respond(state, &kept, if_none_match.as_deref());
    }
    let mark = state.chunks.mark();
    let resp = forward(state, req).await;
    let len = resp
        .headers()
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    let keep = is_immutable(resp.status(), resp.headers())
        && len.is_some_and(|n| n <= max_kept(state.config.cache_bytes));
    let permit = match len {
        Some(n) if keep => u32::try_from(n).ok().and_then(|n| {
            Arc::clone(&state.snapshot_fills)
                .try_acquire_many_owned(n)
                .ok()
        }),
        _ => None,
    };
    let (Some(permit), Some(len)) = (permit, len) else {
        return resp;
    };
    keep_on_the_way(state, path, resp, len, mark, permit)
}

/// The answer as it streams, copied into the cache as it goes and kept
/// once it went through whole: before its last bytes go out, so a reader
/// that has them and asks again is answered from memory (and because
/// hyper, knowing the length, need not poll the body for its end).
fn keep_on_the_way(
    state: &Shared,
    path: String,
    resp: Response<Body>,
    len: u64,
    mark: crate::core::cover::Mark,
    permit: OwnedSemaphorePermit,
) -> Response<Body> {
    let (parts, body) = resp.into_parts();
    let mut headers = parts.headers.clone();
    strip_hop_by_hop(&mut headers);
    headers.remove(http::header::CONTENT_LENGTH);
    let status = parts.status;
    let cache = state.chunks.clone();
    // The copy, until it is whole (then kept) or fails (then dropped, and
    // its permit with it).
    let copy = Arc::new(Mutex::new(Some((
        BytesMut::with_capacity(len as usize),
        permit,
    ))));
    let frames = BodyStream::new(body).then(move |frame| {
        let whole = take_if_whole(&copy, &frame, len);
        let (cache, headers, path) = (cache.clone(), headers.clone(), path.clone());
        async move {
            if let Some((body, _permit)) = whole {
                let answer = Answer {
                    status,
                    headers,
                    body: body.freeze(),
                };
                cache.insert(&path, answer, mark).await;
            }
            frame
        }
    });
    Response::from_parts(parts, Body::new(http_body_util::StreamBody::new(frames)))
}

type Copy = Mutex<Option<(BytesMut, OwnedSemaphorePermit)>>;

/// Adds a frame's data to the copy; the copy once it holds all `len` bytes.
fn take_if_whole<E>(
    copy: &Copy,
    frame: &Result<http_body::Frame<bytes::Bytes>, E>,
    len: u64,
) -> Option<(BytesMut, OwnedSemaphorePermit)> {
    let mut slot = copy.lock();
    let (buf, _) = slot.as_mut()?;
    match frame.as_ref().map(|f| f.data_ref()) {
        Ok(Some(data)) if (buf.len() + data.len()) as u64 <= len => {
            buf.extend_from_slice(data);
            if buf.len() as u64 == len {
                return slot.take();
            }
            None
        }
        Ok(None) => None,
        // More than announced, or a broken body: nothing is kept.
        _ => {
            *slot = None;
            None
        }
    }
}
