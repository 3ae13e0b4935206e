//! Forks across partitions, as the fork's owner makes them and as deletes
//! and the sweep undo them (the two region streams and why are in
//! `region::across`; decision 0016).
//!
//! Making one, on the owner of the fork's partition (every step a plain
//! request of the protocol, sent through this origin's own router, so it
//! reaches whichever origin owns the stream it names):
//! 1. `HEAD` the source with the caller's credential: the caller must be
//!    allowed to read it, and the answer has the expiry a fork inherits;
//! 2. `PUT` the pin, a fork of the source in its own partition: every
//!    refusal of a fork (no source, `410`/`409` for a soft-deleted one,
//!    another content type, past the end) is the pin's, answered as is;
//! 3. make the copy here, empty, and append the pin's bytes to it, read
//!    piece by piece (`GET`, NDJSON for a JSON stream: the stored form);
//! 4. make the fork here as a fork of the copy (the caller's request, its
//!    source renamed), then delete the copy: it stays soft-deleted while
//!    the fork reads it.
//!
//! If a step fails, what the earlier ones made is deleted again; what a
//! crash leaves (a pin without a copy, a copy never forked) the sweep
//! removes after the grace.

use std::collections::HashSet;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use axum::response::IntoResponse;
use bytes::Bytes;
use shared::error::ErrorCode;
use shared::headers as h;
use shared::offset::Offset;

use super::RegionOrigin;
use crate::core::config::{Expiry, StreamConfig};
use crate::core::stream::AppendRequest;
use crate::http::error::{error_response, ApiError};
use crate::http::{self, Shared};
use crate::region::across::{self, Kind};
use crate::store::{StoreError, StreamView};

/// Far enough ahead to be never: the pin lasts as long as its fork, not
/// as long as the source's expiry would give it.
const NEVER: &str = "9999-12-31T23:59:59Z";

/// A request one origin of the region sends another (or itself).
pub(super) fn peer(me: &RegionOrigin, method: Method, uri: &str) -> Request<Body> {
    let mut req = Request::new(Body::empty());
    *req.method_mut() = method;
    // Every path here was checked to be a URI path (`fork`); should one
    // not be, the request names nothing and answers 404.
    *req.uri_mut() = uri
        .parse()
        .unwrap_or_else(|_| axum::http::Uri::from_static("/.ds-region/unnamed"));
    if let Some(key) = me.peer_key.get() {
        if let Ok(v) = HeaderValue::from_str(key) {
            req.headers_mut().insert(h::REGION_PEER, v);
        }
    }
    req
}

/// Sends `req` through this origin's router (boxed: the router calls back).
pub(super) async fn send(me: &Arc<RegionOrigin>, req: Request<Body>) -> Response<Body> {
    Box::pin(super::answer::handle(Arc::clone(me), req)).await
}

/// Copies being filled here, which the sweep leaves alone. Bounded by the
/// fork requests in flight (each adds one and takes it out when done).
#[derive(Default)]
pub(super) struct Copying(parking_lot::Mutex<HashSet<String>>);

struct Filling<'a>(&'a Copying, String);

impl<'a> Filling<'a> {
    /// Notes `copy` as being filled, if fewer than `--region-fork-copies`
    /// are; until dropped.
    fn begin(me: &'a RegionOrigin, copy: &str) -> Option<Filling<'a>> {
        let mut copying = me.copying.0.lock();
        if copying.len() >= me.store.region.fork_copies {
            return None;
        }
        copying.insert(copy.to_owned());
        Some(Filling(&me.copying, copy.to_owned()))
    }
}

impl Drop for Filling<'_> {
    fn drop(&mut self) {
        self.0 .0.lock().remove(&self.1);
    }
}

