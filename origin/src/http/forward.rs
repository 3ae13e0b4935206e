//! Passing a request on to the origin that owns the partition (object
//! durability, `region`): an origin that does not own it answers every
//! stream request by forwarding it as it streams (writes, reads, long-polls,
//! SSE tails, the invalidation feed), so clients and edges may talk to any
//! origin of the region and need no map.
//!
//! A forwarded request carries [`FORWARDED_BY`]; one that arrives with it
//! at an origin that does not serve the partition either is not forwarded
//! again (the region is moving the partition: `503` + `Retry-After`), so
//! two origins with different views cannot bounce a request between them.
//! A forwarded answer ends when this origin starts to stop, as its own
//! live reads do. It names the owner (`ds-region-owner`), so an edge that
//! lists the owner among its origins goes there directly from then on.
//!
//! Every wait on the owner is bounded: connecting by [`CONNECT_TIMEOUT`],
//! the answer's start by what a long-poll asks to wait plus the owner's
//! own bound on a write (`--object-write-timeout`) and [`ANSWER_GRACE`].
//! An owner cut off without a reset (its packets dropped) would otherwise
//! hold a request on a pooled connection for as long as TCP retransmits.
//! Past the bound the request answers `503` + `Retry-After`; a write's
//! outcome is then open, as it is when the owner's own put times out, and
//! a producer's retry settles it.

use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Response, Uri};
use axum::response::IntoResponse;
use futures::future::BoxFuture;
use futures::FutureExt;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

use super::error::ApiError;
use crate::metrics::RegionMetrics;

/// Names the origin that forwarded a request.
pub static FORWARDED_BY: HeaderName = HeaderName::from_static("ds-forwarded-by");

/// How long connecting to the owner may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Marks a request an origin makes of the region on a client's behalf
/// with the client's credential (a fork across partitions asking its
/// source's owner): forwarded, it counts with the region's own requests.
#[derive(Clone, Copy, Debug)]
pub struct OnBehalf;

/// The client this origin forwards with, pooled across requests.
#[derive(Clone)]
pub struct Forwarder {
    client: Client<HttpConnector, Body>,
    node: HeaderValue,
    metrics: Arc<RegionMetrics>,
    /// How long the owner may take to answer a request that does not wait
    /// (past what a long-poll asks to wait): the owner's own bound on a
    /// write, and then some.
    answer_within: Duration,
    /// Room for requests forwarded at once (`--region-forwards`): each
    /// holds a permit until its answer ends.
    room: Arc<tokio::sync::Semaphore>,
    forwards: usize,
}

/// What the owner gets past its own bound on a write before the hop to it
/// is given up.
const ANSWER_GRACE: Duration = Duration::from_secs(3);

/// How long the answer to a request forwarded as `parts` may take to
/// begin: what a long-poll of a stream or of the invalidation feed asks to
/// wait, plus `answer_within`. An SSE tail's answer begins at once.
fn answer_deadline(parts: &http::request::Parts, answer_within: Duration) -> Duration {
    let query = parts.uri.query();
    let waits = if parts.uri.path() == shared::invalidation::PATH {
        let asked = query
            .unwrap_or("")
            .split('&')
            .find_map(|kv| kv.strip_prefix("timeout_ms="))
            .and_then(|v| v.parse::<u64>().ok())
            .map(Duration::from_millis);
        asked.unwrap_or(super::invalidations::MAX_FEED_WAIT)
    } else {
        match shared::params::parse_read_query(query) {
            Ok(p)
                if parts.method == http::Method::GET
                    && p.live == shared::params::Live::LongPoll =>
            {
                Duration::from_millis(p.long_poll_ms(shared::params::DEFAULT_LONG_POLL_MS))
            }
            _ => Duration::ZERO,
        }
    };
    waits.min(super::invalidations::MAX_FEED_WAIT) + answer_within
}

