//! The HTTP shell: what the edge answers itself (`/metrics`, `/healthz`,
//! long-polls, SSE, immutable chunks) and what goes to the origin as it is
//! (`forward`). One file per operation, the edge's own refusals in
//! [`error`].
//!
//! Streams live at any path, so requests are routed by method, by the shape
//! of the path (`shared::paths`) and by the read query, as on the origin.

pub(crate) mod chunk;
pub(crate) mod error;
pub(crate) mod forward;
pub(crate) mod live;
mod long_poll;
pub(crate) mod read;
pub(crate) mod routes;
pub(crate) mod snapshot;
pub(crate) mod sse;
pub(crate) mod stream_state;

use std::future::Future;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use axum::body::Body;
use http::{HeaderValue, Method, Request, Response};
use shared::auth::Access;
use shared::params::{parse_read_query, Live};
use shared::paths::{classify, Target};
use tracing::Instrument;

use crate::access::Admit;
use crate::chunk_cache::ChunkCache;
use crate::collapse::CollapseTable;
use crate::config::EdgeConfig;
use crate::fanout::Fanout;
use crate::invalidations::Feed;
use crate::metrics::{Metrics, Sampled};
use crate::upstream::Upstream;

pub struct EdgeState {
    pub config: EdgeConfig,
    /// Wall time, from tokio's clock (`shell::clock`).
    pub wall: shell::clock::WallClock,
    /// Who may read and write which streams (the origin's rules).
    pub access: crate::access::AccessGate,
    pub upstream: Upstream,
    pub metrics: Arc<Metrics>,
    pub collapse: Arc<CollapseTable>,
    /// SSE readers' catch-up reads in flight, shared by readers of the same
    /// range (at most `max_sse_readers` waiting: one per reader).
    pub sse_reads: Arc<CollapseTable>,
    pub chunks: ChunkCache,
    pub fanout: Arc<Fanout>,
    /// The origin's invalidation feed: whether what is kept may be served.
    pub feed: Arc<Feed>,
    /// What the edge knows of each stream's tail.
    pub ends: read::EndHints,
    /// Streams' recent states, for catch-up reads cut from chunks.
    pub states: stream_state::StreamStates,
    /// The origin's bucket, when the edge reads it.
    pub objects: Option<crate::objects::ChunkObjects>,
    /// SSE readers served through the fan-out right now.
    pub sse_readers: AtomicUsize,
    /// Bytes of snapshots being copied into the cache as they stream
    /// (`Limits::snapshot_fill_bytes`).
    pub snapshot_fills: Arc<tokio::sync::Semaphore>,
    /// Turns true when the edge starts to shut down: live reads end, so the
    /// graceful shutdown does not wait for them.
    pub closing: tokio::sync::watch::Sender<bool>,
    /// Set from the stop signal on (`/readyz` answers 503 draining).
    pub draining: shell::ready::Draining,
}