/// Makes the fork `req` asks for at its path (in partition `p`, served
/// here by `state`), whose source is in another partition. Long by design:
/// decision 0016's four steps in order (the source's `HEAD`, the pin, the
/// copy, the fork), each a call, with what each refusal undoes beside it.
pub(super) async fn fork(
    me: &Arc<RegionOrigin>,
    p: u32,
    state: Shared,
    req: Request<Body>,
) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let fork = parts.uri.path().to_owned();
    let source = match fork_source(&parts.headers, &fork) {
        Ok(source) => source,
        Err(refused) => return refused.into_response(),
    };
    // A fork there already that is not of this source's copy (or any
    // stream there): answered by its store as ever (a conflict).
    let again = copy_of(&state, &fork, &source);
    if again.is_none()
        && matches!(
            state.store.find(&fork),
            Ok(_) | Err(StoreError::SoftDeleted)
        )
    {
        return http::handle(state, Request::from_parts(parts, body)).await;
    }
    // The caller may make the fork: asked first, before anything costs.
    let (mut parts, body) = match http::admit_create(&state, Request::from_parts(parts, body)) {
        Ok(req) => req.into_parts(),
        Err(refused) => return *refused,
    };
    // 1. The caller may read the source; what a fork inherits of it.
    let head = head_of_source(me, &source, &parts.headers).await;
    // The same fork again (its copy is of this source): the caller may
    // read the source (soft-deleted since, it still may), and the fork's
    // store answers it as any second PUT of a fork.
    if let Some(copy) = again {
        return match head.status() {
            StatusCode::OK | StatusCode::GONE => local(state, parts, body, &copy).await,
            StatusCode::NOT_FOUND => ApiError::Store(StoreError::ConfigMismatch).into_response(),
            other => refusal_of(other),
        };
    }
    match head.status() {
        StatusCode::OK => {}
        StatusCode::NOT_FOUND => {
            return ApiError::Store(StoreError::NotFound).into_response();
        }
        StatusCode::GONE => {
            return ApiError::Store(StoreError::ForkSourceDeleted).into_response();
        }
        other => return refusal_of(other),
    }
    // 2. The pin, in the source's partition.
    if me.peer_key().await.is_none() {
        return ApiError::Busy("the region's peer key is not readable yet; retry shortly")
            .into_response();
    }
    let nonce: u64 = rand::random();
    let q = shared::partition::of_stream(&source, me.partitions);
    let pin = across::pin(q, nonce, &fork);
    let copy = across::copy(p, nonce, &source);
    let Some(_filling) = Filling::begin(me, &copy) else {
        return ApiError::Busy(
            "this origin is making as many forks across partitions as it may at once; retry shortly",
        )
        .into_response();
    };
    let pinned = put_pin(me, &pin, &parts.headers).await;
    if pinned.status() != StatusCode::CREATED {
        return pinned;
    }
    let Some(at) = next_offset(pinned.headers()) else {
        unpin(me, &pin).await;
        return ApiError::Internal("the pin's answer has no Stream-Next-Offset".into())
            .into_response();
    };
    // 3. The copy, byte for byte.
    let content_type = head
        .headers()
        .get(axum::http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/octet-stream")
        .to_owned();
    if let Err(answer) = fill(me, &state, &pin, &copy, &content_type, at).await {
        let _ = state.store.delete(copy.clone(), None).await;
        unpin_removed(me, &state, vec![(copy, pin)]).await;
        return answer;
    }
    // 4. The fork, of the copy, with the source's expiry unless it names one.
    if !parts.headers.contains_key(&h::STREAM_TTL)
        && !parts.headers.contains_key(&h::STREAM_EXPIRES_AT)
    {
        for name in [h::STREAM_TTL, h::STREAM_EXPIRES_AT] {
            if let Some(v) = head.headers().get(&name) {
                parts.headers.insert(name, v.clone());
            }
        }
    }
    let repeat = parts.clone();
    let answer = local(state.clone(), parts, body, &copy).await;
    let _ = state.store.delete(copy.clone(), None).await;
    // A racing PUT of the same fork made it first, of its own copy: this
    // one is then its repeat, answered as a repeat after it would be.
    if answer.status() == StatusCode::CONFLICT {
        if let Some(theirs) = copy_of(&state, &fork, &source).filter(|c| *c != copy) {
            let answer = repeat_of(&state, repeat, &theirs).await;
            unpin_removed(me, &state, vec![(copy, pin)]).await;
            return answer;
        }
    }
    if answer.status().is_success() {
        me.metrics
            .forks_across
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    } else {
        // Not made, unless the answer was ambiguous (the commit may still
        // land): then the copy lives on soft-deleted and keeps its pin.
        unpin_removed(me, &state, vec![(copy, pin)]).await;
    }
    answer
}

