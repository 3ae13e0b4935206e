//! What every read shares: resolving the start offset, cutting a range to the
//! answer's size, shaping JSON, and the headers of a read answer.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response};
use bytes::Bytes;
use shared::headers as h;
use shared::offset::{Offset, ReadFrom};

use super::error::ApiError;
use super::request;
use super::JsonReads;
use crate::core::json::ndjson_to_array;
use crate::store::{End, StreamView};

/// A value that can become a header value; offsets and numbers without a
/// detour through `String`.
pub trait HeaderText {
    fn to_header(self) -> Option<HeaderValue>;
}

impl HeaderText for Offset {
    fn to_header(self) -> Option<HeaderValue> {
        Some(self.header_value())
    }
}

impl HeaderText for u64 {
    fn to_header(self) -> Option<HeaderValue> {
        Some(HeaderValue::from(self))
    }
}

impl HeaderText for &str {
    fn to_header(self) -> Option<HeaderValue> {
        HeaderValue::from_str(self).ok()
    }
}

impl HeaderText for &String {
    fn to_header(self) -> Option<HeaderValue> {
        HeaderValue::from_str(self).ok()
    }
}

impl HeaderText for String {
    fn to_header(self) -> Option<HeaderValue> {
        HeaderValue::try_from(self).ok()
    }
}

impl HeaderText for HeaderValue {
    fn to_header(self) -> Option<HeaderValue> {
        Some(self)
    }
}

/// Sets a header of an answer (a value that is not a valid header is left out).
pub fn set<K: http::header::IntoHeaderName>(
    resp: &mut Response<Body>,
    name: K,
    value: impl HeaderText,
) {
    if let Some(v) = value.to_header() {
        resp.headers_mut().insert(name, v);
    }
}

/// Headers every answer about a stream carries.
pub fn stream_headers(resp: &mut Response<Body>, view: &StreamView) {
    set(resp, h::STREAM_INCARNATION, view.incarnation_header());
    if let Some((previous, at)) = view.restored_from() {
        set(resp, h::STREAM_PREVIOUS_INCARNATION, previous);
        set(resp, h::STREAM_INHERITED_OFFSET, shared::offset::Offset(at));
    }
}

/// Why a stream a reader held went: a rollback replaced it (412, naming
/// the incarnation that did and what it kept), or it was deleted (410
/// while forks still read it, else 404).
pub fn gone(store: &crate::store::Store, view: &StreamView) -> ApiError {
    if let Ok(now) = store.find(&view.path) {
        if now
            .restored_from()
            .is_some_and(|(previous, _)| *previous == *view.incarnation)
        {
            return ApiError::Store(crate::store::StoreError::mismatch(&now));
        }
    }
    if view.is_soft_deleted() {
        ApiError::Store(crate::store::StoreError::SoftDeleted)
    } else {
        ApiError::NotFound
    }
}

/// 412 when the request names an incarnation the stream no longer has.
pub fn check_incarnation(view: &StreamView, headers: &HeaderMap) -> Result<(), ApiError> {
    match request::incarnation(headers)? {
        Some(i) if *i != *view.incarnation => {
            Err(ApiError::Store(crate::store::StoreError::mismatch(view)))
        }
        _ => Ok(()),
    }
}

/// The stream a read names, after the checks every read makes: it exists
/// (and has not expired), the request's `Stream-Incarnation` matches, and
/// the read resets the sliding TTL.
pub fn open_for_read(
    state: &super::AppState,
    path: &str,
    headers: &HeaderMap,
) -> Result<Arc<StreamView>, ApiError> {
    let view = state.store.find(path)?;
    check_incarnation(&view, headers)?;
    view.touch(state.store.clock().now_ms());
    Ok(view)
}

/// The byte position a read starts at.
/// `-1` is the earliest byte still readable: the retained offset.
pub fn resolve_start(from: ReadFrom, tail: &End) -> Result<u64, ApiError> {
    match from {
        ReadFrom::Start => Ok(tail.retained),
        ReadFrom::At(o) if o.bytes() < tail.retained => Err(ApiError::Gone {
            retained: tail.retained,
        }),
        ReadFrom::Now => Ok(tail.next),
        ReadFrom::At(o) if o.bytes() > tail.next => {
            Err(ApiError::OffsetBeyondTail { tail: tail.next })
        }
        ReadFrom::At(o) => Ok(o.bytes()),
    }
}

/// A read's floor (`min_next_offset`, decision 0025) against this store's
/// state of the stream. Reached (or no floor, or no such stream: the read
/// answers that itself), the read goes on; the stream's end only grows, so
/// the read's own look at it is past the floor too. Not reached, the
/// write it names is not in this stream: `416` with the end, as a read
/// past the end, at once. In a region only from a store that still owns
/// the partition (`region::vouch`): a paused owner's state may lack what
/// its successor acknowledged, and then answers `503` instead. A
/// follower's replica never gets here below a floor: the region waits
/// for it or forwards (`server::region::replica`).
pub async fn check_floor(
    state: &super::AppState,
    path: &str,
    params: &shared::params::ReadParams,
) -> Result<(), ApiError> {
    let Some(view) = params.floor.and_then(|_| state.store.get(path)) else {
        return Ok(());
    };
    let end = view.end().next;
    if shared::params::floor_reached(params.floor, end) {
        return Ok(());
    }
    state.store.vouch().await?;
    // Vouched: nothing it lacked (an append lands before its answer).
    let end = view.end().next.max(end);
    if shared::params::floor_reached(params.floor, end) {
        return Ok(());
    }
    Err(ApiError::FloorBeyondEnd { end })
}