impl EdgeState {
    pub fn new(config: EdgeConfig) -> Result<Shared, crate::objects::OpenError> {
        let metrics = Arc::new(Metrics::default());
        let objects = match &config.object_store {
            Some(url) => Some(crate::objects::ChunkObjects::new(
                crate::objects::open(url)?,
                Arc::clone(&metrics),
            )),
            None => None,
        };
        let origins: Vec<_> = std::iter::once(config.origin.clone())
            .chain(config.more_origins.iter().cloned())
            .collect();
        let upstream = Upstream::new(
            &origins,
            Arc::clone(&metrics),
            config.limits.max_answer_bytes,
            config.limits.upstream_waiting,
            config.limits.upstream_protocol,
        );
        let closing = tokio::sync::watch::Sender::new(false);
        let wall = shell::clock::WallClock::start();
        let feed = Feed::new(upstream.clone(), Arc::clone(&metrics), &config.limits);
        tokio::spawn(Arc::clone(&feed).follow(closing.subscribe()));
        let state = Arc::new(EdgeState {
            wall,
            access: crate::access::AccessGate::new(config.access.clone()),
            collapse: CollapseTable::new(config.limits.max_waiters, Arc::clone(&metrics)),
            sse_reads: CollapseTable::counting(
                config.limits.max_sse_readers,
                Arc::clone(&metrics),
                crate::collapse::Counted::Reads,
            ),
            chunks: ChunkCache::new(config.cache_bytes, Arc::clone(&metrics), Arc::clone(&feed)),
            feed,
            fanout: Fanout::new(
                upstream.clone(),
                Arc::clone(&metrics),
                config.limits.clone(),
                closing.subscribe(),
                wall,
            ),
            ends: read::EndHints::default(),
            states: stream_state::StreamStates::default(),
            objects,
            sse_readers: AtomicUsize::new(0),
            snapshot_fills: Arc::new(tokio::sync::Semaphore::new(
                usize::try_from(config.limits.snapshot_fill_bytes).unwrap_or(usize::MAX >> 4),
            )),
            upstream,
            metrics,
            config,
            closing,
            draining: shell::ready::Draining::default(),
        });
        // Waiting long-polls (and SSE readers' shared reads) answer at once
        // when the edge starts to shut down.
        let tables = [Arc::clone(&state.collapse), Arc::clone(&state.sse_reads)];
        shell::signal::on_closing(state.closing.subscribe(), move || {
            for t in tables {
                t.close();
            }
        });
        // Readers a hub's writer lost catch up in a task of their own.
        let weak = Arc::downgrade(&state);
        state.fanout.on_behind(move |behind| {
            if let Some(state) = weak.upgrade() {
                sse::rejoin(state, behind);
            }
        });
        Ok(state)
    }

    /// Resolves once the edge is shutting down.
    pub async fn closed(&self) {
        let mut rx = self.closing.subscribe();
        let _ = rx.wait_for(|c| *c).await;
    }
}

pub type Shared = Arc<EdgeState>;

/// A request's answer to come, boxed by its kind (see [`handle`]).
pub type Answering = std::pin::Pin<Box<dyn Future<Output = Response<Body>> + Send>>;

/// Answers one request. Its future is boxed here, once, and its type
/// chosen by the request's kind first: a live read (a long-poll or an SSE
/// tail of a stream) waits for as long as its reader does, so it goes its
/// own way ([`live`]), which keeps nothing of the routing while it waits;
/// every other request carries the edge's whole routing ([`answer`], 4 KiB
/// with the forwards inline).
pub fn handle<B>(state: Shared, req: Request<B>) -> Answering
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    if is_live_read(&req) {
        Box::pin(live::answer(state, Box::new(req.map(Body::new))))
    } else {
        Box::pin(answer(state, req))
    }
}

/// A `GET` of a stream path with a live read's query (the server's own
/// endpoints are never one).
fn is_live_read<B>(req: &Request<B>) -> bool {
    req.method() == Method::GET
        && req.uri().query().is_some_and(|q| q.contains("live="))
        && !matches!(
            req.uri().path(),
            routes::METRICS | routes::READY | routes::HEALTH
        )
        && parse_read_query(req.uri().query()).is_ok_and(|p| p.live != Live::No)
}

async fn answer<B>(state: Shared, req: Request<B>) -> Response<Body>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    let req = req.map(Body::new);
    if req.method() == Method::GET {
        match req.uri().path() {
            routes::METRICS => return metrics(&state),
            // Ready once the feed has caught up after the start; a feed
            // lost later keeps the edge in rotation (it forwards every read
            // meanwhile, and every edge loses it at once when the origin
            // restarts: out of rotation, all would be).
            routes::READY => {
                return shell::ready::answer(if state.draining.started() {
                    Err(shell::ready::NotReady::Draining)
                } else if !state.feed.caught_up_once() {
                    Err(shell::ready::NotReady::FeedNotLive)
                } else {
                    Ok(())
                })
            }
            routes::HEALTH => {
                let mut r = Response::new(Body::from("ok"));
                r.headers_mut().insert(
                    "x-content-type-options",
                    HeaderValue::from_static("nosniff"),
                );
                return r;
            }
            _ => {}
        }
    }
    let span = tracing::debug_span!("request", method = %req.method(), path = %req.uri().path());
    async move {
        let arrived = shell::request_id::arrived();
        let changes = changed_stream(&req);
        let names_read_origin = state.config.read_origin.is_some() && is_stream_read(&req);
        let (route, mut resp) = dispatch(&state, req).await;
        if names_read_origin {
            let status = resp.status();
            shared::read_origin::apply(
                status,
                resp.headers_mut(),
                state.config.read_origin.as_ref(),
            );
        }
        state
            .metrics
            .request(route, resp.status().as_u16(), arrived.elapsed());
        if let Some(stream) = changes.filter(|_| resp.status().is_success()) {
            state.feed.touch(&stream);
        }
        resp
    }
    .instrument(span)
    .await
}

