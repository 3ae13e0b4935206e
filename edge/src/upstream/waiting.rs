//! The way each waiting request (a shared tail's long-poll, a collapsed
//! long-poll, the invalidation feed) takes to its origin: HTTP/2, many to a
//! connection ([`super::multiplexed`]), where the origin speaks it with prior
//! knowledge; HTTP/1.1, a connection each, where it does not, as through
//! an HTTP/1.1-only hop (an internal balancer, nginx, a sidecar without
//! `h2c`). Which one is found out per origin and re-checked
//! ([`crate::core::upstream_protocol`]); `--upstream-protocol` can fix it.
//!
//! Every change is logged once and shown by `ds_edge_upstream_protocol`, so
//! an operator sees why an edge holds a connection per tail. Over HTTP/1.1
//! the waiting requests in flight to one origin are bounded
//! ([`MultiplexLimits::http1_waiting`]); past it a new one is refused at
//! once, as at HTTP/2's bound.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::{Request, Response, Uri};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use parking_lot::Mutex;

use super::multiplexed::{self, MultiplexError, MultiplexLimits, Multiplexed, Stream};
use crate::core::upstream_protocol::{Discovery, Mode, Protocol, Route, State};
use crate::metrics::Metrics;

/// How the edge finds each origin's protocol for waiting requests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProtocolChoice {
    pub mode: Mode,
    /// How long an origin found not to speak HTTP/2 is sent HTTP/1.1 before
    /// it is probed again.
    pub recheck: Duration,
}

impl Default for ProtocolChoice {
    fn default() -> Self {
        ProtocolChoice {
            mode: Mode::Auto,
            recheck: Duration::from_secs(60),
        }
    }
}

/// One origin's way.
struct Way {
    /// `scheme://authority`, as logged and labelled.
    name: Arc<str>,
    /// Its URI (for a background probe).
    base: Uri,
    discovery: Mutex<Discovery>,
    http1_in_flight: Arc<AtomicUsize>,
}

pub struct Waiting {
    h2: Multiplexed,
    http1: Client<HttpConnector, Body>,
    ways: Box<[Way]>,
    limits: MultiplexLimits,
    metrics: Arc<Metrics>,
}

impl Waiting {
    /// `bases` are the origins' `scheme://authority`; `http1` the edge's
    /// pooled HTTP/1.1 client.
    pub fn new(
        bases: &[Arc<str>],
        limits: MultiplexLimits,
        choice: ProtocolChoice,
        http1: Client<HttpConnector, Body>,
        metrics: Arc<Metrics>,
    ) -> Waiting {
        let ways = bases
            .iter()
            .map(|name| {
                let way = Way {
                    name: Arc::clone(name),
                    base: Uri::try_from(&**name).expect("an origin's base URL parses"),
                    discovery: Mutex::new(Discovery::new(choice.mode, choice.recheck)),
                    http1_in_flight: Arc::default(),
                };
                metrics.set_upstream_protocol(name, way.protocol());
                way
            })
            .collect();
        Waiting {
            h2: Multiplexed::new(bases.len(), limits, Arc::clone(&metrics)),
            http1,
            ways,
            limits,
            metrics,
        }
    }

    /// Sends the waiting request `req` (its URI absolute, naming origin
    /// `origin`'s address) the way that origin takes; the answer, and the
    /// stream to hold until its body is read.
    pub async fn request(
        self: &Arc<Self>,
        origin: usize,
        req: Request<Body>,
    ) -> Result<(Response<Incoming>, Stream), MultiplexError> {
        let way = &self.ways[origin];
        let (route, before) = {
            let mut discovery = way.discovery.lock();
            (
                discovery.route(tokio::time::Instant::now()),
                discovery.state(),
            )
        };
        match route {
            Route::H2 { probe } => match self.h2.room(origin, req.uri(), probe).await {
                Ok((send, stream)) => {
                    // A connection with room was probed when it opened.
                    if before == State::Unknown && way.discovery.lock().spoke_h2() {
                        self.changed(way, None);
                    }
                    Multiplexed::send(send, req, stream).await
                }
                Err(MultiplexError::NoH2(why)) => {
                    let now = tokio::time::Instant::now();
                    if way.discovery.lock().no_h2(now) {
                        self.changed(way, Some(&*why));
                    }
                    self.send_http1(way, req).await
                }
                Err(e) => Err(e),
            },
            Route::Http1 { recheck } => {
                if recheck {
                    self.recheck(origin);
                }
                self.send_http1(way, req).await
            }
        }
    }

    /// Over HTTP/1.1, within the bound.
    async fn send_http1(
        &self,
        way: &Way,
        mut req: Request<Body>,
    ) -> Result<(Response<Incoming>, Stream), MultiplexError> {
        let stream = Stream::take(
            &way.http1_in_flight,
            self.limits.http1_waiting,
            self.metrics.http1_waiting_guard(),
        )
        .ok_or(MultiplexError::Full)?;
        // HTTP/1.1 names the host (hyper adds it from the URI when absent).
        req.headers_mut().remove(http::header::HOST);
        let resp = self
            .http1
            .request(req)
            .await
            .map_err(MultiplexError::Http1)?;
        Ok((resp, stream))
    }

    /// Probes origin `origin`'s HTTP/2 in the background (the requests
    /// meanwhile go over HTTP/1.1).
    fn recheck(self: &Arc<Self>, origin: usize) {
        let this = Arc::clone(self);
        tokio::spawn(async move {
            let way = &this.ways[origin];
            let outcome = multiplexed::connect(&way.base, true).await;
            let now = tokio::time::Instant::now();
            let mut discovery = way.discovery.lock();
            match outcome {
                Ok(_probed) => {
                    if discovery.spoke_h2() {
                        drop(discovery);
                        this.changed(way, None);
                    }
                }
                Err(MultiplexError::NoH2(why)) => {
                    discovery.no_h2(now);
                    tracing::debug!(origin = %way.name, error = %why, "the origin still does not speak HTTP/2");
                }
                Err(e) => {
                    discovery.probe_unreachable(now);
                    tracing::debug!(origin = %way.name, error = %e, "the origin could not be probed");
                }
            }
        });
    }

    /// Logs and shows a change of `way`'s protocol.
    fn changed(&self, way: &Way, why: Option<&(dyn std::error::Error + Send + Sync)>) {
        let protocol = way.protocol();
        self.metrics.set_upstream_protocol(&way.name, protocol);
        match (protocol, why) {
            (Some(Protocol::Http1), Some(why)) => tracing::warn!(
                origin = %way.name,
                error = %why,
                recheck_s = way.discovery.lock().recheck().as_secs(),
                "the origin, or an HTTP hop before it, does not speak HTTP/2 with prior knowledge: \
                 waiting requests (tails, long-polls, the invalidation feed) go over HTTP/1.1, \
                 a connection each, and HTTP/2 is tried again after recheck_s"
            ),
            _ => tracing::info!(
                origin = %way.name,
                "the origin speaks HTTP/2 with prior knowledge: waiting requests share its connections"
            ),
        }
    }
}

impl Way {
    fn protocol(&self) -> Option<Protocol> {
        match self.discovery.lock().state() {
            State::Unknown => None,
            State::Known(p) => Some(p),
        }
    }
}
