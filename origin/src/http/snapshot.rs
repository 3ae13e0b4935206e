//! Snapshots: publish (whole, or staged in parts), read the latest, read it
//! at its cacheable URL, and advance retention to it.
//!
//! The publish request follows Ursula's snapshot extension
//! (`PUT {stream}/snapshot/{offset}`, `Content-Type` stored, optional
//! `Stream-Snapshot-Match`, answer carries `Stream-Snapshot-Digest`). What it
//! leaves open, chosen here (README, "Snapshots"):
//! - A snapshot larger than the request limit goes up in parts:
//!   `PUT {stream}/snapshot/{offset}/part/{n}` (n = 0, 1, …; each part at most
//!   the request limit) stages them, then `PUT {stream}/snapshot/{offset}`
//!   with `Stream-Snapshot-Parts: N` and no body publishes parts `0..N` in
//!   order. Staged parts live on the origin's disk until the publish, the
//!   stream's delete, an hour untouched, or a restart (in a region also in
//!   the bucket, so they outlive the owner: `staging_bucket`); all parts of one
//!   offset together stay under `Ursula-Max-Snapshot-Bytes`, and
//!   [`super::staging`] bounds the offsets per stream and the disk in total.
//! - The digest is the SHA-256 of the blob's bytes, so a reader can check
//!   what it fetched with any SHA-256 tool.
//! - Retention advances explicitly, to the latest snapshot only:
//!   `PUT {stream}/snapshot/{offset}/retain` (Ursula's `retention/{offset}`
//!   path is not reserved in our path model; this one is).
//! - `GET {stream}/snapshot` answers the latest snapshot itself (not a
//!   redirect) with `Content-Location` naming its cacheable URL.
//!
//! Blobs stream from object storage to the client (memory holds a few
//! buffers per reader, not the blob). A publish of staged parts assembles
//! the blob in memory for one plain put, holding room for it in the ingress
//! budget, so all bodies and assemblies together stay under that one bound.
//! (A multipart upload would stream instead; s3s-fs, which the tests run
//! against, refuses multipart uploads, and one code path is better tested.)

use std::ops::Range;
use std::path::PathBuf;
use std::sync::Arc;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, Response, StatusCode};
use axum::response::IntoResponse;
use futures::TryStreamExt;
use sha2::{Digest, Sha256};
use shared::error::ErrorCode;
use shared::etag::if_none_match_hits;
use shared::headers as h;
use shared::offset::Offset;

use super::body::read_body;
use super::chunk::{open_cacheable, IMMUTABLE};
use super::error::{error_response, ApiError};
use super::reading::{check_incarnation, set, stream_headers};
use super::Shared;
use crate::core::snapshot::{SnapshotMeta, SnapshotRefusal};
use crate::core::staging::UploadKey;
use crate::objects::keys;
use crate::store::{StoreError, StreamView};

/// Most parts one snapshot may be staged in.
const MAX_PARTS: u32 = 10_000;

/// Whether `rest` (what follows the stream) names a snapshot resource.
pub fn is_resource(rest: &str) -> bool {
    let parts: Vec<&str> = rest.split('/').collect();
    matches!(
        parts.as_slice(),
        ["snapshot"] | ["snapshot", _] | ["snapshot", _, "part", _] | ["snapshot", _, "retain"]
    )
}

/// `{stream}/snapshot…` requests by the shape of what follows the stream.
pub async fn route(
    state: Shared,
    stream: String,
    rest: String,
    req: Request,
) -> (&'static str, Response<Body>) {
    let parts: Vec<&str> = rest.split('/').collect();
    let method = req.method().clone();
    let reading = method == Method::GET || method == Method::HEAD;
    let result = match (parts.as_slice(), &method) {
        (["snapshot"], _) if reading => read_latest(&state, &stream, None, req).await,
        (["snapshot", offset], _) if reading => {
            read_latest(&state, &stream, Some(offset), req).await
        }
        (["snapshot", offset], &Method::PUT) => publish(&state, &stream, offset, req).await,
        (["snapshot", offset, "part", n], &Method::PUT) => {
            stage(&state, &stream, offset, n, req).await
        }
        (["snapshot", offset, "retain"], &Method::PUT) => {
            retain(&state, &stream, offset, req).await
        }
        (["snapshot"], _) => Ok(super::method_not_allowed("GET, HEAD, OPTIONS")),
        (["snapshot", _], _) => Ok(super::method_not_allowed("GET, HEAD, PUT, OPTIONS")),
        (["snapshot", _, "part", _] | ["snapshot", _, "retain"], _) => {
            Ok(super::method_not_allowed("PUT, OPTIONS"))
        }
        _ => Err(ApiError::Invalid(
            ErrorCode::NotFound,
            "no such resource".into(),
        )),
    };
    (
        "snapshot",
        result.unwrap_or_else(IntoResponse::into_response),
    )
}