impl Forwarder {
    /// `write_timeout`: the owner's `--object-write-timeout`, by when it
    /// answers any write.
    /// `forwards`: requests forwarded at once, at most.
    pub fn new(
        node: &str,
        metrics: Arc<RegionMetrics>,
        write_timeout: Duration,
        forwards: usize,
    ) -> Forwarder {
        let forwards = forwards.clamp(1, tokio::sync::Semaphore::MAX_PERMITS);
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        // An owner whose machine vanished answers nothing: give up on a
        // connection soon, and find dead pooled ones by keepalive.
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_keepalive(Some(Duration::from_secs(5)));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(60))
            .build(connector);
        Forwarder {
            client,
            node: HeaderValue::from_str(node).unwrap_or(HeaderValue::from_static("origin")),
            metrics,
            answer_within: write_timeout + ANSWER_GRACE,
            room: Arc::new(tokio::sync::Semaphore::new(forwards)),
            forwards,
        }
    }

    /// Requests forwarded and not yet answered to their end.
    pub fn in_flight(&self) -> usize {
        self.forwards - self.room.available_permits()
    }

    /// Sends `req` to the owner at `base` (`http://host:port`) and hands
    /// its answer back as it streams, until `ended` resolves (this origin
    /// stops, or no longer follows that owner): a request still waiting
    /// for its answer then answers 503, an answer streaming ends.
    pub async fn forward(
        &self,
        base: &str,
        req: Request,
        mut ended: BoxFuture<'static, ()>,
    ) -> Response<Body> {
        if req.headers().contains_key(&FORWARDED_BY) {
            return busy(
                "the region is moving this stream's partition between origins; retry shortly",
            );
        }
        let Ok(permit) = Arc::clone(&self.room).try_acquire_owned() else {
            self.metrics.forwards_refused.fetch_add(1, Relaxed);
            return busy(
                "this origin forwards as many requests to the partition's owner as it may (--region-forwards); retry shortly",
            );
        };
        let (mut parts, body) = req.into_parts();
        if let Err(refused) = self.readdress(base, &mut parts) {
            return *refused;
        }
        // A connection the owner no longer answers on (a cut without a
        // reset) would hold the request for as long as TCP retransmits.
        let deadline = answer_deadline(&parts, self.answer_within);
        let sent = tokio::time::timeout(
            deadline,
            self.client.request(Request::from_parts(parts, body)),
        );
        let answer = tokio::select! {
            answer = sent => answer,
            () = &mut ended => return busy(
                "this origin stopped following the partition's owner; retry shortly",
            ),
        };
        let Ok(answer) = answer else {
            self.metrics.forward_failed.fetch_add(1, Relaxed);
            tracing::warn!(
                owner = base,
                ?deadline,
                "the partition's owner did not answer in time"
            );
            return busy(
                "the origin that owns this stream's partition did not answer in time; \
                 a write's outcome is not known: send it again (with its producer headers, \
                 it is applied once)",
            );
        };
        match answer {
            Ok(answer) => {
                let (mut parts, body) = answer.into_parts();
                shell::proxy::strip_hop_by_hop(&mut parts.headers);
                if let Ok(owner) = HeaderValue::from_str(base) {
                    parts.headers.insert(shared::headers::REGION_OWNER, owner);
                }
                Response::from_parts(
                    parts,
                    Body::new(UntilClosed {
                        body,
                        closed: Some(ended),
                        _permit: permit,
                    }),
                )
            }
            Err(e) => {
                self.metrics.forward_failed.fetch_add(1, Relaxed);
                tracing::warn!(error = %e, owner = base, "could not forward to the partition's owner");
                busy(
                    "the origin that owns this stream's partition cannot be reached; the region takes it over within seconds",
                )
            }
        }
    }

    /// Readdresses a request to the owner at `base`: its URL, version and
    /// headers for the hop, and counts it.
    fn readdress(
        &self,
        base: &str,
        parts: &mut http::request::Parts,
    ) -> Result<(), Box<Response<Body>>> {
        let pq = parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/");
        let Ok(uri) = Uri::try_from(format!("{base}{pq}")) else {
            return Err(Box::new(
                ApiError::Internal(format!("the owner's URL {base} is not a URL")).into_response(),
            ));
        };
        parts.uri = uri;
        // The hop to the owner is HTTP/1.1 whatever the client spoke (an
        // edge's waiting requests come over HTTP/2): the client here speaks
        // only that, and refuses a request of another version.
        parts.version = http::Version::HTTP_11;
        shell::proxy::strip_hop_by_hop(&mut parts.headers);
        // The host the client asked for goes on as `X-Forwarded-Host`
        // (unless a proxy before this origin named one): a subscription
        // made through this origin names it in its callback URLs, not the
        // owner, which may be gone by the time they are called.
        if let Some(host) = parts.headers.remove(http::header::HOST) {
            if !parts.headers.contains_key("x-forwarded-host") {
                parts.headers.insert("x-forwarded-host", host);
            }
        }
        parts
            .headers
            .insert(FORWARDED_BY.clone(), self.node.clone());
        // The owner answers under this request's id.
        shell::request_id::pass_on(&mut parts.headers);
        // The region's own requests (a fork across partitions) are
        // counted apart from the clients' that reached the wrong origin.
        if parts.extensions.get::<super::Peer>().is_some()
            || parts.extensions.get::<OnBehalf>().is_some()
        {
            self.metrics.peer_forwarded.fetch_add(1, Relaxed);
        } else {
            self.metrics.forwarded.fetch_add(1, Relaxed);
        }
        Ok(())
    }
}

/// 503 + `Retry-After`, with the headers every stream answer carries (a
/// browser sees the refusal, not a CORS failure).
fn busy(why: &'static str) -> Response<Body> {
    let mut r = ApiError::Busy(why).into_response();
    super::common_headers(&mut r, true);
    r
}

/// A forwarded answer's body, ended (cleanly) once this origin is closing;
/// it holds the request's place among those forwarded.
struct UntilClosed<B> {
    body: B,
    closed: Option<BoxFuture<'static, ()>>,
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl<B> http_body::Body for UntilClosed<B>
where
    B: http_body::Body<Data = bytes::Bytes> + Unpin,
{
    type Data = bytes::Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<bytes::Bytes>, B::Error>>> {
        if let Some(closed) = &mut self.closed {
            if closed.poll_unpin(cx).is_ready() {
                self.closed = None;
                return Poll::Ready(None);
            }
        } else {
            return Poll::Ready(None);
        }
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.closed.is_none() || self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}