/// The source a fork across partitions names (`Stream-Forked-From`),
/// checked: a stream path, and short enough for the hidden names the fork
/// makes from it.
fn fork_source(headers: &axum::http::HeaderMap, fork: &str) -> Result<String, ApiError> {
    let source = headers
        .get(&h::STREAM_FORKED_FROM)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .ok_or_else(|| ApiError::bad("Stream-Forked-From is not text"))?;
    if shared::paths::validate_stream_path(&source).is_err()
        || source.parse::<axum::http::Uri>().is_err()
    {
        return Err(ApiError::bad(format!(
            "Stream-Forked-From names no stream: {source:?}"
        )));
    }
    let limit = shared::paths::MAX_STREAM_PATH - across::NAME_OVERHEAD;
    if fork.len() > limit || source.len() > limit {
        return Err(ApiError::bad(format!(
            "a fork whose source is in another partition of the region needs paths of at most {limit} bytes"
        )));
    }
    Ok(source)
}

/// `HEAD` of the source, asked on the caller's behalf (its credential):
/// whether it may read it, and what a fork inherits of it.
async fn head_of_source(
    me: &Arc<RegionOrigin>,
    source: &str,
    headers: &axum::http::HeaderMap,
) -> Response<Body> {
    let mut head = peer(me, Method::HEAD, source);
    head.headers_mut().remove(h::REGION_PEER);
    head.extensions_mut().insert(crate::http::forward::OnBehalf);
    if let Some(a) = headers.get(axum::http::header::AUTHORIZATION) {
        head.headers_mut()
            .insert(axum::http::header::AUTHORIZATION, a.clone());
    }
    send(me, head).await
}

/// The pin: a fork of the source, in its partition, at the point the
/// caller asked, that never expires (it holds the source's bytes while the
/// copy is filled).
async fn put_pin(
    me: &Arc<RegionOrigin>,
    pin: &str,
    headers: &axum::http::HeaderMap,
) -> Response<Body> {
    let mut put = peer(me, Method::PUT, pin);
    for name in [
        axum::http::header::CONTENT_TYPE,
        h::STREAM_FORKED_FROM,
        h::STREAM_FORK_OFFSET,
        h::STREAM_FORK_SUB_OFFSET,
    ] {
        if let Some(v) = headers.get(&name) {
            put.headers_mut().insert(name, v.clone());
        }
    }
    put.headers_mut()
        .insert(h::STREAM_EXPIRES_AT, HeaderValue::from_static(NEVER));
    send(me, put).await
}

/// A second PUT of a fork made first by a racing one, of its own copy
/// `theirs`: answered as a repeat is (without the body it carried).
async fn repeat_of(
    state: &Shared,
    mut repeat: axum::http::request::Parts,
    theirs: &str,
) -> Response<Body> {
    repeat.headers.remove(axum::http::header::CONTENT_LENGTH);
    repeat.headers.remove(axum::http::header::TRANSFER_ENCODING);
    local(state.clone(), repeat, Body::empty(), theirs).await
}

/// The fork request, its source renamed to `copy`, in the fork's store.
async fn local(
    state: Shared,
    mut parts: axum::http::request::Parts,
    body: Body,
    copy: &str,
) -> Response<Body> {
    parts.headers.insert(
        h::STREAM_FORKED_FROM,
        HeaderValue::from_str(copy).expect("a path is a header value"),
    );
    // Admitted for the fork before step 1, for the source by its owner.
    parts.extensions.insert(http::Admitted);
    http::handle(state, Request::from_parts(parts, body)).await
}

/// The copy of `source` the fork at `fork` forks, if it is one.
fn copy_of(state: &Shared, fork: &str, source: &str) -> Option<String> {
    let view = state.store.get(fork)?;
    let parent = &view.inherited()?.parent;
    let name = across::parse(&parent.path)?;
    (name.kind == Kind::Copy && name.other == source).then(|| parent.path.to_string())
}