fn parse_offset(s: &str) -> Result<u64, ApiError> {
    Offset::parse(s).map(Offset::bytes).ok_or_else(|| {
        ApiError::Invalid(
            ErrorCode::InvalidOffset,
            format!("{s:?} is not an offset this server gives"),
        )
    })
}

fn open(
    state: &Shared,
    stream: &str,
    req: &Request,
) -> Result<std::sync::Arc<StreamView>, ApiError> {
    let view = state.store.find(stream)?;
    check_incarnation(&view, req.headers())?;
    Ok(view)
}

fn upload_key(view: &StreamView, offset: u64) -> UploadKey {
    UploadKey {
        path: Arc::clone(&view.path),
        incarnation: Arc::clone(&view.incarnation),
        offset,
    }
}

fn unavailable(e: impl std::fmt::Display) -> ApiError {
    tracing::warn!(error = %e, "object storage refused a snapshot operation");
    ApiError::Busy("object storage cannot take the snapshot right now")
}

/// A snapshot's offset lies within what the stream holds (not past its
/// end, not below its retention) and, in a JSON stream, between messages.
async fn check_point(view: &Arc<StreamView>, offset: u64) -> Result<(), ApiError> {
    let end = view.end();
    if offset > end.next {
        return Err(
            StoreError::SnapshotRefused(SnapshotRefusal::BeyondTail { tail: end.next }).into(),
        );
    }
    if offset < end.retained {
        return Err(ApiError::Gone {
            retained: end.retained,
        });
    }
    if view.is_json() && offset > 0 && view.read(offset - 1, offset).await?[..] != *b"\n" {
        return Err(ApiError::bad(
            "a JSON stream's snapshot offset must fall between two messages",
        ));
    }
    Ok(())
}

/// `Stream-Snapshot-Parts`: how many staged parts the publish assembles.
fn parts_header(headers: &http::HeaderMap) -> Result<Option<u32>, ApiError> {
    super::request::text(headers, &h::STREAM_SNAPSHOT_PARTS)?
        .map(|n| {
            n.parse::<u32>()
                .ok()
                .filter(|n| (1..=MAX_PARTS).contains(n))
                .ok_or_else(|| {
                    ApiError::bad(format!("Stream-Snapshot-Parts must be 1 to {MAX_PARTS}"))
                })
        })
        .transpose()
}

/// Puts a snapshot sent whole in the request's body; its digest and length.
async fn put_body(
    state: &Shared,
    objects: &crate::objects::instrumented::Objects,
    view: &StreamView,
    offset: u64,
    req: Request,
) -> Result<(String, u64), ApiError> {
    let max = state.config.max_snapshot;
    let body = read_body(state, req).await?;
    let len = body.bytes.len() as u64;
    if len > max {
        return Err(ApiError::PayloadTooLarge { limit: max });
    }
    let digest = hex::encode(Sha256::digest(&body.bytes));
    let key = keys::snapshot(&view.path, &view.incarnation, Offset(offset), &digest);
    objects
        .put(&key, body.bytes.clone())
        .await
        .map_err(unavailable)?;
    Ok((digest, len))
}

