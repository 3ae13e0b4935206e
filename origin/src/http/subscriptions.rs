//! `{root}/__ds/…`: the subscription APIs (protocol §6–7) and the webhook
//! signing keys. Routes by the path's shape; the work is
//! `crate::subscriptions`'.
//!
//! Access: declaring a subscription needs write access to every stream it
//! names, to its pattern's literal prefix (every stream the pattern can
//! match lies under it) and to its wake stream; reading one needs read
//! access to its own path (`{root}/__ds/subscriptions/{id}`), changing,
//! deleting or claiming one write access there. Callbacks, acks and
//! releases carry the wake's token instead, checked by the subscriptions.
//! The JWK Set is public.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method, Response, StatusCode};
use axum::response::IntoResponse;
use shared::auth::Access;

use super::error::ApiError;
use super::Shared;
use crate::subscriptions::operations::Declared;
use crate::subscriptions::token::bearer;
use crate::subscriptions::{Error, Key, Subscriptions};

/// What a control path names.
#[derive(Debug, PartialEq, Eq)]
enum Route<'a> {
    Jwks,
    Subscription(&'a str),
    Streams(&'a str),
    Stream(&'a str, String),
    Callback(&'a str),
    Ack(&'a str),
    Release(&'a str),
    Claim(&'a str),
}

fn route(rest: &str) -> Option<Route<'_>> {
    if rest == "jwks.json" {
        return Some(Route::Jwks);
    }
    let rest = rest.strip_prefix("subscriptions/")?;
    let (id, tail) = rest.split_once('/').unwrap_or((rest, ""));
    if !crate::core::subscription::config::valid_id(id) {
        return None;
    }
    Some(match tail {
        "" => Route::Subscription(id),
        "streams" => Route::Streams(id),
        "callback" => Route::Callback(id),
        "ack" => Route::Ack(id),
        "release" => Route::Release(id),
        "claim" => Route::Claim(id),
        t => Route::Stream(id, percent_decode(t.strip_prefix("streams/")?)?),
    })
}

/// `%XX` decoded (a stream path in a path segment); none if malformed.
fn percent_decode(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = std::str::from_utf8(b.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// The server's URL as this request reached it.
fn base_url(state: &Shared, req: &Request) -> String {
    if let Some(url) = &state.config.subscriptions.public_url {
        return url.clone();
    }
    let h = req.headers();
    let get = |n: &str| {
        h.get(n)
            .and_then(|v| v.to_str().ok())
            .filter(|v| !v.is_empty())
    };
    let proto = get("x-forwarded-proto").unwrap_or("http");
    let proto = if proto == "https" { "https" } else { "http" };
    match get("x-forwarded-host").or_else(|| get("host")) {
        Some(host) => format!("{proto}://{host}"),
        None => String::new(),
    }
}

fn json(status: StatusCode, value: &serde_json::Value) -> Response<Body> {
    let mut r = Response::new(Body::from(
        serde_json::to_vec(value).expect("JSON serializes"),
    ));
    *r.status_mut() = status;
    r.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    r.headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-store"));
    r
}

fn no_content() -> Response<Body> {
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::NO_CONTENT;
    r
}

pub async fn handle(
    state: Shared,
    root: String,
    rest: String,
    mut req: Request,
    credentialed: bool,
) -> Response<Body> {
    let Some(route) = route(&rest) else {
        return ApiError::from(Error::NotFound).into_response();
    };
    let method = req.method().clone();
    if method == Method::OPTIONS {
        return super::preflight();
    }
    let Some(subs) = state.subscriptions.get().cloned() else {
        let why = if state
            .subscriptions_opening
            .load(std::sync::atomic::Ordering::Acquire)
        {
            Error::Busy("the subscriptions are being recovered; retry shortly")
        } else {
            Error::Unserved
        };
        return ApiError::from(why).into_response();
    };
    if route == Route::Jwks {
        return jwks(&subs, &method);
    }
    if let Some(refused) = method_refused(&route, &method) {
        return refused;
    }
    let id = route.id().to_owned();
    let own_path = format!(
        "{root}/{}/subscriptions/{id}",
        shared::paths::CONTROL_SEGMENT
    );
    let tokened = matches!(
        route,
        Route::Callback(_) | Route::Ack(_) | Route::Release(_)
    );
    // The caller's access to the subscription itself (token routes carry
    // the wake's token instead).
    if !tokened {
        let access = if method == Method::GET || method == Method::HEAD {
            Access::Read
        } else {
            Access::Write
        };
        if let Err(refused) = super::admit(&state, &mut req, credentialed, &own_path, access) {
            return *refused;
        }
    }
    let call = Call {
        key: (root.clone(), id),
        root,
        base: base_url(&state, &req),
        token: bearer(req.headers()).map(str::to_owned),
        authorization: req
            .headers()
            .get(http::header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .filter(|_| credentialed),
        body: bytes::Bytes::new(),
    };
    let call = if method == Method::POST || method == Method::PUT {
        match super::body::read_body(&state, req).await {
            Ok(b) => Call {
                body: b.bytes,
                ..call
            },
            Err(e) => return e.into_response(),
        }
    } else {
        call
    };
    act(&state, &subs, route, &method, &call)
        .await
        .unwrap_or_else(|refused| *refused)
}

/// What a request on a subscription brings, once admitted.
struct Call {
    root: String,
    key: Key,
    /// The server's URL as the request reached it.
    base: String,
    /// A wake's token (callbacks, acks, releases).
    token: Option<String>,
    /// The caller's credential, to check its access to other paths.
    authorization: Option<String>,
    body: bytes::Bytes,
}

impl Call {
    /// Write access to a path the request reaches besides its own.
    fn may_write(&self, state: &Shared, path: &str) -> Result<(), Box<Response<Body>>> {
        super::admit_as(state, self.authorization.as_deref(), path, Access::Write).map(|_| ())
    }
}

impl Route<'_> {
    /// The subscription a route names (not the JWK Set's).
    fn id(&self) -> &str {
        match self {
            Route::Subscription(id)
            | Route::Streams(id)
            | Route::Stream(id, _)
            | Route::Callback(id)
            | Route::Ack(id)
            | Route::Release(id)
            | Route::Claim(id) => id,
            Route::Jwks => "",
        }
    }
}

/// The JWK Set the webhooks are signed with (public, cacheable).
fn jwks(subs: &Subscriptions, method: &Method) -> Response<Body> {
    if method != Method::GET && method != Method::HEAD {
        return super::method_not_allowed("GET, HEAD, OPTIONS");
    }
    let mut r = json(StatusCode::OK, &subs.jwks());
    r.headers_mut().insert(
        "content-type",
        HeaderValue::from_static("application/jwk-set+json"),
    );
    r.headers_mut().insert(
        "cache-control",
        HeaderValue::from_static("public, max-age=300"),
    );
    r
}

/// `405` for a method the route does not take.
fn method_refused(route: &Route<'_>, method: &Method) -> Option<Response<Body>> {
    let allowed = match route {
        Route::Subscription(_) => matches!(
            *method,
            Method::GET | Method::HEAD | Method::PUT | Method::DELETE
        ),
        Route::Stream(..) => method == Method::DELETE,
        _ => method == Method::POST,
    };
    (!allowed).then(|| {
        super::method_not_allowed(match route {
            Route::Subscription(_) => "GET, HEAD, PUT, DELETE, OPTIONS",
            Route::Stream(..) => "DELETE, OPTIONS",
            _ => "POST, OPTIONS",
        })
    })
}

/// Does what an admitted request asks; a refusal is the answer itself.
async fn act(
    state: &Shared,
    subs: &Subscriptions,
    route: Route<'_>,
    method: &Method,
    call: &Call,
) -> Result<Response<Body>, Box<Response<Body>>> {
    let (key, body, base) = (&call.key, &call.body, &call.base);
    let outcome = match route {
        Route::Subscription(_) if method == Method::PUT => {
            may_reach(state, call)?;
            match subs.declare(&call.root, &key.1, body, base.clone()).await {
                Ok(Declared::Created(sub)) => {
                    Ok(json(StatusCode::CREATED, &subs.describe(key, &sub, base)))
                }
                Ok(Declared::Confirmed(sub)) => {
                    Ok(json(StatusCode::OK, &subs.describe(key, &sub, base)))
                }
                Err(e) => Err(e),
            }
        }
        Route::Subscription(_) if method == Method::DELETE => {
            subs.delete(key).await.map(|()| no_content())
        }
        Route::Subscription(_) => match subs.get(key) {
            Some(sub) => Ok(json(StatusCode::OK, &subs.describe(key, &sub, base))),
            None => Err(Error::NotFound),
        },
        Route::Streams(_) => {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
                for rel in v["streams"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|s| s.as_str())
                {
                    call.may_write(state, &format!("{}/{rel}", call.root))?;
                }
            }
            subs.add_streams(key, body).await.map(|()| no_content())
        }
        Route::Stream(_, rel) => subs.remove_stream(key, &rel).await.map(|()| no_content()),
        Route::Callback(_) | Route::Ack(_) => subs
            .acknowledge(key, call.token.as_deref(), body)
            .await
            .map(|next| {
                json(
                    StatusCode::OK,
                    &serde_json::json!({ "ok": true, "next_wake": next }),
                )
            }),
        Route::Release(_) => subs
            .release(key, call.token.as_deref(), body)
            .await
            .map(|()| no_content()),
        Route::Claim(_) => subs
            .claim(key, body)
            .await
            .map(|v| json(StatusCode::OK, &v)),
        Route::Jwks => unreachable!("answered before"),
    };
    Ok(outcome.unwrap_or_else(|e| ApiError::from(e).into_response()))
}

/// Write access to everything a declared subscription can reach. A
/// pattern's prefix is checked as the folder it is (`…/`), and where the
/// default account's prefix lies under it, that account's streams are
/// within reach too.
fn may_reach(state: &Shared, call: &Call) -> Result<(), Box<Response<Body>>> {
    let root = &call.root;
    for (rel, under) in Subscriptions::reach(&call.body) {
        let mut paths = vec![match (rel.is_empty(), under) {
            (true, _) => format!("{root}/"),
            (false, true) => format!("{root}/{rel}/"),
            (false, false) => format!("{root}/{rel}"),
        }];
        let default = &state.config.auth.default_prefix;
        if under && default.starts_with(paths[0].as_str()) && *default != paths[0] {
            paths.push(default.clone());
        }
        for path in paths {
            call.may_write(state, &path)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        assert_eq!(route("jwks.json"), Some(Route::Jwks));
        assert_eq!(route("subscriptions/s-1"), Some(Route::Subscription("s-1")));
        assert_eq!(route("subscriptions/s/streams"), Some(Route::Streams("s")));
        assert_eq!(
            route("subscriptions/s/streams/manual%2Fb"),
            Some(Route::Stream("s", "manual/b".into()))
        );
        assert_eq!(
            route("subscriptions/s/streams/a/b"),
            Some(Route::Stream("s", "a/b".into()))
        );
        assert_eq!(route("subscriptions/s/claim"), Some(Route::Claim("s")));
        assert_eq!(route("subscriptions/s/other"), None);
        assert_eq!(route("subscriptions/bad%20id"), None);
        assert_eq!(route("subscriptions/s/streams/%zz"), None);
        assert_eq!(route("other"), None);
    }
}
