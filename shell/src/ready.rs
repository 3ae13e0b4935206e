//! Readiness (`GET /readyz`), as load balancers, the CDN's probes and
//! orchestrators ask it: `200` only while the server can take requests,
//! `503` with the reason otherwise. `/healthz` stays liveness (the process
//! answers at all).
//!
//! Not ready: while recovering (the origin replays its log before it
//! serves: [`crate::recovering`] answers meanwhile), while draining (from
//! SIGTERM on, so a balancer stops sending before the listener closes),
//! and for what each binary adds (a region origin with a partition whose
//! owner it does not know yet; an edge whose invalidation feed has not
//! caught up since it started, because until then it may not serve what
//! it keeps; a feed lost later keeps it ready, as it forwards meanwhile).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;

use http::{HeaderValue, Response, StatusCode};
use shared::error::{ErrorBody, ErrorCode};

/// Set from the first stop signal on (during `--drain-delay`, while the
/// server still serves) and at the close itself: `/readyz` answers `503`
/// draining from then on. One per server, shared by its parts.
#[derive(Clone, Debug, Default)]
pub struct Draining(Arc<AtomicBool>);

impl Draining {
    pub fn start(&self) {
        self.0.store(true, Relaxed);
    }

    pub fn started(&self) -> bool {
        self.0.load(Relaxed)
    }
}

/// Liveness: the process answers.
pub const HEALTH: &str = "/healthz";
/// Readiness.
pub const READY: &str = "/readyz";
/// The Prometheus text.
pub const METRICS: &str = "/metrics";

/// Why a server is not ready.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NotReady {
    /// Replaying its log or claiming its partitions.
    Recovering,
    /// Shutting down (SIGTERM).
    Draining,
    /// A region origin that does not know every partition's owner yet.
    Joining,
    /// An edge whose invalidation feed has not caught up since it started.
    FeedNotLive,
}

impl NotReady {
    fn reason(self) -> &'static str {
        match self {
            NotReady::Recovering => "recovering: replaying the log",
            NotReady::Draining => "draining: shutting down",
            NotReady::Joining => "joining the region: not every partition's owner is known yet",
            NotReady::FeedNotLive => "the invalidation feed has not caught up yet",
        }
    }
}

/// The `/readyz` answer for `state`: `200 ready`, or `503` with the shared
/// error body (`NOT_READY`, the reason) and `Retry-After: 1`. Never cached.
pub fn answer<B: From<String>>(state: Result<(), NotReady>) -> Response<B> {
    let mut r = match state {
        Ok(()) => Response::new(B::from("ready".to_owned())),
        Err(why) => {
            let code = ErrorCode::NotReady;
            let body = ErrorBody::new(code, why.reason())
                .with_request_id(crate::request_id::current_id())
                .to_json();
            let mut r = Response::new(B::from(body));
            *r.status_mut() = StatusCode::from_u16(code.status()).expect("a valid status");
            r.headers_mut()
                .insert("retry-after", HeaderValue::from_static("1"));
            r.headers_mut()
                .insert("content-type", HeaderValue::from_static("application/json"));
            r
        }
    };
    r.headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-store"));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_is_200_and_anything_else_503_with_a_reason() {
        let ok: Response<String> = answer(Ok(()));
        assert_eq!(ok.status(), 200);
        assert_eq!(ok.headers()["cache-control"], "no-store");
        let no: Response<String> = answer(Err(NotReady::FeedNotLive));
        assert_eq!(no.status(), 503);
        assert_eq!(no.headers()["retry-after"], "1");
        assert_eq!(
            no.body(),
            r#"{"error":{"code":"NOT_READY","message":"the invalidation feed has not caught up yet"}}"#
        );
    }
}
