//! `PUT {stream}`: create a stream, or confirm one with the same configuration.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Response, StatusCode};
use axum::response::IntoResponse;
use bytes::Bytes;
use shared::content_type;
use shared::error::ErrorCode;
use shared::headers as h;
use shared::offset::Offset;
use shared::paths::validate_stream_path;

use super::body::read_body;
use super::error::ApiError;
use super::fork;
use super::reading::{set, stream_headers};
use super::request;
use super::Shared;
use crate::core::config::StreamConfig;
use crate::core::json;
use crate::store::Created;

pub async fn create(state: Shared, path: String, req: Request) -> Response<Body> {
    run(&state, path, req)
        .await
        .unwrap_or_else(IntoResponse::into_response)
}

async fn run(state: &Shared, path: String, req: Request) -> Result<Response<Body>, ApiError> {
    validate_stream_path(&path).map_err(|why| ApiError::bad(why.to_owned()))?;
    let headers = req.headers();
    let sent_type = sent_content_type(headers)?;
    let expiry = request::expiry(headers)?;
    let fork = fork::request(headers, sent_type.as_deref(), expiry)?;
    let content_type = sent_type.unwrap_or_else(|| "application/octet-stream".to_owned());
    let closed = request::stream_closed(headers);
    let public = stream_public(headers)?;
    let host = headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("localhost")
        .to_owned();
    let body = read_body(state, req).await?;
    let mut plan = match fork {
        Some(f) => Some(fork::plan(state, &path, f).await?),
        None => None,
    };
    // Who reads a fork without a credential is its creator's choice.
    if let Some(r) = plan.as_mut().and_then(|p| p.resolved.as_mut()) {
        r.config.public = public.unwrap_or(false);
    }
    // A fork's content type is its source's.
    let json = match plan.as_ref().and_then(|p| p.resolved.as_ref()) {
        Some(r) => r.config.is_json(),
        None => content_type::is_json(&content_type),
    };
    let config = StreamConfig {
        content_type: content_type.into(),
        expiry,
        public: public.unwrap_or(false),
    };
    let payload = if json && !body.bytes.is_empty() {
        Bytes::from(
            json::to_ndjson(&body.bytes, true)
                .map_err(|e| ApiError::Invalid(ErrorCode::InvalidJson, e.to_string()))?,
        )
    } else {
        body.bytes.clone()
    };
    let len = payload.len();
    let created = match plan {
        Some(plan) => {
            state
                .store
                .fork(path.clone(), plan, closed, payload)
                .await?
        }
        None => {
            state
                .store
                .create(path.clone(), config, closed, payload)
                .await?
        }
    };
    if created.created {
        state.metrics.appended(len);
    } else if let Some(p) = public.filter(|p| *p != created.view.is_public()) {
        // The stream exists with this configuration: a full key may change
        // who reads it.
        state
            .store
            .set_public(path.clone(), created.view.incarnation.to_string(), p)
            .await?;
    }
    Ok(answer(&created, &host, &path))
}

/// `201` with the new stream's `Location`, or `200` for one that was there
/// with this configuration.
fn answer(created: &Created, host: &str, path: &str) -> Response<Body> {
    let mut resp = Response::new(Body::empty());
    *resp.status_mut() = if created.created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    stream_headers(&mut resp, &created.view);
    set(
        &mut resp,
        "content-type",
        &*created.view.config.content_type,
    );
    set(&mut resp, h::STREAM_NEXT_OFFSET, Offset(created.end.next));
    if created.end.closed {
        set(&mut resp, h::STREAM_CLOSED, "true");
    }
    if created.view.is_public() {
        set(&mut resp, h::STREAM_PUBLIC, "true");
    }
    if created.created {
        set(&mut resp, "location", format!("http://{host}{path}"));
    }
    resp
}

/// The request's `Content-Type`, if it sent one (checked).
fn sent_content_type(headers: &http::HeaderMap) -> Result<Option<String>, ApiError> {
    match request::text(headers, &http::header::CONTENT_TYPE)? {
        Some(ct) if !ct.trim().is_empty() => {
            if !content_type::is_valid(ct) {
                return Err(ApiError::bad(format!("{ct:?} is not a media type")));
            }
            Ok(Some(ct.to_owned()))
        }
        _ => Ok(None),
    }
}

/// `Stream-Public`, if sent: `true` or `false`.
fn stream_public(headers: &http::HeaderMap) -> Result<Option<bool>, ApiError> {
    match request::text(headers, &h::STREAM_PUBLIC)? {
        None => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("true") => Ok(Some(true)),
        Some(v) if v.eq_ignore_ascii_case("false") => Ok(Some(false)),
        Some(v) => Err(ApiError::bad(format!(
            "Stream-Public is true or false, not {v:?}"
        ))),
    }
}