/// The pin's bytes `[0, at)` appended to a new copy, a piece at a time.
async fn fill(
    me: &Arc<RegionOrigin>,
    state: &Shared,
    pin: &str,
    copy: &str,
    content_type: &str,
    at: u64,
) -> Result<(), Response<Body>> {
    if at > me.store.region.fork_copy_max {
        return Err(error_response(
            ErrorCode::ForkAcrossPartitions,
            format!(
                "the source's prefix is {at} bytes; a fork whose source is in another partition copies at most {} (choose a path in the source's partition)",
                me.store.region.fork_copy_max
            ),
        ));
    }
    let config = StreamConfig {
        content_type: content_type.into(),
        expiry: Expiry::Never,
        public: false,
    };
    state
        .store
        .create(copy.to_owned(), config, false, Bytes::new())
        .await
        .map_err(|e| ApiError::Store(e).into_response())?;
    let view = state
        .store
        .get(copy)
        .ok_or_else(|| ApiError::Internal("the copy vanished".into()).into_response())?;
    let json = view.is_json();
    let (mut offset, mut carried) = (0u64, Vec::new());
    while offset < at {
        let mut get = peer(me, Method::GET, &format!("{pin}?offset={}", Offset(offset)));
        get.headers_mut().insert(
            axum::http::header::ACCEPT,
            HeaderValue::from_static(shared::content_type::NDJSON),
        );
        let answer = send(me, get).await;
        if answer.status() == StatusCode::GONE {
            return Err(error_response(
                ErrorCode::ForkAcrossPartitions,
                "the source keeps only a snapshot of its start; a fork of it must be in its partition",
            ));
        }
        if answer.status() != StatusCode::OK {
            return Err(answer);
        }
        let next = next_offset(answer.headers()).unwrap_or(offset);
        let limit = usize::try_from(state.config.max_body.max(16 << 20)).unwrap_or(usize::MAX);
        let bytes = axum::body::to_bytes(answer.into_body(), limit)
            .await
            .map_err(|e| ApiError::Internal(format!("reading the pin: {e}")).into_response())?;
        if next <= offset || bytes.is_empty() {
            return Err(
                ApiError::Busy("the source's owner answered no bytes; retry shortly")
                    .into_response(),
            );
        }
        offset = next.min(at);
        carried.extend_from_slice(&bytes);
        // A JSON stream is appended whole messages at a time.
        let cut = if json && offset < at {
            carried
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1)
        } else {
            carried.len()
        };
        if cut == 0 {
            continue;
        }
        let piece: Vec<u8> = carried.drain(..cut).collect();
        append(state, &view, content_type, Bytes::from(piece)).await?;
    }
    Ok(())
}

async fn append(
    state: &Shared,
    view: &Arc<StreamView>,
    content_type: &str,
    piece: Bytes,
) -> Result<(), Response<Body>> {
    let req = AppendRequest {
        content_type: Some(content_type.to_owned()),
        payload_len: piece.len() as u64,
        producer: None,
        stream_seq: None,
        close: false,
    };
    state
        .store
        .append(Arc::clone(view), None, req, piece)
        .await
        .map(|_| ())
        .map_err(|e| ApiError::Store(e).into_response())
}

/// Deletes a pin (its fork is gone, or was never made). A pin that stays
/// (its owner did not answer) is the sweep's.
async fn unpin(me: &Arc<RegionOrigin>, pin: &str) {
    let answer = send(me, peer(me, Method::DELETE, pin)).await;
    if answer.status().is_success() || answer.status() == StatusCode::NOT_FOUND {
        me.metrics
            .unpins
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    } else {
        tracing::warn!(pin, status = %answer.status(), "could not delete a fork's pin; the sweep will");
    }
}

/// The pins of the copies above `view` (its source, its source's source,
/// ...), each with its copy: the ones to delete once a delete of `view`
/// removed their copy.
pub(super) fn copies_above(view: &Arc<StreamView>, partitions: u32) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut child = Arc::clone(view);
    while let Some(parent) = child.inherited().map(|i| Arc::clone(&i.parent)) {
        if let Some(name) = across::parse(&parent.path).filter(|n| n.kind == Kind::Copy) {
            let q = shared::partition::of_stream(name.other, partitions);
            out.push((
                parent.path.to_string(),
                across::pin(q, name.nonce, &child.path),
            ));
        }
        child = parent;
    }
    out
}

