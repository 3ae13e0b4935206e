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
//! is in the list, the edge uses it from then on, saving the hop.

use std::sync::Arc;

use axum::body::Body;
use http::{HeaderMap, HeaderValue, Method, Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use crate::answer::{strip_hop_by_hop, Answer};
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
}

#[derive(Clone)]
pub struct Upstream {
    client: Client<HttpConnector, Body>,
    /// `http://host:port` of each origin.
    bases: Arc<[Arc<str>]>,
    /// The origin in use (an index into `bases`).
    current: Arc<std::sync::atomic::AtomicUsize>,
    metrics: Arc<Metrics>,
    max_answer_bytes: usize,
}

impl Upstream {
    /// `origins` holds at least one.
    pub fn new(origins: &[Uri], metrics: Arc<Metrics>, max_answer_bytes: usize) -> Upstream {
        assert!(!origins.is_empty(), "at least one origin");
        let mut connector = HttpConnector::new();
        // Answers are small and latency-bound, as on the origin.
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(std::time::Duration::from_secs(60))
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
            .collect();
        Upstream {
            client,
            bases,
            current: Arc::default(),
            metrics,
            max_answer_bytes,
        }
    }

    /// The origin in use.
    fn origin(&self) -> usize {
        self.current.load(std::sync::atomic::Ordering::Relaxed) % self.bases.len()
    }

    /// `origin` could not be reached: the next one is used from now on
    /// (unless another request moved on already).
    fn move_on_from(&self, origin: usize) {
        let next = (origin + 1) % self.bases.len();
        let _ = self.current.compare_exchange(
            origin,
            next,
            std::sync::atomic::Ordering::Relaxed,
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    fn uri(&self, origin: usize, path_and_query: &str) -> Result<Uri, UpstreamError> {
        Uri::try_from(format!("{}{}", self.bases[origin], path_and_query))
            .map_err(|e| UpstreamError::Uri(e.into()))
    }

    /// Sends a reader's request on to the origin as it is (minus the headers
    /// of this hop) and gives back the origin's answer as it streams.
    pub async fn forward(
        &self,
        req: Request<Body>,
        kind: metrics::Upstream,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let (mut parts, body) = req.into_parts();
        let pq = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/")
            .to_owned();
        strip_hop_by_hop(&mut parts.headers);
        // The client names the origin's host itself.
        parts.headers.remove(http::header::HOST);
        let bodiless = parts.method == Method::GET || parts.method == Method::HEAD;
        if !bodiless || self.bases.len() == 1 {
            let origin = self.origin();
            parts.uri = self.uri(origin, &pq)?;
            return self
                .send(Request::from_parts(parts, body), kind, origin)
                .await;
        }
        // Without a body the request can go to each origin in turn (boxed:
        // every waiting request's future would carry the retry loop).
        let (method, headers, version) = (parts.method, parts.headers, parts.version);
        Box::pin(self.each_origin(&pq, kind, move || {
            let mut req = Request::new(Body::empty());
            *req.method_mut() = method.clone();
            *req.headers_mut() = headers.clone();
            *req.version_mut() = version;
            req
        }))
        .await
    }

    /// Sends the request `make` builds to the origin in use, and to the
    /// next ones while they cannot be reached (each once at most).
    async fn each_origin(
        &self,
        path_and_query: &str,
        kind: metrics::Upstream,
        make: impl Fn() -> Request<Body>,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let mut last = None;
        for _ in 0..self.bases.len() {
            let mut req = make();
            let origin = self.origin();
            *req.uri_mut() = self.uri(origin, path_and_query)?;
            match self.send(req, kind, origin).await {
                Err(UpstreamError::Connect(e)) if e.is_connect() => last = Some(e),
                other => return other,
            }
        }
        Err(UpstreamError::Connect(last.expect("at least one origin")))
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
        Answer::read(resp, self.max_answer_bytes)
            .await
            .inspect_err(|_| self.metrics.upstream_error())
    }

    /// Sends `req` (addressed to `origin`, an index into `bases`).
    async fn send(
        &self,
        mut req: Request<Body>,
        kind: metrics::Upstream,
        origin: usize,
    ) -> Result<Response<Incoming>, UpstreamError> {
        self.metrics.upstream(kind);
        req.headers_mut()
            .insert("via", HeaderValue::from_static("1.1 ds-edge"));
        let mut resp = self.client.request(req).await.map_err(|e| {
            self.metrics.upstream_error();
            if e.is_connect() {
                self.move_on_from(origin);
            }
            UpstreamError::Connect(e)
        })?;
        strip_hop_by_hop(resp.headers_mut());
        if let Some(owner) = resp.headers_mut().remove(shared::headers::REGION_OWNER) {
            self.prefer(&owner);
        }
        Ok(resp)
    }

    /// A follower forwarded the answer and named the owner: if the owner is
    /// one of this edge's origins, requests go there from now on.
    fn prefer(&self, owner: &HeaderValue) {
        let Ok(owner) = owner.to_str() else { return };
        let owner = owner.trim_end_matches('/');
        if let Some(i) = self.bases.iter().position(|b| &**b == owner) {
            self.current.store(i, std::sync::atomic::Ordering::Relaxed);
        }
    }
}
