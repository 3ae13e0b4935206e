//! `GET /_streams?prefix=P&after=CURSOR&limit=N`: the streams a caller
//! may read, in path order, a page at a time (the query and the answer's
//! shape: `shared::listing`).
//!
//! A page walks a range of the store's ordered index
//! (`store::publisher::Ordered`) from the cursor on, so it costs what it
//! looks at, at a thousand streams as at a million. What it looks at is
//! bounded too (`HttpConfig::list_scan_max`): paths it skips (expired,
//! soft-deleted, the server's own, or out of the caller's reach) count,
//! and a page that reaches the bound ends early with `has_more` and its
//! cursor at the last path looked at, once that is a path the caller could
//! read: past the bound the walk goes on to the next such path (or the
//! range's end), so a cursor never names a stream the caller could not
//! read. (The cost: a caller whose reach is scattered, an anonymous one
//! on a server where most streams are private and a few public, may walk
//! many paths for one page; a caller whose reach is one range, an
//! account's key, walks that range only.)
//!
//! **Access**: a listing shows exactly the streams its caller could read
//! (`auth::Auth::reads`, the read rule of every request, asked per path):
//! a key or token of an account its account's streams (under its prefix
//! if narrowed; read-only keys list too), and streams of open accounts;
//! without a credential, the streams of open accounts (on the default,
//! open server: every stream under `/v1/stream/`) and public streams. So
//! an anonymous listing never names a stream an anonymous read would
//! refuse, and no caller learns of a stream it could not read. A
//! credential that is not valid answers 401, as a read does. A listing
//! is not a read of the streams it shows: it resets no TTL.
//!
//! In a region the region's router asks every partition (`server::region`)
//! and merges their pages (`shared::listing::merge`); [`page`] is one
//! store's part.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Response, StatusCode};
use axum::response::IntoResponse;
use shared::auth::{Grant, DEFAULT_ACCOUNT};
use shared::error::ErrorCode;
use shared::listing::{ListQuery, Listed, Page};
use shared::offset::Offset;
use std::ops::Bound;

use super::error::ApiError;
use super::request::rfc3339;
use super::{AppState, Shared};
use crate::core::config::Expiry;
use crate::store::StreamView;

/// Who lists: the grant of the caller's credential (none without one).
pub struct Lister {
    pub grant: Option<Grant>,
    /// Unix seconds, for the grant's expiry.
    pub now: u64,
}

/// Parses a listing's query, or answers 400.
pub fn query(req: &Request) -> Result<ListQuery, Box<Response<Body>>> {
    shared::listing::parse_query(req.uri().query()).map_err(|e| {
        Box::new(ApiError::Invalid(ErrorCode::BadRequest, e.to_string()).into_response())
    })
}

/// Admits a listing's caller (charged once, `auth::Auth::admit_listing`),
/// or answers its refusal.
pub fn admit(
    state: &AppState,
    req: &Request,
    query: &ListQuery,
) -> Result<Lister, Box<Response<Body>>> {
    let authorization = req
        .headers()
        .get(http::header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or("\u{0}"));
    let now = state.store.clock().now_ms() / 1000;
    let within_open = within_open(state, &query.prefix);
    state
        .auth
        .admit_listing(authorization, within_open, now)
        .map(|grant| Lister { grant, now })
        .map_err(|refusal| Box::new(ApiError::from(refusal).into_response()))
}

/// Whether every path under `prefix` belongs to one open account.
fn within_open(state: &AppState, prefix: &str) -> bool {
    let default_prefix = &state.auth.config.default_prefix;
    let account = if prefix.starts_with(default_prefix.as_str()) {
        Some(DEFAULT_ACCOUNT)
    } else if default_prefix.starts_with(prefix) {
        None
    } else {
        // `/{account}/…`: every path under it is the account's.
        prefix
            .strip_prefix('/')
            .and_then(|p| p.split_once('/'))
            .map(|(account, _)| account)
            .filter(|a| !a.is_empty())
    };
    account.is_some_and(|a| state.auth.is_open(a))
}

/// The paths a lister's grant can reach at all, as one prefix, when they
/// are one range: a key of an account that is not the default one, on a
/// server with no open accounts (otherwise open accounts' streams are
/// the caller's to list too, and the default account's lie in two
/// ranges).
fn reach(state: &AppState, lister: &Lister) -> Option<String> {
    let grant = lister.grant.as_ref()?;
    if grant.account == DEFAULT_ACCOUNT || !state.auth.config.open_accounts.is_empty() {
        return None;
    }
    Some(format!(
        "/{}/{}",
        grant.account,
        grant.prefix.as_deref().unwrap_or("")
    ))
}

