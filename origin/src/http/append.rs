//! `POST {stream}`: append, close, or both; exactly once with producer headers.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode};
use axum::response::IntoResponse;
use bytes::Bytes;
use shared::content_type::same_media_type;
use shared::error::ErrorCode;
use shared::headers as h;
use shared::offset::Offset;

use super::body::read_body;
use super::error::ApiError;
use super::nosniff;
use super::reading::set;
use super::request;
use super::Shared;
use crate::core::json;
use crate::core::stream::AppendRequest;
use crate::store::{AppendOutcome, StreamView};

pub async fn append(state: Shared, path: &str, req: Request) -> Response<Body> {
    run(&state, path, req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn run(state: &Shared, path: &str, req: Request) -> Result<Response<Body>, ApiError> {
    let headers = req.headers();
    let carried = request::Carried::scan(headers);
    let close = carried.closed && request::stream_closed(headers);
    let producer = match carried.producer {
        true => request::producer(headers)?,
        false => None,
    };
    let stream_seq = match carried.stream_seq {
        true => request::stream_seq(headers)?,
        false => None,
    };
    let incarnation = match carried.incarnation {
        true => request::incarnation(headers)?,
        false => None,
    };
    let content_type = request::text(headers, &http::header::CONTENT_TYPE)?
        .filter(|c| !c.trim().is_empty())
        .map(str::to_owned);
    let view = state.store.find(path)?;
    let body = read_body(state, req).await?;
    if body.bytes.is_empty() && !close {
        return Err(ApiError::Invalid(
            ErrorCode::EmptyBody,
            "an append needs a body (or Stream-Closed: true)".into(),
        ));
    }
    if !body.bytes.is_empty() && content_type.is_none() {
        return Err(ApiError::bad("an append with a body needs a Content-Type"));
    }
    // JSON bodies are stored as NDJSON; a body of another type goes through
    // untouched so the stream can refuse it as a content-type mismatch.
    let json_body = view.is_json()
        && content_type
            .as_deref()
            .is_some_and(|ct| same_media_type(ct, &view.config.content_type));
    let payload = if json_body && !body.bytes.is_empty() {
        Bytes::from(
            json::to_ndjson(&body.bytes, false)
                .map_err(|e| ApiError::Invalid(ErrorCode::InvalidJson, e.to_string()))?,
        )
    } else {
        body.bytes.clone()
    };
    let len = payload.len();
    let has_producer = producer.is_some();
    let claim = producer.clone();
    let request = AppendRequest {
        content_type,
        payload_len: len as u64,
        producer,
        stream_seq,
        close,
    };
    let submitted = tokio::time::Instant::now();
    let appended = state
        .store
        .append(view, incarnation, request, payload)
        .await?;
    state.metrics.append_acknowledged(submitted.elapsed());
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    *resp.headers_mut() = answer_headers(&appended.view);
    set(&mut resp, h::STREAM_NEXT_OFFSET, Offset(appended.tail.next));
    if appended.tail.closed {
        set(&mut resp, h::STREAM_CLOSED, "true");
    }
    match appended.outcome {
        AppendOutcome::Applied { start } => {
            state.metrics.appended(len);
            if let Some(claim) = claim {
                // The receipt: where the append starts (it ends at the next
                // offset). A plain append answers as the protocol says,
                // with the new end only: every header more is work for every
                // client (a hyper client: ~1k instructions per answer).
                set(&mut resp, h::STREAM_OFFSET, Offset(start));
                set(&mut resp, h::PRODUCER_EPOCH, claim.epoch);
                set(&mut resp, h::PRODUCER_SEQ, claim.seq);
                set(&mut resp, h::PRODUCER_OUTCOME, "accepted");
            }
            // New data from a producer is 200 (its offsets are the receipt);
            // everything else that succeeds is 204.
            if has_producer && len > 0 {
                *resp.status_mut() = StatusCode::OK;
            }
        }
        AppendOutcome::Duplicate {
            epoch,
            highest_seq,
            receipt,
        } => {
            set(&mut resp, h::PRODUCER_EPOCH, epoch);
            set(&mut resp, h::PRODUCER_SEQ, highest_seq);
            set(&mut resp, h::PRODUCER_OUTCOME, "duplicate");
            // The original append's own offsets, when its receipt is kept
            // (they replace the current end set above).
            if let Some(r) = receipt {
                set(&mut resp, h::STREAM_OFFSET, Offset(r.start));
                set(&mut resp, h::STREAM_NEXT_OFFSET, Offset(r.end));
            }
        }
        AppendOutcome::AlreadyClosed => {}
    }
    Ok(resp)
}

/// The headers every append answer starts from, built once per process and
/// cloned: `nosniff` and a slot for the next offset (set per answer, so a
/// plain append's map never grows); the stream's incarnation is added per
/// answer. Building the map per answer (hashing each name, growing it) was
/// a fifth of this handler's work; a template per stream cost every stream
/// several hundred bytes, which a million streams cannot afford.
/// An append's answer has no body, so it goes without
/// `Cross-Origin-Resource-Policy`, which governs only whether a body may be
/// embedded (every answer with a body, refusals included, carries it); the
/// public conformance suite checks `nosniff` on every answer, so that stays.
fn answer_headers(view: &StreamView) -> HeaderMap {
    static TEMPLATE: std::sync::LazyLock<HeaderMap> = std::sync::LazyLock::new(|| {
        let mut map = HeaderMap::with_capacity(8);
        map.insert(h::STREAM_INCARNATION, HeaderValue::from_static(""));
        map.insert(h::STREAM_NEXT_OFFSET, HeaderValue::from_static(""));
        nosniff(&mut map);
        map
    });
    let mut map = TEMPLATE.clone();
    map.insert(h::STREAM_INCARNATION, view.incarnation_header());
    map
}
