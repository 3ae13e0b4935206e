//! `GET /_invalidations?offset=N&timeout_ms=T`: the feed of deletes,
//! creates, retention changes and replaced snapshots that edges tail (`shared::invalidation`),
//! read like a stream: a long-poll from position `N` (`now`: the end)
//! answers the events from there as NDJSON, `204` after `timeout_ms`
//! (default 20 s, at most 60 s) without any; `Stream-Next-Offset` names the
//! next position and `Stream-Incarnation` this process's feed. A request
//! naming another feed incarnation answers `412`, a position no longer kept
//! `410`, one past the end `416`: the edge missed events either way.
//!
//! It needs no credential: events name streams by a hash of their path.

use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{Response, StatusCode};
use shared::error::ErrorCode;
use shared::headers as h;
use shared::invalidation::MAX_EVENTS_PER_ANSWER;

use super::error::error_response;
use super::reading::set;
use super::Shared;
use crate::core::invalidation_log::Since;

/// Longest wait of one long-poll of the feed.
pub const MAX_FEED_WAIT: Duration = Duration::from_secs(60);
const DEFAULT_FEED_WAIT: Duration = Duration::from_secs(20);

pub async fn invalidations(state: Shared, req: Request) -> Response<Body> {
    let feed = state.store.invalidations();
    let mut from = None;
    let mut wait = DEFAULT_FEED_WAIT;
    let query = req.uri().query().unwrap_or("");
    for (k, v) in query.split('&').filter_map(|p| p.split_once('=')) {
        match k {
            "offset" if v == "now" => from = Some(None),
            "offset" => match v.parse::<u64>() {
                Ok(n) => from = Some(Some(n)),
                Err(_) => return invalid("offset is a position or `now`"),
            },
            "timeout_ms" => match v.parse::<u64>() {
                Ok(ms) => wait = Duration::from_millis(ms).min(MAX_FEED_WAIT),
                Err(_) => return invalid("timeout_ms is a number of milliseconds"),
            },
            _ => {}
        }
    }
    let Some(from) = from else {
        return invalid("the feed needs an offset");
    };
    if let Some(named) = req.headers().get(h::STREAM_INCARNATION) {
        if named.as_bytes() != feed.incarnation().as_bytes() {
            let mut r = error_response(
                ErrorCode::PreconditionFailed,
                "the feed started again: events were missed",
            );
            set(&mut r, h::STREAM_INCARNATION, feed.incarnation());
            return r;
        }
    }
    let mut end = feed.watch();
    let from = from.unwrap_or(*end.borrow_and_update());
    // Only a reader at the end waits; one behind, or lost, is answered now.
    // What a waiting reader is woken for is a delivery (its lag is timed);
    // a read behind the end is a catch-up, not timed.
    let mut woken = false;
    if *end.borrow_and_update() == from {
        let _parked = feed.park();
        woken = tokio::select! {
            r = tokio::time::timeout(wait, end.wait_for(|n| *n > from)) => matches!(r, Ok(Ok(_))),
            _ = state.closed() => false,
        };
    }
    let mut resp = match feed.since(from, MAX_EVENTS_PER_ANSWER) {
        Since::Events(events, next) => {
            let mut r = if events.is_empty() {
                let mut r = Response::new(Body::empty());
                *r.status_mut() = StatusCode::NO_CONTENT;
                r
            } else {
                if woken {
                    for age in feed.ages(from, events.len()) {
                        state.metrics.delivered(crate::metrics::FEED, age);
                    }
                }
                let mut r = Response::new(Body::from(shared::invalidation::encode(&events)));
                set(&mut r, "content-type", shared::content_type::NDJSON);
                r
            };
            set(&mut r, h::STREAM_NEXT_OFFSET, next);
            r
        }
        Since::Gone { oldest } => {
            let mut r = error_response(ErrorCode::Gone, "events before this were forgotten");
            set(&mut r, h::STREAM_NEXT_OFFSET, oldest);
            r
        }
        Since::Beyond { next } => {
            let mut r = error_response(
                ErrorCode::RangeNotSatisfiable,
                "the feed has no such position",
            );
            set(&mut r, h::STREAM_NEXT_OFFSET, next);
            r
        }
    };
    set(&mut resp, h::STREAM_INCARNATION, feed.incarnation());
    set(&mut resp, "cache-control", "no-store");
    resp
}

fn invalid(message: &str) -> Response<Body> {
    error_response(ErrorCode::BadRequest, message)
}