/// One store's page of `query` for `lister`.
pub fn page(state: &AppState, query: &ListQuery, lister: &Lister) -> Page {
    // Narrowed to what the grant reaches, when that is one range: two
    // prefixes meet only if one starts with the other.
    let prefix = match reach(state, lister) {
        None => query.prefix.clone(),
        Some(r) if r.starts_with(&query.prefix) => r,
        Some(r) if query.prefix.starts_with(&r) => query.prefix.clone(),
        Some(_) => return Page::default(),
    };
    let from = match query.after.as_deref() {
        Some(after) if after >= prefix.as_str() => Bound::Excluded(after),
        _ => Bound::Included(prefix.as_str()),
    };
    let now_ms = state.store.clock().now_ms();
    let budget = state.config.list_scan_max.max(1);
    let (mut looked, mut last_looked) = (0usize, None::<std::sync::Arc<str>>);
    // Whether the last path looked at is one the lister may know of: a
    // page cut by the budget ends only there, so its cursor never names a
    // stream the lister could not read (past the budget the walk goes on
    // to the next such path, or the range's end).
    let mut last_knowable = false;
    let mut shown: Vec<std::sync::Arc<StreamView>> = Vec::with_capacity(query.limit + 1);
    let mut exhausted = false;
    state.store.walk_ordered(from, |view| {
        if !view.path.starts_with(prefix.as_str()) {
            return false;
        }
        if looked >= budget && last_knowable {
            exhausted = true;
            return false;
        }
        looked = looked.saturating_add(1);
        last_looked = Some(view.path.clone());
        last_knowable = knowable(state, view, lister);
        if last_knowable && live(view, now_ms) {
            shown.push(std::sync::Arc::clone(view));
        }
        shown.len() <= query.limit
    });
    let has_more = shown.len() > query.limit || exhausted;
    shown.truncate(query.limit);
    let next_cursor = if shown.len() == query.limit && has_more {
        shown.last().map(|v| v.path.to_string())
    } else if exhausted {
        last_looked.map(|p| p.to_string())
    } else {
        None
    };
    Page {
        streams: shown.iter().map(|v| listed(v)).collect(),
        next_cursor,
        has_more,
    }
}

/// Whether the lister may know of the stream's path: a client's stream it
/// could read. A listing shows those that are also [`live`].
fn knowable(state: &AppState, view: &StreamView, lister: &Lister) -> bool {
    !shared::partition::is_hidden(&view.path)
        && state.auth.reads(
            &view.path,
            lister.grant.as_ref(),
            || view.is_public(),
            lister.now,
        )
}

/// Neither deleted nor expired.
fn live(view: &StreamView, now_ms: u64) -> bool {
    !view.is_soft_deleted() && !view.is_expired(now_ms)
}

/// A stream as a listing shows it.
fn listed(view: &StreamView) -> Listed {
    let tail = view.end();
    let (ttl_seconds, expires_at) = match view.config.expiry {
        Expiry::Never => (None, None),
        Expiry::IdleSecs(s) => (
            Some(s),
            Some(rfc3339(
                view.last_access().saturating_add(s.saturating_mul(1000)),
            )),
        ),
        Expiry::At(ms) => (None, Some(rfc3339(ms))),
    };
    Listed {
        stream_id: view.path.to_string(),
        status: if tail.closed { "closed" } else { "open" }.into(),
        content_type: view.config.content_type.to_string(),
        tail_offset: Offset(tail.next).to_string(),
        created_at_ms: view.created_at,
        last_write_at_ms: view.last_write(),
        closed: tail.closed,
        incarnation: view.incarnation.to_string(),
        ttl_seconds,
        expires_at,
    }
}

/// The answer: `200`, JSON, never kept by a shared cache.
pub fn answer(page: &Page) -> Response<Body> {
    let body = serde_json::to_vec(page).expect("a page serializes");
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::OK;
    let h = r.headers_mut();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    r
}

/// `GET /_streams` on one origin: parse, admit, (with
/// `consistency=leader` in a region's store, confirm ownership first, as
/// reads do), list. A region origin merges partitions instead
/// (`server::region`).
pub async fn list(state: Shared, req: Request) -> Response<Body> {
    let arrived = shell::request_id::arrived();
    let resp = match prepare(&state, &req) {
        Ok((query, lister)) => match list_here(&state, &query, &lister).await {
            Ok(page) => answer(&page),
            Err(refused) => *refused,
        },
        Err(refused) => *refused,
    };
    finish(&state, arrived, resp)
}

/// A listing request's query and caller, or its refusal.
pub fn prepare(
    state: &AppState,
    req: &Request,
) -> Result<(ListQuery, Lister), Box<Response<Body>>> {
    let query = query(req)?;
    let lister = admit(state, req, &query)?;
    Ok((query, lister))
}

/// This store's page (after confirming it owns its partition for
/// `consistency=leader`), or the refusal.
pub async fn list_here(
    state: &AppState,
    query: &ListQuery,
    lister: &Lister,
) -> Result<Page, Box<Response<Body>>> {
    if query.consistency == shared::params::Consistency::Leader {
        state
            .store
            .vouch()
            .await
            .map_err(|e| Box::new(ApiError::Store(e).into_response()))?;
    }
    Ok(page(state, query, lister))
}

/// Counts a listing's answer and gives it the headers every answer has.
pub fn finish(
    state: &AppState,
    arrived: tokio::time::Instant,
    mut resp: Response<Body>,
) -> Response<Body> {
    state
        .metrics
        .request("list", resp.status().as_u16(), arrived.elapsed());
    super::common_headers(&mut resp, true);
    resp
}