/// A stream's `HEAD` or read: its answer names `--read-origin`, if set,
/// in place of the origin's.
fn is_stream_read<B>(req: &Request<B>) -> bool {
    let path = req.uri().path();
    (req.method() == Method::GET || req.method() == Method::HEAD)
        && !path.starts_with("/_")
        && matches!(classify(path), Target::Stream(_))
}

/// Names `--read-origin` on a successful stream read (the caller checked
/// it is set and the request is one).
fn name_read_origin(state: &Shared, resp: &mut Response<Body>) {
    let status = resp.status();
    shared::read_origin::apply(
        status,
        resp.headers_mut(),
        state.config.read_origin.as_ref(),
    );
}

/// The stream a request may change what the edge keeps of (a delete, a
/// create, a snapshot's publish, a retention or a rollback): once the
/// origin acknowledged it, this edge voids what it kept at once, without
/// waiting for the feed's event, so the client reads its own change here.
fn changed_stream(req: &Request<Body>) -> Option<String> {
    let method = req.method();
    match classify(req.uri().path()) {
        Target::Stream(s) | Target::Snapshot { stream: s, .. }
            if method == Method::DELETE || method == Method::PUT =>
        {
            Some(s.to_owned())
        }
        Target::Restore { stream, .. } if method == Method::POST => Some(stream.to_owned()),
        _ => None,
    }
}

fn metrics(state: &Shared) -> Response<Body> {
    let (bytes, entries) = state.chunks.usage();
    let mut e = shell::metrics::Exposition::default();
    state.metrics.expose(
        Sampled {
            cache_weighted_bytes: bytes,
            cache_entries: entries,
            feed_live: state.feed.is_live(),
        },
        &mut e,
    );
    e.process("edge");
    let mut r = Response::new(Body::from(e.render()));
    r.headers_mut().insert(
        "content-type",
        HeaderValue::from_static(shell::metrics::CONTENT_TYPE),
    );
    r.headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-store"));
    r
}

/// The stream a request concerns, whether it reads or writes, and whether
/// it opens a tail.
fn access_of(req: &Request<Body>) -> Option<(String, Access, bool)> {
    let (stream, access) = shared::auth::request_access(&classify(req.uri().path()), req.method())?;
    let live = access == Access::Read
        && parse_read_query(req.uri().query()).is_ok_and(|p| p.live != Live::No);
    Some((stream.to_owned(), access, live))
}

/// The access gate, then the edge's own answer or the origin's.
async fn dispatch(state: &Shared, req: Request<Body>) -> (&'static str, Response<Body>) {
    let Some((stream, access, live)) = access_of(&req) else {
        return route(state, req).await;
    };
    // Boxed: its upstream look-ups are large, and over by the time a
    // live read waits.
    let admitted =
        Box::pin(
            state
                .access
                .admit(&state.upstream, &stream, access, req.headers(), live),
        )
        .await;
    match admitted {
        Admit::Pass => route(state, req).await,
        Admit::ToOrigin => (
            "forward",
            Box::pin(forward::forward_admitted(state, req)).await,
        ),
        Admit::Refuse(resp) => ("refused", resp),
        Admit::Public { live } => {
            let (name, resp) = route(state, req).await;
            (name, holding(resp, live))
        }
        Admit::Token { live } => {
            let (name, mut resp) = route(state, req).await;
            shared::auth::privatize(resp.headers_mut());
            (name, holding(resp, live))
        }
    }
}

