//! How a region origin answers a request: its own endpoints (`/metrics`
//! summed over the stores it serves, `/healthz`), and every other request
//! by the store of its partition, the owner it follows for it, or 503
//! while the partition is joining.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Response};
use axum::response::IntoResponse;

use super::{Current, RegionOrigin};
use crate::http::error::ApiError;
use crate::http::{self, routes};

/// Answers one request: the server's own endpoints here, the rest by the
/// store of its partition or the owner this origin follows for it.
pub(super) async fn handle<B>(me: Arc<RegionOrigin>, req: axum::http::Request<B>) -> Response<Body>
where
    B: http_body::Body<Data = bytes::Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    if req.method() == Method::GET {
        match req.uri().path() {
            routes::METRICS => return me.metrics_answer(),
            routes::HEALTH => return http::health_response(),
            _ => {}
        }
    }
    let p = shared::partition::of_request(req.uri().path(), req.uri().query(), me.partitions);
    if let Some(refused) = fork_across(&req, p, me.partitions) {
        return refused;
    }
    let feed = req.uri().path() == shared::invalidation::PATH;
    let mut answer = match me.current(p) {
        Current::Serving { state, .. } => http::handle(state, req).await,
        Current::Following { url } => {
            me.forwarder
                .forward(&url, req.map(Body::new), me.ended(p))
                .await
        }
        Current::Joining => {
            let mut r = ApiError::Busy(
                "this origin is joining its region or taking the partition over; retry shortly",
            )
            .into_response();
            http::common_headers(&mut r, true);
            r
        }
    };
    // Edges tail every partition's feed, and route by the partition map.
    let named = answer.headers().contains_key(shared::headers::REGION_OWNER);
    if me.partitions > 1 && (feed || named) {
        answer.headers_mut().insert(
            shared::headers::REGION_PARTITIONS,
            axum::http::HeaderValue::from(me.partitions),
        );
    }
    answer
}

/// A fork whose source lies in another partition than the fork (`p`):
/// refused for now, with a clear reason and nothing changed (a fork reads
/// its source's bytes in its own store).
fn fork_across<B>(req: &axum::http::Request<B>, p: u32, partitions: u32) -> Option<Response<Body>> {
    if partitions <= 1 || req.method() != Method::PUT {
        return None;
    }
    let source = req.headers().get(&shared::headers::STREAM_FORKED_FROM)?;
    let source = std::str::from_utf8(source.as_bytes()).ok()?;
    if shared::partition::of_stream(source, partitions) == p {
        return None;
    }
    let mut r = http::error::error_response(
        shared::error::ErrorCode::ForkAcrossPartitions,
        "the fork's path and its source's fall in different partitions of this region; forks across partitions are not supported yet (choose a path in the source's partition, or run the region with one partition)",
    );
    http::common_headers(&mut r, true);
    Some(r)
}

impl RegionOrigin {
    /// `/metrics`: the sums of the stores it serves, and its role.
    fn metrics_answer(&self) -> Response<Body> {
        let stores = self.serving();
        let texts: Vec<String> = stores
            .iter()
            .map(|s| s.metrics.render(s.store.stream_count()))
            .collect();
        let mut text = crate::metrics::merge::merge(&texts);
        // One request body budget for the whole origin: rendered once.
        self.sharing.ingress.render(&mut text);
        let (mut serving, mut following, mut epoch) = (0, 0, 0);
        for p in 0..self.partitions {
            match self.current(p) {
                Current::Serving { epoch: e, .. } => {
                    serving += 1;
                    epoch = epoch.max(e);
                }
                Current::Following { .. } => following += 1,
                Current::Joining => {}
            }
        }
        self.metrics
            .render_into(&mut text, serving, following, epoch);
        http::metrics_response(text)
    }
}
