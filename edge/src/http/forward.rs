//! Everything the edge does not answer itself goes to the origin as it
//! came, and the origin's answer comes back as it streams: statuses,
//! headers and bodies intact (only the headers of one connection are
//! dropped), so producer semantics, errors and `ETag`s are the origin's.

use std::convert::Infallible;

use axum::body::Body;
use axum::response::IntoResponse;
use futures::StreamExt;
use http::{HeaderMap, HeaderValue, Request, Response};
use http_body_util::BodyStream;

use super::error::EdgeError;
use super::Shared;
use crate::metrics;

pub async fn forward(state: &Shared, req: Request<Body>) -> Response<Body> {
    match state
        .upstream
        .forward(req, metrics::Upstream::Forward)
        .await
    {
        Ok(resp) => resp.map(Body::new),
        Err(e) => EdgeError::from(e).into_response(),
    }
}

/// [`forward`] for a request whose answer may name a URL (a create's
/// `Location`): it names the edge (see [`public_locations`]). Appends,
/// which never do, go without it: their future stays small.
pub async fn forward_naming_the_edge(state: &Shared, req: Request<Body>) -> Response<Body> {
    let host = req.headers().get(http::header::HOST).cloned();
    let mut resp = forward(state, req).await;
    public_locations(state, host.as_ref(), resp.headers_mut());
    resp
}

/// [`forward`] for the control APIs under `__ds` (subscriptions): the
/// origin writes URLs into what it answers and sends (callback and JWKS
/// URLs), so it is told how the client reached the edge
/// (`X-Forwarded-Host`, `X-Forwarded-Proto`: the edge's `--public-url`,
/// else the client's `Host`). Never cached: each answer is the origin's.
pub async fn forward_control(state: &Shared, mut req: Request<Body>) -> Response<Body> {
    let base = public_base(state, req.headers().get(http::header::HOST));
    if let Some((proto, rest)) = base.split_once("://") {
        let host = rest.split('/').next().unwrap_or(rest);
        let headers = req.headers_mut();
        for (name, value) in [("x-forwarded-proto", proto), ("x-forwarded-host", host)] {
            if let Ok(v) = HeaderValue::try_from(value) {
                headers.insert(name, v);
            }
        }
    }
    forward(state, req).await
}

/// The edge's URL as a client names it: its `--public-url`, else `http://`
/// and the `Host` the client sent, else nothing (relative URLs).
fn public_base(state: &Shared, host: Option<&HeaderValue>) -> String {
    match (&state.config.public_url, host.and_then(|h| h.to_str().ok())) {
        (Some(url), _) => url.clone(),
        (None, Some(host)) => format!("http://{host}"),
        (None, None) => String::new(),
    }
}

/// Absolute URLs in an answer (`Location` of a create, `Content-Location`)
/// name the edge instead: its `--public-url`, else `http://` and the `Host`
/// the client sent, else a relative URL. The origin only ever names itself
/// (by whatever `Host` reached it: its address, a load balancer's), so
/// every absolute URL's scheme and authority are replaced, and the
/// origin's own address never leaves the edge.
fn public_locations(state: &Shared, host: Option<&HeaderValue>, headers: &mut HeaderMap) {
    for name in [http::header::LOCATION, http::header::CONTENT_LOCATION] {
        let Some(rest) = headers
            .get(&name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("http://")
                    .or_else(|| v.strip_prefix("https://"))
            })
            .map(|after| after.find('/').map_or("", |at| &after[at..]))
        else {
            continue;
        };
        let base = public_base(state, host);
        let rest = if rest.is_empty() { "/" } else { rest };
        if let Ok(v) = HeaderValue::try_from(format!("{base}{rest}")) {
            headers.insert(name, v);
        }
    }
}

/// A live answer (SSE) passed through: like [`forward`], but its body ends
/// when the edge shuts down, so stopping never waits for a reader.
pub async fn forward_live(state: &Shared, req: Request<Body>) -> Response<Body> {
    let host = req.headers().get(http::header::HOST).cloned();
    let mut resp = match state
        .upstream
        .forward(req, metrics::Upstream::Forward)
        .await
    {
        Ok(resp) => resp,
        Err(e) => return EdgeError::from(e).into_response(),
    };
    public_locations(state, host.as_ref(), resp.headers_mut());
    let state = state.clone();
    resp.map(move |body| {
        let frames = BodyStream::new(body)
            .take_until(async move { state.closed().await })
            .filter_map(|frame| async move {
                match frame {
                    Ok(f) => f.into_data().ok().map(Ok::<_, Infallible>),
                    Err(_) => None,
                }
            });
        Body::from_stream(frames)
    })
}