/// Puts a snapshot assembled from its `n` staged parts; its digest,
/// length and the hold on the parts (let go once published).
async fn put_staged(
    state: &Shared,
    objects: &crate::objects::instrumented::Objects,
    view: &StreamView,
    offset: u64,
    n: u32,
    req: Request,
) -> Result<(String, u64, super::staging::Hold), ApiError> {
    let max = state.config.max_snapshot;
    let client = super::ingress::client_of(state, &req);
    let body = read_body(state, req).await?;
    if !body.bytes.is_empty() {
        return Err(ApiError::bad("a publish of staged parts carries no body"));
    }
    let not_staged = |i: usize| ApiError::bad(format!("part {i} of the snapshot was not staged"));
    let now = state.store.clock().now_ms();
    // In a region, parts an earlier owner of the partition staged.
    state
        .staging
        .bring_back(&upload_key(view, offset), now)
        .await?;
    let hold = state
        .staging
        .hold(upload_key(view, offset), now)
        .ok_or_else(|| not_staged(0))?;
    let files: Vec<PathBuf> = (0..n).map(|i| hold.part_file(i)).collect();
    let mut len: u64 = 0;
    for (i, f) in files.iter().enumerate() {
        let part = tokio::fs::metadata(f)
            .await
            .map_err(|_| not_staged(i))?
            .len();
        len = len
            .checked_add(part)
            .filter(|len| *len <= max)
            .ok_or(ApiError::PayloadTooLarge { limit: max })?;
    }
    let _room = state.ingress.reserve(&client, len).await?;
    let mut blob = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    for f in &files {
        blob.extend_from_slice(&tokio::fs::read(f).await?);
    }
    let blob = bytes::Bytes::from(blob);
    let digest = hex::encode(Sha256::digest(&blob));
    let key = keys::snapshot(&view.path, &view.incarnation, Offset(offset), &digest);
    objects.put(&key, blob).await.map_err(unavailable)?;
    Ok((digest, len, hold))
}

async fn publish(
    state: &Shared,
    stream: &str,
    offset: &str,
    req: Request,
) -> Result<Response<Body>, ApiError> {
    let offset = parse_offset(offset)?;
    let view = open(state, stream, &req)?;
    let objects = state
        .store
        .objects()
        .ok_or_else(|| ApiError::bad("this server has no object storage for snapshots"))?
        .clone();
    check_point(&view, offset).await?;
    let headers = req.headers();
    let content_type = super::request::text(headers, &http::header::CONTENT_TYPE)?
        .unwrap_or("application/octet-stream")
        .to_owned();
    let expect = super::request::text(headers, &h::STREAM_SNAPSHOT_MATCH)?.map(str::to_owned);
    let (digest, len, staged) = match parts_header(headers)? {
        None => {
            let (digest, len) = put_body(state, &objects, &view, offset, req).await?;
            (digest, len, None)
        }
        Some(n) => {
            let (digest, len, hold) = put_staged(state, &objects, &view, offset, n, req).await?;
            (digest, len, Some(hold))
        }
    };
    let meta = SnapshotMeta {
        offset,
        len,
        digest: digest.clone(),
        content_type,
    };
    state
        .store
        .snapshot(
            stream.to_owned(),
            Some(view.incarnation.to_string()),
            meta,
            expect,
        )
        .await?;
    if let Some(hold) = staged {
        hold.published().await;
    }
    state.metrics.snapshot_published();
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    stream_headers(&mut resp, &view);
    set(&mut resp, h::STREAM_SNAPSHOT_OFFSET, Offset(offset));
    set(&mut resp, h::STREAM_SNAPSHOT_DIGEST, digest);
    Ok(resp)
}

async fn stage(
    state: &Shared,
    stream: &str,
    offset: &str,
    n: &str,
    req: Request,
) -> Result<Response<Body>, ApiError> {
    let offset = parse_offset(offset)?;
    let n: u32 = n
        .parse()
        .ok()
        .filter(|n| *n < MAX_PARTS)
        .ok_or_else(|| ApiError::bad(format!("a part number is 0 to {}", MAX_PARTS - 1)))?;
    let view = open(state, stream, &req)?;
    let body = read_body(state, req).await?;
    let now = state.store.clock().now_ms();
    state
        .staging
        .stage(upload_key(&view, offset), n, body.bytes.clone(), now)
        .await?;
    drop(body);
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    stream_headers(&mut resp, &view);
    Ok(resp)
}

async fn retain(
    state: &Shared,
    stream: &str,
    offset: &str,
    req: Request,
) -> Result<Response<Body>, ApiError> {
    let offset = parse_offset(offset)?;
    let view = open(state, stream, &req)?;
    state
        .store
        .retain(
            stream.to_owned(),
            Some(view.incarnation.to_string()),
            offset,
        )
        .await?;
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    stream_headers(&mut resp, &view);
    set(
        &mut resp,
        h::STREAM_RETAINED_OFFSET,
        Offset(view.end().retained),
    );
    Ok(resp)
}

