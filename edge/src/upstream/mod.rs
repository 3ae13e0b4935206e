//! The edge's only way to the origin: one pooled HTTP client, with requests
//! either passed through as they stream or read whole into an [`Answer`].
//!
//! With several origins (`--origin A,B,C`: the origins of one region, any
//! of which answers any stream) the edge sends to one at a time and moves
//! to the next when it cannot connect. A request without a body (GET,
//! HEAD) is then sent to the next at once, up to every origin once; one
//! with a body was consumed by the failed try, so it answers as
//! unreachable and the next request goes to the next origin. An answer a
//! follower forwarded names the owner (`ds-region-owner`); when the owner
//! is in the list, the edge uses it from then on, saving the hop. In a
//! region of several partitions (the answer names the count,
//! `ds-region-partitions`) the owner is remembered per partition, so each
//! stream's requests go straight to its partition's owner (the partition
//! map, learned from answers: `shared::partition`).
//!
//! Behind an HTTP hop (a balancer, nginx) an unreachable origin answers
//! `502` or `504` (the hop's own: the origin never answers either); to a
//! request without a body the edge takes those as it takes a refused
//! connection (a 504 without moving to the next origin).
//!
//! Requests that wait (the shared tails' long-polls, collapsed long-polls,
//! the invalidation feed) go over HTTP/2, many to a connection
//! ([`multiplexed`]), where the origin speaks it, else over HTTP/1.1
//! ([`waiting`]); the rest over pooled HTTP/1.1 connections.

pub mod multiplexed;
pub(crate) mod probe;
pub mod waiting;

use std::sync::Arc;

use axum::body::Body;
use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use std::sync::atomic::Ordering::Relaxed;

use crate::answer::{strip_hop_by_hop, Answer};
use multiplexed::{MultiplexError, MultiplexLimits};
use waiting::{ProtocolChoice, Waiting};

/// No owner known for a partition.
const NONE: usize = usize::MAX;
use crate::metrics::{self, Metrics};

