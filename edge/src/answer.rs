//! An upstream answer held in memory, so it can be handed to many readers
//! (collapsed long-polls, cached chunks) without asking the origin again.

use axum::body::Body;
use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use http_body_util::{BodyExt, Limited};

use crate::upstream::UpstreamError;

pub use shell::proxy::strip_hop_by_hop;

/// A whole upstream answer.
#[derive(Clone, Debug)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Answer {
    /// Reads an upstream answer's body, refusing one larger than `limit`.
    pub async fn read(
        resp: Response<hyper::body::Incoming>,
        limit: usize,
    ) -> Result<Answer, UpstreamError> {
        let (parts, body) = resp.into_parts();
        let body = Limited::new(body, limit)
            .collect()
            .await
            .map_err(UpstreamError::Body)?
            .to_bytes();
        let mut headers = parts.headers;
        strip_hop_by_hop(&mut headers);
        // The length is the body's; hyper writes it again for each copy.
        headers.remove(http::header::CONTENT_LENGTH);
        Ok(Answer {
            status: parts.status,
            headers,
            body,
        })
    }

    pub fn header(&self, name: impl http::header::AsHeaderName) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A copy for one reader; the body bytes are shared, not copied.
    pub fn to_response(&self) -> Response<Body> {
        let mut r = Response::new(Body::from(self.body.clone()));
        *r.status_mut() = self.status;
        *r.headers_mut() = self.headers.clone();
        r
    }

    /// `304 Not Modified` with this answer's headers and no body.
    pub fn not_modified(&self) -> Response<Body> {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        *r.headers_mut() = self.headers.clone();
        r
    }

    /// Bytes this answer holds in memory, for the cache's weigher.
    pub fn weight(&self) -> usize {
        let headers: usize = self
            .headers
            .iter()
            .map(|(k, v)| k.as_str().len() + v.len() + 32)
            .sum();
        self.body.len() + headers + 64
    }
}