/// A tail's count lasts as long as its answer streams.
fn holding(resp: Response<Body>, live: Option<shared::limits::LiveReadGuard>) -> Response<Body> {
    match live {
        Some(guard) => forward::holding(resp, guard),
        None => resp,
    }
}

/// Routes a request to the edge's own answer, or to the origin.
async fn route(state: &Shared, req: Request<Body>) -> (&'static str, Response<Body>) {
    let method = req.method().clone();
    if is_admin(req.uri().path()) {
        let refused = error::error_response(
            shared::error::ErrorCode::NotFound,
            "the admin API is not served through an edge",
        );
        return ("admin", refused);
    }
    // The listing (`GET /_streams`) is the origin's: it decides what each
    // credential may see and answers `no-store`, so it goes as it came and
    // comes back as it was, never kept here.
    if req.uri().path() == shared::listing::PATH {
        return ("list", forward::forward(state, req).await);
    }
    match classify(req.uri().path()) {
        Target::Stream(_) => match method {
            Method::GET => read_route(state, req).await,
            Method::PUT => (
                "create",
                Box::pin(forward::forward_naming_the_edge(state, req)).await,
            ),
            Method::POST => {
                let path = req.uri().path().to_owned();
                let resp = forward::forward(state, req).await;
                state.ends.learn(&path, resp.headers());
                ("append", resp)
            }
            Method::DELETE => ("delete", forward::forward(state, req).await),
            Method::HEAD => ("head", forward::forward(state, req).await),
            Method::OPTIONS => ("preflight", forward::forward(state, req).await),
            _ => ("other", forward::forward(state, req).await),
        },
        // Cache lookups make large futures: boxed, so that every other
        // request (10,000 waiting long-polls) does not carry their size.
        Target::Chunk { .. } if method == Method::GET => {
            ("chunk", Box::pin(chunk::chunk(state, req)).await)
        }
        Target::IncarnationSnapshot { .. } if method == Method::GET => {
            ("snapshot", Box::pin(snapshot::snapshot(state, req)).await)
        }
        Target::Control { .. } => (
            "control",
            Box::pin(forward::forward_control(state, req)).await,
        ),
        _ => ("other", forward::forward(state, req).await),
    }
}

/// Whether a path is the admin API's (no prefix formatted per request).
fn is_admin(path: &str) -> bool {
    path.strip_prefix(routes::ADMIN)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

async fn read_route(state: &Shared, req: Request<Body>) -> (&'static str, Response<Body>) {
    // A query the origin refuses is refused by the origin, in its words.
    let Ok(params) = parse_read_query(req.uri().query()) else {
        return ("read", forward::forward(state, req).await);
    };
    match params.live {
        Live::No => ("read", Box::pin(read::read(state, req, &params)).await),
        Live::LongPoll => ("long_poll", long_poll::long_poll(state, req, &params).await),
        Live::Sse => ("sse", Box::pin(sse::sse(state, req, &params)).await),
    }
}

#[cfg(test)]
mod tests {
    /// Every connection's task carries the future of its request; a waiting
    /// long-poll must not carry the size of the cache lookups (boxed above).
    #[test]
    fn a_waiting_request_carries_a_small_future() {
        let config =
            crate::config::EdgeConfig::new("http://127.0.0.1:1".parse().unwrap(), 1).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _entered = rt.enter();
        let state = super::EdgeState::new(config).unwrap();
        let req = || {
            http::Request::get("/v1/stream/a?offset=now&live=long-poll")
                .body(axum::body::Body::empty())
                .unwrap()
        };
        let any = super::answer(state.clone(), req());
        let any = std::mem::size_of_val(&any);
        assert!(any < 4096, "a request's future is {any} bytes");
        // A parked long-poll keeps this for its whole wait (the way there
        // runs boxed apart and is gone by then).
        let live = super::live::answer(state, Box::new(req()));
        let live = std::mem::size_of_val(&live);
        assert!(live < 1024, "a live read's future is {live} bytes");
    }
}