/// Why the origin gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("the origin could not be reached")]
    Connect(#[source] hyper_util::client::legacy::Error),
    #[error("the origin's answer broke off or was too large")]
    Body(#[source] Box<dyn std::error::Error + Send + Sync>),
    #[error("the request path cannot be sent upstream")]
    Uri(#[source] http::Error),
    #[error("a waiting request to the origin failed")]
    Multiplexed(#[source] MultiplexError),
    /// An HTTP hop between edge and origin (a balancer, nginx) answered
    /// `502` or `504`: it could not reach the origin, or gave up waiting.
    /// The origin itself never answers either.
    #[error(
        "an HTTP hop before the origin answered {0}: the origin could not be reached through it"
    )]
    Gateway(http::StatusCode),
}

impl UpstreamError {
    /// Whether the origin could not be reached at all (the next origin
    /// may be tried, and is used from then on).
    fn is_connect(&self) -> bool {
        match self {
            UpstreamError::Connect(e) => e.is_connect(),
            UpstreamError::Multiplexed(e) => e.is_connect(),
            // A 504 may be one slow answer of a healthy origin: not moved
            // from.
            UpstreamError::Gateway(s) => *s == http::StatusCode::BAD_GATEWAY,
            _ => false,
        }
    }
}

/// How long an idle HTTP/1.1 connection to an origin is kept (hyper's
/// default is 60 s): connections in steady use are reused long before it,
/// and those a burst opened (a thousand SSE readers' first reads) close
/// soon after it.
const IDLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(20);

#[derive(Clone)]
pub struct Upstream {
    client: Client<HttpConnector, Body>,
    /// Waiting requests' ways: HTTP/2 connections, or HTTP/1.1.
    waiting: Arc<Waiting>,
    /// `http://host:port` of each origin.
    bases: Arc<[Arc<str>]>,
    /// The same, parsed once: a request's URI is built of its parts and
    /// the request's own path (formatting and parsing a whole URI per
    /// request, and hyper formatting the `Host` it adds when there is
    /// none, were ~1,500 instructions per forwarded request).
    targets: Arc<[Target]>,
    /// The origin in use (an index into `bases`).
    current: Arc<std::sync::atomic::AtomicUsize>,
    /// The region's partition count as answers named it (1: one).
    partitions: Arc<std::sync::atomic::AtomicU32>,
    /// Each partition's owner as forwarded answers named it (`NONE`:
    /// unknown); `MAX_PARTITIONS` of them.
    owners: Arc<[std::sync::atomic::AtomicUsize]>,
    metrics: Arc<Metrics>,
    max_answer_bytes: usize,
}

impl Upstream {
    /// `origins` holds at least one.
    pub fn new(
        origins: &[Uri],
        metrics: Arc<Metrics>,
        max_answer_bytes: usize,
        multiplex: MultiplexLimits,
        protocol: ProtocolChoice,
    ) -> Upstream {
        // hyper keeps every idle connection for 60 s by default, as many
        // as the busiest moment opened: bounded, so a burst (a thousand
        // SSE readers' first reads) does not leave the origin holding a
        // thousand idle connections for a minute.
        assert!(!origins.is_empty(), "at least one origin");
        let mut connector = HttpConnector::new();
        // Answers are small and latency-bound, as on the origin.
        connector.set_nodelay(true);
        // As the HTTP/2 connections: an origin that does not answer the
        // connection counts as unreachable, and TCP keepalives find one
        // that vanished while a waiting request (over HTTP/1.1 behind a
        // hop) waits on it.
        connector.set_connect_timeout(Some(multiplexed::CONNECT_TIMEOUT));
        connector.set_keepalive(Some(std::time::Duration::from_secs(20)));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(IDLE_TIMEOUT)
            .pool_max_idle_per_host(multiplex.idle_http1)
            .build(connector);
        let bases = origins
            .iter()
            .map(|origin| {
                format!(
                    "{}://{}",
                    origin.scheme_str().unwrap_or("http"),
                    origin
                        .authority()
                        .map(|a| a.as_str())
                        .unwrap_or("127.0.0.1")
                )
                .into()
            })
            .collect::<Arc<[Arc<str>]>>();
        Upstream {
            client: client.clone(),
            waiting: Arc::new(Waiting::new(
                &bases,
                multiplex,
                protocol,
                client.clone(),
                Arc::clone(&metrics),
            )),
            targets: bases.iter().map(|b| Target::of(b)).collect(),
            bases,
            current: Arc::default(),
            partitions: Arc::new(std::sync::atomic::AtomicU32::new(1)),
            owners: (0..shared::partition::MAX_PARTITIONS)
                .map(|_| std::sync::atomic::AtomicUsize::new(NONE))
                .collect(),
            metrics,
            max_answer_bytes,
        }
    }

    /// The origin in use.
    fn origin(&self) -> usize {
        self.current.load(std::sync::atomic::Ordering::Relaxed) % self.bases.len()
    }

    /// The region's partition count as answers named it (1: one).
    pub fn partitions(&self) -> u32 {
        self.partitions.load(Relaxed)
    }

    /// The origin for a request of `path_and_query`: its partition's owner
    /// when known, else the one in use.
    fn origin_for(&self, path_and_query: &str) -> usize {
        match self.partition_of(path_and_query) {
            Some(p) => match self.owners[p as usize].load(Relaxed) {
                NONE => self.origin(),
                owner => owner % self.bases.len(),
            },
            None => self.origin(),
        }
    }

    /// The partition of a request's path, in a region of several.
    fn partition_of(&self, path_and_query: &str) -> Option<u32> {
        let partitions = self.partitions.load(Relaxed);
        (partitions > 1).then(|| {
            let (path, query) = match path_and_query.split_once('?') {
                Some((path, query)) => (path, Some(query)),
                None => (path_and_query, None),
            };
            shared::partition::of_request(path, query, partitions)
        })
    }

    /// `origin` could not be reached: the next one is used from now on
    /// (unless another request moved on already), and no partition's
    /// requests go to it until an answer names it again.
    fn move_on_from(&self, origin: usize) {
        for owner in self.owners.iter() {
            let _ = owner.compare_exchange(origin, NONE, Relaxed, Relaxed);
        }
        let next = (origin + 1) % self.bases.len();
        let _ = self.current.compare_exchange(
            origin,
            next,
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    fn uri(&self, origin: usize, path_and_query: &str) -> Result<Uri, UpstreamError> {
        let pq =
            PathAndQuery::try_from(path_and_query).map_err(|e| UpstreamError::Uri(e.into()))?;
        self.uri_of(origin, pq)
    }

    /// Origin `origin`'s URI of `pq`.
    fn uri_of(&self, origin: usize, pq: PathAndQuery) -> Result<Uri, UpstreamError> {
        let target = &self.targets[origin];
        let mut parts = http::uri::Parts::default();
        parts.scheme = Some(target.scheme.clone());
        parts.authority = Some(target.authority.clone());
        parts.path_and_query = Some(pq);
        Uri::from_parts(parts).map_err(|e| UpstreamError::Uri(e.into()))
    }

    /// Sends a reader's request on to the origin as it is (minus the headers
    /// of this hop) and gives back the origin's answer as it streams.
    pub async fn forward(
        &self,
        req: Request<Body>,
        kind: metrics::Upstream,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let (mut parts, body) = req.into_parts();
        // The request's own parsed path and query (shared bytes, no copy).
        let path_and_query = parts
            .uri
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let pq = path_and_query.as_str();
        strip_hop_by_hop(&mut parts.headers);
        // `send` names the origin's host (`Host`, or HTTP/2's authority).
        let bodiless = parts.method == Method::GET || parts.method == Method::HEAD;
        if !bodiless || self.bases.len() == 1 {
            let origin = self.origin_for(pq);
            parts.uri = self.uri_of(origin, path_and_query.clone())?;
            return self
                .send(Request::from_parts(parts, body), kind, origin)
                .await
                .map(|(resp, _)| resp);
        }
        // Without a body the request can go to each origin in turn (boxed:
        // every waiting request's future would carry the retry loop).
        let (method, headers, version) = (parts.method, parts.headers, parts.version);
        Box::pin(self.each_origin(pq, kind, move || {
            let mut req = Request::new(Body::empty());
            *req.method_mut() = method.clone();
            *req.headers_mut() = headers.clone();
            *req.version_mut() = version;
            req
        }))
        .await
        .map(|(resp, _)| resp)
    }

    /// Sends the request `make` builds to the origin in use, and to the
    /// next ones while they cannot be reached (each once at most).
    async fn each_origin(
        &self,
        path_and_query: &str,
        kind: metrics::Upstream,
        make: impl Fn() -> Request<Body>,
    ) -> Result<(Response<Incoming>, Option<multiplexed::Stream>), UpstreamError> {
        let mut last = None;
        for _ in 0..self.bases.len() {
            let mut req = make();
            let origin = self.origin_for(path_and_query);
            *req.uri_mut() = self.uri(origin, path_and_query)?;
            match self.send(req, kind, origin).await {
                Err(e) if e.is_connect() => last = Some(e),
                other => return other,
            }
        }
        Err(last.expect("at least one origin"))
    }

    /// `GET path_and_query` with the given request headers, read whole.
    pub async fn get(
        &self,
        path_and_query: &str,
        headers: HeaderMap,
        kind: metrics::Upstream,
    ) -> Result<Answer, UpstreamError> {
        let resp = Box::pin(self.each_origin(path_and_query, kind, || {
            let mut req = Request::new(Body::empty());
            *req.method_mut() = Method::GET;
            *req.headers_mut() = headers.clone();
            req
        }))
        .await?;
        // A waiting request's stream is held until its answer is read.
        let (resp, _stream) = resp;
        Answer::read(resp, self.max_answer_bytes)
            .await
            .inspect_err(|_| self.metrics.upstream_error())
    }

    /// Sends `req` (addressed to `origin`, an index into `bases`): a
    /// waiting one over HTTP/2 (with its stream, to hold until the answer
    /// is read), the rest over HTTP/1.1.
    async fn send(
        &self,
        mut req: Request<Body>,
        kind: metrics::Upstream,
        origin: usize,
    ) -> Result<(Response<Incoming>, Option<multiplexed::Stream>), UpstreamError> {
        self.metrics.upstream(kind);
        req.headers_mut()
            .insert(http::header::VIA, HeaderValue::from_static("1.1 ds-edge"));
        shell::request_id::pass_on(req.headers_mut());
        // Shared bytes, not a copy (needed only if a region's owner is named).
        let path = req.uri().path_and_query().cloned();
        let bodiless = req.method() == Method::GET || req.method() == Method::HEAD;
        let sent = tokio::time::Instant::now();
        let answered = if kind.waits() {
            // Boxed: its connection opening would grow every forwarded
            // request's future, which never takes this branch.
            // HTTP/2 names the origin by the URI's authority alone.
            req.headers_mut().remove(http::header::HOST);
            Box::pin(self.waiting.request(origin, req))
                .await
                .map(|(resp, stream)| (resp, Some(stream)))
                .map_err(UpstreamError::Multiplexed)
        } else {
            // Ours, so that hyper need not format one.
            req.headers_mut()
                .insert(http::header::HOST, self.targets[origin].host.clone());
            self.client
                .request(req)
                .await
                .map(|resp| (resp, None))
                .map_err(UpstreamError::Connect)
        };
        self.metrics.upstream_took(kind, sent.elapsed());
        let answered = answered.and_then(|(resp, stream)| match resp.status() {
            // A hop's own, to a request without a body: as if the origin
            // could not be reached (on a 502 the next origin is tried; the
            // reader gets the edge's 503). A request with a body may have
            // been applied before the hop gave up: its answer is passed on
            // as it came, so nobody is invited to send it again.
            s @ (http::StatusCode::BAD_GATEWAY | http::StatusCode::GATEWAY_TIMEOUT) if bodiless => {
                Err(UpstreamError::Gateway(s))
            }
            _ => Ok((resp, stream)),
        });
        let (mut resp, stream) = answered.inspect_err(|e| {
            self.metrics.upstream_error();
            if e.is_connect() {
                self.move_on_from(origin);
            }
        })?;
        strip_hop_by_hop(resp.headers_mut());
        // A region's answers name its map; most answers carry neither
        // header (one pass over the names rather than two removals).
        let mapped = resp
            .headers()
            .keys()
            .any(|n| n == shared::headers::REGION_PARTITIONS || n == shared::headers::REGION_OWNER);
        if !mapped {
            return Ok((resp, stream));
        }
        if let Some(count) = resp
            .headers_mut()
            .remove(shared::headers::REGION_PARTITIONS)
            .and_then(|v| v.to_str().ok()?.parse::<u32>().ok())
        {
            self.partitions
                .store(count.clamp(1, shared::partition::MAX_PARTITIONS), Relaxed);
        }
        if let Some(owner) = resp.headers_mut().remove(shared::headers::REGION_OWNER) {
            self.prefer(&owner, path.as_ref().map_or("/", |p| p.as_str()));
        }
        Ok((resp, stream))
    }

    /// A follower forwarded the answer to a request of `path` (and query) and named
    /// the owner: if the owner is one of this edge's origins, requests (of
    /// its partition, in a region of several) go there from now on.
    fn prefer(&self, owner: &HeaderValue, path: &str) {
        let Ok(owner) = owner.to_str() else { return };
        let owner = owner.trim_end_matches('/');
        let Some(i) = self.bases.iter().position(|b| &**b == owner) else {
            return;
        };
        match self.partition_of(path) {
            Some(p) => self.owners[p as usize].store(i, Relaxed),
            None => self.current.store(i, Relaxed),
        }
    }
}

/// One origin's address, parsed.
struct Target {
    scheme: http::uri::Scheme,
    authority: http::uri::Authority,
    /// `Host` for its HTTP/1.1 requests.
    host: HeaderValue,
}

impl Target {
    /// From a base `scheme://authority` (as `Upstream::new` makes them).
    fn of(base: &str) -> Target {
        let uri = Uri::try_from(base).expect("an origin's base URL parses");
        let authority = uri.authority().expect("a base has an authority").clone();
        Target {
            scheme: uri.scheme().cloned().unwrap_or(http::uri::Scheme::HTTP),
            host: HeaderValue::from_str(authority.as_str())
                .expect("an authority is a header value"),
            authority,
        }
    }
}
