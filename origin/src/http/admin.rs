//! The server's own endpoints for access control:
//! - `POST /_auth/token`: exchange a key (`Authorization: Bearer dsk_…`) for
//!   a short-lived signed token; the JSON body may narrow it
//!   (`{"ttl_secs":300,"prefix":"s.chat","read_only":true}`).
//! - `GET /_auth/public-key`: the token verification key (hex Ed25519), for
//!   edges.
//! - `/_admin/keys` (`GET` list, `POST` create) and `/_admin/keys/{id}`
//!   (`DELETE` revokes), behind `Authorization: Bearer {admin token}`
//!   (`--admin-token`); without an admin token the admin API is off (404).
//!
//! No secret is ever logged: keys are shown once, in the answer that makes
//! them, and requests are never logged with their headers.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Method, Response, StatusCode};
use axum::response::IntoResponse;
use serde::Deserialize;
use shared::auth::{credential, same_secret, Credential, Denied};
use shared::error::ErrorCode;

use super::body::read_body;
use super::error::{error_response, ApiError};
use super::reading::set;
use super::Shared;
use crate::auth::keys::NewKey;

/// Default lifetime of an exchanged token.
const DEFAULT_TOKEN_SECS: u64 = 300;

pub async fn handle(state: Shared, req: Request) -> Response<Body> {
    let path = req.uri().path().to_owned();
    let method = req.method().clone();
    let arrived = shell::request_id::arrived();
    let (route, result) = match (path.as_str(), &method) {
        ("/_auth/token", &Method::POST) => ("token", exchange(&state, req).await),
        ("/_auth/public-key", &Method::GET) => ("token", Ok(public_key(&state))),
        (p, _) if p == "/_admin/keys" || p.starts_with("/_admin/keys/") => {
            ("admin", admin(&state, &path, &method, req).await)
        }
        _ => (
            "reserved",
            Err(ApiError::Invalid(
                ErrorCode::NotFound,
                "no such resource".into(),
            )),
        ),
    };
    let mut resp = result.unwrap_or_else(IntoResponse::into_response);
    set(&mut resp, "cache-control", "no-store");
    super::common_headers(&mut resp, false);
    state
        .metrics
        .request(route, resp.status().as_u16(), arrived.elapsed());
    resp
}

fn json(status: StatusCode, value: serde_json::Value) -> Response<Body> {
    let mut r = Response::new(Body::from(value.to_string()));
    *r.status_mut() = status;
    set(&mut r, "content-type", "application/json");
    r
}

fn public_key(state: &Shared) -> Response<Body> {
    let mut r = Response::new(Body::from(state.auth.signer.public_key_hex()));
    set(&mut r, "content-type", "text/plain");
    r
}

#[derive(Deserialize, Default)]
struct Exchange {
    ttl_secs: Option<u64>,
    prefix: Option<String>,
    #[serde(default)]
    read_only: bool,
}

async fn exchange(state: &Shared, req: Request) -> Result<Response<Body>, ApiError> {
    let authorization = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let Some(Credential::Key { id, secret }) =
        credential(authorization.as_deref()).map_err(ApiError::Denied)?
    else {
        return Err(ApiError::Denied(Denied::Unauthorized));
    };
    let grant = state
        .auth
        .keys
        .check(id, secret, true)
        .map_err(ApiError::Denied)?;
    let body = read_body(state, req).await?;
    let ask: Exchange = if body.bytes.is_empty() {
        Exchange::default()
    } else {
        serde_json::from_slice(&body.bytes)
            .map_err(|e| ApiError::bad(format!("the exchange body is not valid: {e}")))?
    };
    let now = state.store.clock().now_ms() / 1000;
    let ttl = ask
        .ttl_secs
        .unwrap_or(DEFAULT_TOKEN_SECS)
        .clamp(1, state.auth.config.max_token_secs);
    let narrowed = grant
        .narrowed(ask.prefix, ask.read_only, now + ttl)
        .ok_or(ApiError::Denied(Denied::Forbidden))?;
    let token = state.auth.signer.sign(&narrowed);
    Ok(json(
        StatusCode::OK,
        serde_json::json!({
            "token": token,
            "expires_at": narrowed.expires_at,
            "account": narrowed.account,
            "prefix": narrowed.prefix,
            "read_only": narrowed.read_only,
        }),
    ))
}