/// How the bytes of one answer are cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// Anywhere (binary, or NDJSON reads, which may end inside a message).
    Bytes,
    /// On a UTF-8 character boundary (text SSE events).
    Char,
    /// After a whole message (JSON arrays, JSON SSE events).
    Message,
}

/// One answer's worth of a stream.
pub struct Slice {
    pub start: u64,
    pub end: u64,
    pub bytes: Bytes,
    /// The slice reaches the tail it was read against.
    pub up_to_date: bool,
    /// ... and that tail was the end of a closed stream.
    pub closed: bool,
}

/// Reads up to `max` bytes from `start`, cut as `cut` asks. A single message
/// larger than `max` is returned whole so a reader always moves on.
pub async fn read_slice(
    view: &Arc<StreamView>,
    start: u64,
    max: u64,
    tail: End,
    cut: Cut,
) -> Result<Slice, ApiError> {
    let mut end = tail.next.min(start.saturating_add(max));
    let mut bytes = view.read(start, end).await?;
    if end < tail.next {
        match cut {
            Cut::Bytes => {}
            Cut::Char => {
                let keep = shared::sse::utf8_prefix_len(&bytes);
                if keep > 0 {
                    bytes.truncate(keep);
                    end = start + keep as u64;
                }
            }
            Cut::Message => match bytes.iter().rposition(|&b| b == b'\n') {
                Some(i) => {
                    bytes.truncate(i + 1);
                    end = start + i as u64 + 1;
                }
                None => {
                    // One message longer than `max`: read on to its end.
                    let mut grown = bytes.to_vec();
                    while end < tail.next {
                        let step_end = tail.next.min(end + 64 * 1024);
                        let more = view.read(end, step_end).await?;
                        let nl = more.iter().position(|&b| b == b'\n');
                        let take = nl.map_or(more.len(), |i| i + 1);
                        grown.extend_from_slice(&more[..take]);
                        end += take as u64;
                        if nl.is_some() {
                            break;
                        }
                    }
                    bytes = grown.into();
                }
            },
        }
    }
    let up_to_date = end == tail.next;
    Ok(Slice {
        start,
        end,
        bytes,
        up_to_date,
        closed: up_to_date && tail.closed,
    })
}

/// The shape of this request's reads of `view`: as its `Accept` prefers,
/// else the server's default (only JSON streams have a choice).
pub fn negotiate(headers: &HeaderMap, default: JsonReads) -> JsonReads {
    let accept = headers
        .get(http::header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    shared::negotiate::JsonPreference::of(accept).resolve(default)
}

/// `Vary: Accept` on the answers of a JSON stream's reads, whose shape
/// `Accept` chooses, so a cache keeps one answer per shape.
pub fn vary_by_accept(resp: &mut Response<Body>, view: &StreamView) {
    if view.is_json() {
        resp.headers_mut()
            .insert(http::header::VARY, HeaderValue::from_static("accept"));
    }
}

/// The entity tag of a read answer: its range, and its shape when it is
/// a JSON array.
pub fn slice_etag(view: &StreamView, mode: JsonReads, slice: &Slice) -> String {
    let tag = if view.is_json() && mode == JsonReads::Array {
        shared::etag::array_read_etag
    } else {
        shared::etag::read_etag
    };
    tag(
        &view.incarnation,
        Offset(slice.start),
        Offset(slice.end),
        slice.closed,
    )
}

/// How reads of this stream are cut and shaped.
pub fn read_cut(view: &StreamView, mode: JsonReads) -> Cut {
    if view.is_json() && mode == JsonReads::Array {
        Cut::Message
    } else {
        Cut::Bytes
    }
}

/// The body and content type of a read answer.
pub fn shape_body(view: &StreamView, mode: JsonReads, bytes: Bytes) -> (Bytes, String) {
    if view.is_json() {
        match mode {
            JsonReads::Array => (
                Bytes::from(ndjson_to_array(&bytes)),
                view.config.content_type.to_string(),
            ),
            JsonReads::Ndjson => (bytes, shared::content_type::NDJSON.to_owned()),
        }
    } else {
        (bytes, view.config.content_type.to_string())
    }
}

/// The cursor for a live answer (see `shared::cursor`).
pub fn cursor(now_ms: u64, client: Option<&str>) -> String {
    let jitter = 1 + rand::random::<u64>() % shared::cursor::CURSOR_MAX_JITTER_SECS;
    shared::cursor::next_cursor(now_ms / 1000, client, jitter).to_string()
}

/// Headers of an answer that carries a slice: offsets, up-to-date, closed.
pub fn slice_headers(resp: &mut Response<Body>, slice: &Slice) {
    set(resp, h::STREAM_NEXT_OFFSET, Offset(slice.end));
    if slice.up_to_date {
        set(resp, h::STREAM_UP_TO_DATE, "true");
    }
    if slice.closed {
        set(resp, h::STREAM_CLOSED, "true");
    }
}
