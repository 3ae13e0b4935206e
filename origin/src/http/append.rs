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
use std::sync::LazyLock;

use super::body::read_body;
use super::error::ApiError;
use super::nosniff;
use super::reading::set;
use super::request;
use super::Shared;
use crate::core::json;
use crate::core::producer::ProducerClaim;
use crate::core::stream::AppendRequest;
use crate::store::{AppendOutcome, Appended, StreamView};

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
    let content_type = request::value_text(carried.content_type, &http::header::CONTENT_TYPE)?
        .filter(|c| !c.trim().is_empty())
        .map(str::to_owned);
    let view = state.store.find(path)?;
    let body = read_body(state, req).await?;
    let payload = payload(&view, content_type.as_deref(), &body.bytes, close)?;
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
    Ok(answer(state, appended, claim.as_ref(), len, has_producer))
}

/// What an append stores: its body, checked (not empty unless it closes,
/// typed), a JSON body as NDJSON. A body of another type than the stream's
/// goes through untouched so the stream can refuse it as a content-type
/// mismatch.
fn payload(
    view: &StreamView,
    content_type: Option<&str>,
    body: &Bytes,
    close: bool,
) -> Result<Bytes, ApiError> {
    if body.is_empty() && !close {
        return Err(ApiError::Invalid(
            ErrorCode::EmptyBody,
            "an append needs a body (or Stream-Closed: true)".into(),
        ));
    }
    if !body.is_empty() && content_type.is_none() {
        return Err(ApiError::bad("an append with a body needs a Content-Type"));
    }
    let json_body = view.is_json()
        && content_type.is_some_and(|ct| same_media_type(ct, &view.config.content_type));
    if json_body && !body.is_empty() {
        Ok(Bytes::from(json::to_ndjson(body, false).map_err(|e| {
            ApiError::Invalid(ErrorCode::InvalidJson, e.to_string())
        })?))
    } else {
        Ok(body.clone())
    }
}

/// The answer to an append the store took: `204` (`200` with a producer's
/// new data), its end, and a producer's receipt or a duplicate's outcome.
fn answer(
    state: &Shared,
    appended: Appended,
    claim: Option<&ProducerClaim>,
    len: usize,
    has_producer: bool,
) -> Response<Body> {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = StatusCode::NO_CONTENT;
    // An accepted producer's append answers with its receipt in the
    // template's slots; every other answer starts from the plain one.
    let receipt = match (&appended.outcome, claim) {
        (AppendOutcome::Applied { start }, Some(claim)) => Some(Receipt {
            start: *start,
            epoch: claim.epoch,
            seq: claim.seq,
        }),
        _ => None,
    };
    *resp.headers_mut() = answer_headers(&appended.view, appended.end.next, receipt);
    if appended.end.closed {
        set(&mut resp, h::STREAM_CLOSED, "true");
    }
    match appended.outcome {
        AppendOutcome::Applied { .. } => {
            // A producer's receipt is in the headers already (above); a
            // plain append answers as the protocol says, with the new end
            // only: every header more is work for every client (a hyper
            // client: ~1k instructions per answer).
            state.metrics.appended(len);
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
    resp
}

/// What an accepted producer's append answers besides its end: where it
/// starts, and the producer's epoch and sequence number.
struct Receipt {
    start: u64,
    epoch: u64,
    seq: u64,
}

/// An append's answer headers, cloned from one of two templates built once
/// per process and filled by position: a template's entries keep the order
/// they were inserted in, so each value is written into its slot without
/// hashing a name or growing the map (set by name, the five values of a
/// producer's receipt and the request id's echo cost ~2,300 instructions
/// per append, 7 % of the whole). A template per stream would cost every
/// stream several hundred bytes, which a million streams cannot afford.
///
/// Slots: the stream's incarnation and next offset, then (a receipt) the
/// append's start, the producer's epoch and sequence number; then values
/// every answer of the template shares: `Producer-Outcome: accepted` (a
/// receipt), `nosniff`, and the request id's slot, which the server fills
/// on the way out (`shell::request_id::answered`). An append's answer has
/// no body, so it goes without `Cross-Origin-Resource-Policy`, which
/// governs only whether a body may be embedded (every answer with a body,
/// refusals included, carries it); the public conformance suite checks
/// `nosniff` on every answer, so that stays.
fn answer_headers(view: &StreamView, next: u64, receipt: Option<Receipt>) -> HeaderMap {
    static PLAIN: LazyLock<HeaderMap> = LazyLock::new(|| template(false));
    static RECEIPT: LazyLock<HeaderMap> = LazyLock::new(|| template(true));
    let (mut map, receipt) = match receipt {
        None => (PLAIN.clone(), None),
        Some(r) => (
            RECEIPT.clone(),
            Some([
                Offset(r.start).header_value(),
                HeaderValue::from(r.epoch),
                HeaderValue::from(r.seq),
            ]),
        ),
    };
    let values = [view.incarnation_header(), Offset(next).header_value()]
        .into_iter()
        .chain(receipt.into_iter().flatten());
    fill(&mut map, values);
    map
}

/// Writes `values` into the first slots of `map`, in order.
fn fill(map: &mut HeaderMap, values: impl Iterator<Item = HeaderValue>) {
    for (slot, value) in map.values_mut().zip(values) {
        *slot = value;
    }
}

/// A template of [`answer_headers`]: its slots in order, each empty until
/// filled.
fn template(receipt: bool) -> HeaderMap {
    let empty = || HeaderValue::from_static("");
    let mut map = HeaderMap::with_capacity(8);
    map.insert(h::STREAM_INCARNATION, empty());
    map.insert(h::STREAM_NEXT_OFFSET, empty());
    if receipt {
        map.insert(h::STREAM_OFFSET, empty());
        map.insert(h::PRODUCER_EPOCH, empty());
        map.insert(h::PRODUCER_SEQ, empty());
        map.insert(h::PRODUCER_OUTCOME, HeaderValue::from_static("accepted"));
    }
    nosniff(&mut map);
    map.insert(shell::request_id::HEADER, empty());
    map
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_value_lands_in_its_named_slot() {
        let v = HeaderValue::from_static;
        let mut plain = template(false);
        fill(&mut plain, [v("inc"), v("next")].into_iter());
        let mut receipt = template(true);
        fill(
            &mut receipt,
            [v("inc"), v("next"), v("start"), v("7"), v("9")].into_iter(),
        );
        for map in [&plain, &receipt] {
            assert_eq!(map[h::STREAM_INCARNATION], "inc");
            assert_eq!(map[h::STREAM_NEXT_OFFSET], "next");
            assert_eq!(map[http::header::X_CONTENT_TYPE_OPTIONS], "nosniff");
            assert!(map.contains_key(shell::request_id::HEADER));
        }
        assert_eq!(plain.len(), 4);
        assert_eq!(receipt[h::STREAM_OFFSET], "start");
        assert_eq!(receipt[h::PRODUCER_EPOCH], "7");
        assert_eq!(receipt[h::PRODUCER_SEQ], "9");
        assert_eq!(receipt[h::PRODUCER_OUTCOME], "accepted");
        assert_eq!(receipt.len(), 8);
    }
}