async fn admin(
    state: &Shared,
    path: &str,
    method: &Method,
    req: Request,
) -> Result<Response<Body>, ApiError> {
    let Some(admin_token) = &state.auth.config.admin_token else {
        return Err(ApiError::Invalid(
            ErrorCode::NotFound,
            "the admin API is off (no admin token configured)".into(),
        ));
    };
    let sent = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    let digest = |s: &str| {
        use sha2::Digest;
        sha2::Sha256::digest(s.as_bytes()).to_vec()
    };
    if sent.is_empty() || !same_secret(&digest(sent), &digest(admin_token)) {
        return Err(ApiError::Denied(Denied::Unauthorized));
    }
    let now = state.store.clock().now_ms() / 1000;
    match (path.strip_prefix("/_admin/keys").unwrap_or(path), method) {
        ("", &Method::GET) => {
            let account = req.uri().query().and_then(form_urlencoded_account);
            let keys = state.auth.keys.list(account.as_deref());
            Ok(json(
                StatusCode::OK,
                serde_json::to_value(keys).expect("keys serialize"),
            ))
        }
        ("", &Method::POST) => {
            let body = read_body(state, req).await?;
            let new: NewKey = serde_json::from_slice(&body.bytes)
                .map_err(|e| ApiError::bad(format!("a new key is {{\"account\": …}}: {e}")))?;
            if new.account.is_empty() || new.account.contains('/') {
                return Err(ApiError::bad("the account is one path segment"));
            }
            let (record, key) = changed(state, || state.auth.keys.create(new, now)).await?;
            let mut value = serde_json::to_value(&record).expect("keys serialize");
            value["key"] = serde_json::Value::String(key);
            Ok(json(StatusCode::CREATED, value))
        }
        (id, &Method::DELETE) if id.len() > 1 => {
            if changed(state, || state.auth.keys.revoke(&id[1..], now)).await? {
                let mut r = Response::new(Body::empty());
                *r.status_mut() = StatusCode::NO_CONTENT;
                Ok(r)
            } else {
                Ok(error_response(ErrorCode::NotFound, "no such key"))
            }
        }
        _ => Ok(super::method_not_allowed(
            "GET, POST (keys), DELETE (keys/{id})",
        )),
    }
}

/// Makes a change to the key store. In a region it is made only after the
/// bucket vouched that this origin still owns partition 0, and answered
/// only once it is in the bucket, put on condition that the bucket's is
/// the one this origin last read (`region::auth_sync`): a key revoked and
/// acknowledged stays revoked whatever happens to this machine.
async fn changed<T>(
    state: &Shared,
    change: impl FnOnce() -> std::io::Result<T>,
) -> Result<T, ApiError> {
    let Some(keys) = &state.key_store else {
        return Ok(change()?);
    };
    state.store.vouch().await?;
    // The file may be newer than what was loaded (taken from the bucket).
    let change = || {
        state.auth.keys.reload_if_changed()?;
        change()
    };
    match keys.change(change).await {
        Ok((made, crate::region::auth_sync::Published::Overtaken)) => {
            drop(made);
            // The bucket's key store is the local one again.
            if let Err(e) = state.auth.keys.reload_if_changed() {
                tracing::error!(error = %e, "could not reload the key store");
            }
            Err(ApiError::Busy(
                "the region's key store changed on another origin meanwhile and this change was not kept; retry",
            ))
        }
        Ok((made, _)) => Ok(made),
        Err(e) => {
            tracing::warn!(error = %e, "could not put the key store in the bucket");
            Err(ApiError::Busy(
                "object storage did not take the key store; the change may still be applied, retry",
            ))
        }
    }
}

fn form_urlencoded_account(query: &str) -> Option<String> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("account=").map(str::to_owned))
}