/// `GET {stream}/snapshot` (latest) or `GET {stream}/snapshot/{offset}`
/// (404 unless it is the latest).
async fn read_latest(
    state: &Shared,
    stream: &str,
    offset: Option<&str>,
    req: Request,
) -> Result<Response<Body>, ApiError> {
    let wanted = offset.map(parse_offset).transpose()?;
    let view = open(state, stream, &req)?;
    view.touch(state.store.clock().now_ms());
    let (meta, owner) = latest(&view, wanted)?;
    serve(state, &view, &owner, meta, false, Ask::of(&req)).await
}

/// `GET {stream}/incarnation/{token}/snapshot/{offset}`: the latest snapshot
/// at a URL whose answer never changes.
pub async fn read_cacheable(
    state: Shared,
    stream: String,
    token: String,
    offset: String,
    req: Request,
) -> Response<Body> {
    let has_query = req.uri().query().is_some();
    let ask = Ask::of(&req);
    drop(req);
    let run = async {
        let (view, wanted) = open_cacheable(&state, &stream, &token, &offset, has_query)?;
        let wanted = wanted.bytes();
        let (meta, owner) = latest(&view, Some(wanted))?;
        serve(&state, &view, &owner, meta, true, ask).await
    };
    run.await.unwrap_or_else(IntoResponse::into_response)
}

/// The latest snapshot a reader of `view` starts from (a fork's may be
/// its source's), and the stream whose object it is.
fn latest(
    view: &std::sync::Arc<StreamView>,
    wanted: Option<u64>,
) -> Result<(SnapshotMeta, std::sync::Arc<StreamView>), ApiError> {
    match view.bootstrap_snapshot() {
        Some((m, owner)) if wanted.is_none_or(|w| w == m.offset) => Ok((m, owner)),
        Some((m, _)) => {
            let mut r = error_response(
                ErrorCode::SnapshotNotFound,
                "this offset is not the latest snapshot's",
            );
            set(&mut r, h::STREAM_SNAPSHOT_OFFSET, Offset(m.offset));
            Err(ApiError::Ready(Box::new(r)))
        }
        None => Err(ApiError::Invalid(
            ErrorCode::SnapshotNotFound,
            "the stream has no snapshot".into(),
        )),
    }
}

/// What a `Range` header asks of a blob of `len` bytes.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Wanted {
    All,
    Part(Range<u64>),
    Unsatisfiable,
}

/// One `bytes=` range (`a-b`, `a-`, `-n`); anything else (several ranges,
/// other units, malformed) is ignored and the whole blob served, as HTTP
/// allows.
pub(crate) fn wanted_range(header: Option<&str>, len: u64) -> Wanted {
    let Some(spec) = header.and_then(|h| h.trim().strip_prefix("bytes=")) else {
        return Wanted::All;
    };
    if spec.contains(',') {
        return Wanted::All;
    }
    let Some((a, b)) = spec.trim().split_once('-') else {
        return Wanted::All;
    };
    let (a, b) = (a.trim(), b.trim());
    let range = match (a.parse::<u64>().ok(), b.parse::<u64>().ok()) {
        (None, Some(n)) if a.is_empty() => {
            if n == 0 {
                return Wanted::Unsatisfiable;
            }
            len.saturating_sub(n)..len
        }
        (Some(s), None) if b.is_empty() => s..len,
        // `e` is the request's: the last byte of the range has no next.
        (Some(s), Some(e)) if e >= s => s..e.saturating_add(1).min(len),
        _ => return Wanted::All,
    };
    if range.start >= len {
        Wanted::Unsatisfiable
    } else {
        Wanted::Part(range)
    }
}

/// What a snapshot read asks besides the snapshot.
struct Ask {
    if_none_match: Option<String>,
    range: Option<String>,
    head_only: bool,
}

