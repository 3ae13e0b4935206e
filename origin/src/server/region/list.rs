//! `GET /_streams` in a region: every partition's page, merged by path
//! (`shared::listing::merge`), so any origin answers for the whole
//! region.
//!
//! Each partition's page comes from where a read of it would:
//! - a partition served here: its store (`consistency=leader` confirms
//!   in the bucket first that this origin still owns it, as reads do);
//! - a partition followed here, `consistency=local` (the default, as for
//!   reads): this origin's replica while it is fresh (it lags the owner by
//!   about a replica interval), else the owner;
//! - a partition followed here, `consistency=leader`: its owner, asked
//!   for that partition alone (`partition=N`, the caller's credential
//!   passed on), which confirms its ownership as above;
//! - a partition joining (being taken over): the listing answers 503 +
//!   `Retry-After`, as requests of that partition do.
//!
//! Every page is admitted by its own store's access rule (each charges
//! the caller's budget once: a region listing costs a key one request
//! per partition). An origin asked for one partition answers that page
//! alone, from its store, or forwards it once to the owner.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, Response};
use axum::response::IntoResponse;
use futures::future::join_all;
use shared::listing::{ListQuery, Page};
use shared::params::Consistency;

use super::{Current, RegionOrigin};
use crate::http::{self, error::ApiError};

/// The largest page body a partition's owner may answer with (a page of
/// `MAX_LIMIT` streams is a few hundred KiB).
const MAX_PAGE_BYTES: usize = 8 * 1024 * 1024;

/// Answers a listing for the whole region, or for the one partition a
/// region origin asks of it.
pub(super) async fn list(me: &Arc<RegionOrigin>, req: Request<Body>) -> Response<Body> {
    let query = match http::list::query(&req) {
        Ok(q) => q,
        Err(refused) => return me.counted("list", finished(*refused)),
    };
    if let Some(p) = query.partition {
        if p >= me.partitions {
            let r = ApiError::Invalid(
                shared::error::ErrorCode::BadRequest,
                format!("partition must be below {}", me.partitions),
            )
            .into_response();
            return me.counted("list", finished(r));
        }
        return one(me, p, &query, req).await;
    }
    let authorization = req.headers().get(::http::header::AUTHORIZATION).cloned();
    let pages = join_all((0..me.partitions).map(|p| {
        let (query, authorization) = (&query, authorization.clone());
        async move { partition_page(me, p, query, authorization).await }
    }))
    .await;
    let mut got = Vec::with_capacity(pages.len());
    for page in pages {
        match page {
            Ok(page) => got.push(page),
            // The first refusal (401, 403, 503...) is the listing's.
            Err(refused) => return me.counted("list", finished(*refused)),
        }
    }
    let page = shared::listing::merge(got, query.limit);
    me.counted("list", finished(http::list::answer(&page)))
}

/// Partition `p`'s page alone, asked by another origin: from the store
/// here, else forwarded once to the owner.
async fn one(
    me: &Arc<RegionOrigin>,
    p: u32,
    query: &ListQuery,
    req: Request<Body>,
) -> Response<Body> {
    let authorization = req.headers().get(::http::header::AUTHORIZATION).cloned();
    let forwarded = req.headers().contains_key(&http::forward::FORWARDED_BY);
    if let Current::Serving { state, .. } = me.current(p) {
        return http::list::list(state, req).await;
    }
    if forwarded {
        let r =
            ApiError::Busy("the region is moving this partition between origins; retry shortly")
                .into_response();
        return me.counted("list", finished(r));
    }
    match partition_page(me, p, query, authorization).await {
        Ok(page) => me.counted("list", finished(http::list::answer(&page))),
        Err(refused) => me.counted("list", finished(*refused)),
    }
}

/// Partition `p`'s page of `query`, from where a read of it would come.
async fn partition_page(
    me: &Arc<RegionOrigin>,
    p: u32,
    query: &ListQuery,
    authorization: Option<::http::HeaderValue>,
) -> Result<Page, Box<Response<Body>>> {
    let local = match me.current(p) {
        Current::Serving { state, .. } => Some(state),
        Current::Following { .. } if query.consistency == Consistency::Local => me.fresh_replica(p),
        _ => None,
    };
    if let Some(state) = local {
        let req = request(query, None, authorization)?;
        let (query, lister) = http::list::prepare(&state, &req)?;
        return http::list::list_here(&state, &query, &lister).await;
    }
    match me.current(p) {
        Current::Following { url } => {
            let req = request(query, Some(p), authorization)?;
            let answer = me.forwarder.forward(&url, req, me.ended(p)).await;
            if answer.status() != ::http::StatusCode::OK {
                return Err(Box::new(answer));
            }
            let body = axum::body::to_bytes(answer.into_body(), MAX_PAGE_BYTES)
                .await
                .map_err(|e| busy_because(&format!("reading a partition's page: {e}")))?;
            serde_json::from_slice(&body)
                .map_err(|e| busy_because(&format!("a partition's page: {e}")))
        }
        _ => Err(Box::new(
            ApiError::Busy(
                "this origin is joining its region or taking a partition over; retry shortly",
            )
            .into_response(),
        )),
    }
}

/// The request for a partition's page (`partition` names it for the
/// owner), with the caller's credential.
fn request(
    query: &ListQuery,
    partition: Option<u32>,
    authorization: Option<::http::HeaderValue>,
) -> Result<Request<Body>, Box<Response<Body>>> {
    let uri = format!("{}?{}", shared::listing::PATH, query.to_query(partition));
    let mut req = Request::builder()
        .method(Method::GET)
        .uri(uri)
        .body(Body::empty())
        .map_err(|e| Box::new(ApiError::Internal(e.to_string()).into_response()))?;
    if let Some(a) = authorization {
        req.headers_mut().insert(::http::header::AUTHORIZATION, a);
    }
    Ok(req)
}

fn busy_because(why: &str) -> Box<Response<Body>> {
    tracing::warn!(why, "a partition's listing page could not be read");
    Box::new(
        ApiError::Busy("a partition's owner did not answer its listing page; retry shortly")
            .into_response(),
    )
}

/// The headers every answer carries.
fn finished(mut r: Response<Body>) -> Response<Body> {
    http::common_headers(&mut r, true);
    r
}
