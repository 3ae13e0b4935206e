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
use shared::params::Live;

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

/// [`forward_live`] for a request only the origin can admit (an API key,
/// `access::Admit::ToOrigin`): a tail forwarded so holds a place among the
/// edge's bounds as one the edge serves itself does (an SSE reader among
/// `max_sse_readers`, a long-poll among `max_waiters`) for as long as its
/// answer streams, since it holds an upstream stream as long; past the
/// bound it answers 503 + `Retry-After` without asking the origin.
pub async fn forward_admitted(state: &Shared, req: Request<Body>) -> Response<Body> {
    let live = (req.method() == http::Method::GET)
        .then(|| shared::params::parse_read_query(req.uri().query()).ok())
        .flatten()
        .map(|p| p.live);
    let place: Box<dyn Send + Sync> = match live {
        Some(Live::Sse) => match super::sse::reader_place(state) {
            Some(place) => Box::new(place),
            None => return EdgeError::Busy(super::sse::TOO_MANY_READERS).into_response(),
        },
        Some(Live::LongPoll) => match state.collapse.hold() {
            Ok(place) => Box::new(place),
            Err(e) => return EdgeError::from(e).into_response(),
        },
        _ => return forward_live(state, req).await,
    };
    holding(forward_live(state, req).await, place)
}

/// An answer whose body keeps `held` until it ends (or is dropped).
pub fn holding<T: Send + Sync + 'static>(resp: Response<Body>, held: T) -> Response<Body> {
    resp.map(|body| {
        Body::new(http_body_util::BodyExt::map_frame(body, move |f| {
            let _held = &held;
            f
        }))
    })
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