/// After a delete here: the pins of the copies it removed.
pub(super) async fn unpin_removed(
    me: &Arc<RegionOrigin>,
    state: &Shared,
    copies: Vec<(String, String)>,
) {
    for (copy, pin) in copies {
        if matches!(state.store.find(&copy), Err(StoreError::NotFound)) {
            unpin(me, &pin).await;
        }
    }
}

/// One sweep of partition `p` (served here by `state`): pins whose copy
/// is gone, and copies never forked (both left by a crash), older than
/// the grace, are deleted.
pub(super) async fn sweep(me: &Arc<RegionOrigin>, p: u32, state: &Shared, every: u64) {
    let prefix = format!("{}in/{p}/", shared::partition::HIDDEN);
    let now = state.store.clock().now_ms();
    let grace = u64::try_from(me.store.region.pin_grace.as_millis()).unwrap_or(u64::MAX);
    for view in state.store.region_streams_under(&prefix) {
        if view.is_soft_deleted() || now.saturating_sub(view.created_at) < grace {
            continue;
        }
        let Some(name) = across::parse(&view.path) else {
            continue;
        };
        match name.kind {
            Kind::Copy => {
                if me.copying.0.lock().contains(&*view.path) {
                    continue;
                }
                let copies = copies_above(&view, me.partitions);
                let _ = state.store.delete(view.path.to_string(), None).await;
                unpin_removed(me, state, copies).await;
                me.metrics
                    .swept
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Kind::Pin => {
                if !due(now.saturating_sub(view.created_at), grace, every) {
                    continue;
                }
                let Some(source) = view.inherited().map(|i| Arc::clone(&i.parent)) else {
                    continue;
                };
                let fp = shared::partition::of_stream(name.other, me.partitions);
                let copy = across::copy(fp, name.nonce, &source.path);
                let answer = send(me, peer(me, Method::HEAD, &copy)).await;
                if answer.status() == StatusCode::NOT_FOUND {
                    send(me, peer(me, Method::DELETE, &view.path)).await;
                    me.metrics
                        .swept
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }
    }
}

/// Whether a pin of age `age` is asked after in a sweep every `every`
/// ms: once its age passes `grace`, then `2 grace`, `4 grace`, … (a pin
/// whose fork lives long is asked after rarely; what a crash or an expiry
/// left goes within about its age).
fn due(age: u64, grace: u64, every: u64) -> bool {
    let mut mark = grace.max(1);
    while mark <= age {
        if age - mark < every {
            return true;
        }
        mark = match mark.checked_mul(2) {
            Some(m) => m,
            None => return false,
        };
    }
    false
}

fn next_offset(headers: &HeaderMap) -> Option<u64> {
    let v = headers.get(&h::STREAM_NEXT_OFFSET)?.to_str().ok()?;
    Offset::parse(v).map(|o| o.bytes())
}

/// A refusal of the source's `HEAD` (no body) as an error answer.
fn refusal_of(status: StatusCode) -> Response<Body> {
    let (code, why) = match status {
        StatusCode::UNAUTHORIZED => (
            ErrorCode::Unauthorized,
            "reading the fork's source needs a credential",
        ),
        StatusCode::FORBIDDEN => (
            ErrorCode::Forbidden,
            "this credential may not read the fork's source",
        ),
        _ => (
            ErrorCode::Unavailable,
            "the fork's source could not be read; retry shortly",
        ),
    };
    let mut r = error_response(code, format!("{why} (its owner answered {status})"));
    if code == ErrorCode::Unavailable {
        r.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            HeaderValue::from_static("1"),
        );
        *r.status_mut() = StatusCode::SERVICE_UNAVAILABLE;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::due;

    #[test]
    fn pins_are_asked_after_at_doubling_ages() {
        let (grace, every) = (60_000, 10_000);
        let asked: Vec<u64> = (0..2_000_000u64)
            .step_by(10_000)
            .filter(|age| due(*age, grace, every))
            .collect();
        assert_eq!(
            asked,
            [60_000, 120_000, 240_000, 480_000, 960_000, 1_920_000]
        );
        assert!(!due(59_999, grace, every));
        // Doubling stops short of overflowing.
        assert!(due(u64::MAX, u64::MAX, 1));
        assert!(!due(u64::MAX - 5, 1 << 62, 1));
    }
}