impl Ask {
    fn of(req: &Request) -> Ask {
        let text = |name: &str| {
            req.headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        Ask {
            if_none_match: text("if-none-match"),
            range: text("range"),
            head_only: req.method() == Method::HEAD,
        }
    }
}

async fn serve(
    state: &Shared,
    view: &StreamView,
    owner: &StreamView,
    meta: SnapshotMeta,
    immutable: bool,
    ask: Ask,
) -> Result<Response<Body>, ApiError> {
    let etag = format!("\"{}\"", meta.digest);
    let inm = ask.if_none_match.as_deref();
    let range = ask.range.as_deref();
    let head_only = ask.head_only;
    let mut resp = Response::new(Body::empty());
    if inm.is_some_and(|inm| if_none_match_hits(inm, &etag)) {
        *resp.status_mut() = StatusCode::NOT_MODIFIED;
    } else {
        let wanted = wanted_range(range, meta.len);
        let (status, span) = match wanted {
            Wanted::All => (StatusCode::OK, 0..meta.len),
            Wanted::Part(r) => (StatusCode::PARTIAL_CONTENT, r),
            Wanted::Unsatisfiable => {
                let mut r = error_response(
                    ErrorCode::RangeNotSatisfiable,
                    "the range is outside the snapshot",
                );
                set(&mut r, "content-range", format!("bytes */{}", meta.len));
                return Ok(r);
            }
        };
        *resp.status_mut() = status;
        if status == StatusCode::PARTIAL_CONTENT {
            set(
                &mut resp,
                "content-range",
                format!("bytes {}-{}/{}", span.start, span.end - 1, meta.len),
            );
        }
        set(
            &mut resp,
            http::header::CONTENT_LENGTH,
            span.end - span.start,
        );
        if !head_only && span.end > span.start {
            let objects = state
                .store
                .objects()
                .ok_or_else(|| ApiError::Internal("no object storage".into()))?;
            let key = keys::snapshot(
                &owner.path,
                &owner.incarnation,
                Offset(meta.offset),
                &meta.digest,
            );
            let stream = objects
                .get_stream(
                    &key,
                    (status == StatusCode::PARTIAL_CONTENT).then_some(span.clone()),
                )
                .await
                .map_err(|e| {
                    tracing::warn!(error = %e, "a snapshot cannot be read from object storage");
                    ApiError::Busy("the snapshot cannot be read from object storage right now")
                })?;
            state.metrics.served((span.end - span.start) as usize);
            *resp.body_mut() = Body::from_stream(stream.map_err(std::io::Error::other));
        }
    }
    stream_headers(&mut resp, view);
    set(&mut resp, http::header::CONTENT_TYPE, &meta.content_type);
    set(&mut resp, h::STREAM_SNAPSHOT_OFFSET, Offset(meta.offset));
    set(&mut resp, h::STREAM_SNAPSHOT_DIGEST, &meta.digest);
    // Reading goes on from the snapshot's offset.
    set(&mut resp, h::STREAM_NEXT_OFFSET, Offset(meta.offset));
    set(&mut resp, http::header::ETAG, etag);
    set(&mut resp, http::header::ACCEPT_RANGES, "bytes");
    if immutable {
        // On a 304 too, as chunks do: it says the same answer.
        set(&mut resp, h::STREAM_IMMUTABLE, "true");
        set(&mut resp, http::header::CACHE_CONTROL, IMMUTABLE);
    } else {
        if view.end().next == meta.offset {
            set(&mut resp, h::STREAM_UP_TO_DATE, "true");
        }
        set(&mut resp, http::header::CACHE_CONTROL, "no-cache");
        set(
            &mut resp,
            http::header::CONTENT_LOCATION,
            format!(
                "{}/incarnation/{}/snapshot/{}",
                view.path,
                view.incarnation,
                Offset(meta.offset)
            ),
        );
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges() {
        assert_eq!(wanted_range(None, 10), Wanted::All);
        assert_eq!(wanted_range(Some("bytes=0-3"), 10), Wanted::Part(0..4));
        assert_eq!(wanted_range(Some("bytes=5-"), 10), Wanted::Part(5..10));
        assert_eq!(wanted_range(Some("bytes=-3"), 10), Wanted::Part(7..10));
        assert_eq!(wanted_range(Some("bytes=-30"), 10), Wanted::Part(0..10));
        assert_eq!(wanted_range(Some("bytes=8-100"), 10), Wanted::Part(8..10));
        assert_eq!(wanted_range(Some("bytes=10-"), 10), Wanted::Unsatisfiable);
        assert_eq!(wanted_range(Some("bytes=-0"), 10), Wanted::Unsatisfiable);
        assert_eq!(wanted_range(Some("bytes=0-1,3-4"), 10), Wanted::All);
        assert_eq!(wanted_range(Some("items=0-1"), 10), Wanted::All);
        assert_eq!(wanted_range(Some("bytes=4-2"), 10), Wanted::All);
        // The largest last byte a request can name does not wrap.
        assert_eq!(
            wanted_range(Some("bytes=5-18446744073709551615"), 1000),
            Wanted::Part(5..1000)
        );
        assert_eq!(
            wanted_range(Some("bytes=18446744073709551615-"), 1000),
            Wanted::Unsatisfiable
        );
    }
}
