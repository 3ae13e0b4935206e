//! The edge's only way to the origin: one pooled HTTP client, with requests
//! either passed through as they stream or read whole into an [`Answer`].

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
    /// `http://host:port` of the origin.
    base: Arc<str>,
    metrics: Arc<Metrics>,
    max_answer_bytes: usize,
}

impl Upstream {
    pub fn new(origin: &Uri, metrics: Arc<Metrics>, max_answer_bytes: usize) -> Upstream {
        let mut connector = HttpConnector::new();
        // Answers are small and latency-bound, as on the origin.
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(std::time::Duration::from_secs(60))
            .build(connector);
        let base = format!(
            "{}://{}",
            origin.scheme_str().unwrap_or("http"),
            origin
                .authority()
                .map(|a| a.as_str())
                .unwrap_or("127.0.0.1")
        );
        Upstream {
            client,
            base: base.into(),
            metrics,
            max_answer_bytes,
        }
    }

    fn uri(&self, path_and_query: &str) -> Result<Uri, UpstreamError> {
        Uri::try_from(format!("{}{}", self.base, path_and_query))
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
        parts.uri = self.uri(&pq)?;
        strip_hop_by_hop(&mut parts.headers);
        // The client names the origin's host itself.
        parts.headers.remove(http::header::HOST);
        self.send(Request::from_parts(parts, body), kind).await
    }

    /// `GET path_and_query` with the given request headers, read whole.
    pub async fn get(
        &self,
        path_and_query: &str,
        headers: HeaderMap,
        kind: metrics::Upstream,
    ) -> Result<Answer, UpstreamError> {
        let mut req = Request::new(Body::empty());
        *req.method_mut() = Method::GET;
        *req.uri_mut() = self.uri(path_and_query)?;
        *req.headers_mut() = headers;
        let resp = self.send(req, kind).await?;
        Answer::read(resp, self.max_answer_bytes)
            .await
            .inspect_err(|_| self.metrics.upstream_error())
    }

    async fn send(
        &self,
        mut req: Request<Body>,
        kind: metrics::Upstream,
    ) -> Result<Response<Incoming>, UpstreamError> {
        self.metrics.upstream(kind);
        req.headers_mut()
            .insert("via", HeaderValue::from_static("1.1 ds-edge"));
        let mut resp = self.client.request(req).await.map_err(|e| {
            self.metrics.upstream_error();
            UpstreamError::Connect(e)
        })?;
        strip_hop_by_hop(resp.headers_mut());
        Ok(resp)
    }
}
