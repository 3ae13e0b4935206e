//! The way each waiting request (a shared tail's long-poll, a collapsed
//! long-poll, the invalidation feed) takes to its origin: HTTP/2, many to a
//! connection ([`super::multiplexed`]), where the origin speaks it with prior
//! knowledge; HTTP/1.1, a connection each, where it does not, as through
//! an HTTP/1.1-only hop (an internal balancer, nginx, a sidecar without
//! `h2c`). Which one is found out per origin by a probe ([`super::probe`])
//! and re-checked, by the rules of [`crate::core::upstream_protocol`];
//! `--upstream-protocol` can fix it.
//!
//! A probe runs in a task of its own, one per origin at a time, so its
//! outcome is recorded whatever becomes of the requests waiting for it (a
//! feed poll's own timeout, a tail whose readers left). Every change is
//! logged once and shown by `ds_edge_upstream_protocol` (set under the same
//! lock as the state, so the two never disagree), so an operator sees why
//! an edge holds a connection per tail. Over HTTP/1.1 the waiting requests
//! in flight to one origin are bounded
//! ([`MultiplexLimits::http1_waiting`]); past it a new one is refused at
//! once, as at HTTP/2's bound.

use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

use super::multiplexed::{MultiplexError, MultiplexLimits, Multiplexed, Stream};
use super::probe;
use crate::core::upstream_protocol::{
    route_after, Discovery, Mode, Outcome, Protocol, Route, State,
};
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

/// One probe's outcome, once it has one.
type ProbeOut = watch::Receiver<Option<Outcome>>;

/// One origin's way.
struct Way {
    /// `scheme://authority`, as logged and labelled.
    name: Arc<str>,
    /// `host:port`, probed.
    authority: String,
    found: Mutex<Found>,
    http1_in_flight: Arc<AtomicUsize>,
}

/// What is known of an origin, and the probe that is out.
struct Found {
    discovery: Discovery,
    probe: Option<ProbeOut>,
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
                let discovery = Discovery::new(choice.mode, choice.recheck);
                metrics.set_upstream_protocol(name, known(discovery.state()));
                Way {
                    name: Arc::clone(name),
                    authority: name
                        .split_once("://")
                        .map_or(&**name, |(_, a)| a)
                        .to_owned(),
                    found: Mutex::new(Found {
                        discovery,
                        probe: None,
                    }),
                    http1_in_flight: Arc::default(),
                }
            })
            .collect();
        Waiting {
            h2: Multiplexed::new(bases.len(), limits, Arc::clone(&metrics)),
            http1,
            ways,
            limits: MultiplexLimits {
                http1_waiting: limits.http1_waiting.max(1),
                ..limits
            },
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
        let (route, probe) = self.route(origin);
        let protocol = match route {
            Route::H2 => Protocol::H2,
            Route::Http1 | Route::StartProbe { wait: false } => Protocol::Http1,
            Route::StartProbe { wait: true } | Route::AwaitProbe => {
                let outcome = match probe {
                    Some(mut out) => out
                        .wait_for(Option::is_some)
                        .await
                        .map_or(Outcome::Inconclusive, |o| {
                            o.unwrap_or(Outcome::Inconclusive)
                        }),
                    None => Outcome::Inconclusive,
                };
                match route_after(outcome) {
                    Some(p) => p,
                    None => {
                        return Err(MultiplexError::Connect(std::io::Error::new(
                            std::io::ErrorKind::ConnectionRefused,
                            "the origin could not be reached",
                        )))
                    }
                }
            }
        };
        match protocol {
            Protocol::H2 => self.send_h2(origin, req).await,
            Protocol::Http1 => self.send_http1(&self.ways[origin], req).await,
        }
    }

    /// Decides the route, and starts the probe it calls for.
    fn route(self: &Arc<Self>, origin: usize) -> (Route, Option<ProbeOut>) {
        let mut found = self.ways[origin].found.lock();
        let route = found.discovery.route(Instant::now());
        let probe = match route {
            Route::StartProbe { .. } => {
                let (done, out) = watch::channel(None);
                found.probe = Some(out.clone());
                self.start_probe(origin, done);
                Some(out)
            }
            Route::AwaitProbe => found.probe.clone(),
            Route::H2 | Route::Http1 => None,
        };
        (route, probe)
    }

    /// Probes origin `origin` in a task of its own and records the outcome.
    fn start_probe(self: &Arc<Self>, origin: usize, done: watch::Sender<Option<Outcome>>) {
        let settle = Settle {
            this: Arc::clone(self),
            origin,
            done: Some(done),
        };
        tokio::spawn(async move {
            let mut settle = settle;
            let outcome = probe::h2(&settle.this.ways[origin].authority).await;
            settle.settle(outcome);
        });
    }

    /// Over HTTP/2; a request that fails other than by an unreachable
    /// address has the origin probed again.
    async fn send_h2(
        &self,
        origin: usize,
        req: Request<Body>,
    ) -> Result<(Response<Incoming>, Stream), MultiplexError> {
        let sent = match self.h2.room(origin, req.uri()).await {
            Ok((send, stream)) => Multiplexed::send(send, req, stream).await,
            Err(e) => Err(e),
        };
        if let Err(e @ (MultiplexError::Handshake(_) | MultiplexError::Request(_))) = &sent {
            let way = &self.ways[origin];
            let mut found = way.found.lock();
            if found.discovery.h2_failed() {
                self.metrics.set_upstream_protocol(&way.name, None);
                drop(found);
                tracing::info!(origin = %way.name, error = %e, "a waiting request over HTTP/2 failed: the origin's protocol is probed again");
            }
        }
        sent
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
        // HTTP/1.1 names the host: hyper writes it from the URI.
        req.headers_mut().remove(http::header::HOST);
        let resp = self
            .http1
            .request(req)
            .await
            .map_err(MultiplexError::Http1)?;
        Ok((resp, stream))
    }
}

/// Records a probe's outcome once: when it ends, or as inconclusive if its
/// task ended without one (so a probe can never stay out for ever).
struct Settle {
    this: Arc<Waiting>,
    origin: usize,
    done: Option<watch::Sender<Option<Outcome>>>,
}

impl Settle {
    fn settle(&mut self, outcome: Outcome) {
        let Some(done) = self.done.take() else { return };
        let way = &self.this.ways[self.origin];
        let mut found = way.found.lock();
        let changed = found.discovery.settle(outcome, Instant::now());
        if let Some(protocol) = changed {
            self.this
                .metrics
                .set_upstream_protocol(&way.name, Some(protocol));
        }
        let recheck = found.discovery.recheck();
        found.probe = None;
        drop(found);
        let _ = done.send(Some(outcome));
        match changed {
            Some(Protocol::Http1) => tracing::warn!(
                origin = %way.name,
                recheck_s = recheck.as_secs(),
                "the origin, or an HTTP hop before it, does not speak HTTP/2 with prior knowledge: \
                 waiting requests (tails, long-polls, the invalidation feed) go over HTTP/1.1, \
                 a connection each; HTTP/2 is probed again every recheck_s"
            ),
            Some(Protocol::H2) => tracing::info!(
                origin = %way.name,
                "the origin speaks HTTP/2 with prior knowledge: waiting requests share its connections"
            ),
            None if outcome == Outcome::Inconclusive => tracing::debug!(
                origin = %way.name,
                "the origin did not answer HTTP/2's preface in time: nothing learned"
            ),
            None => {}
        }
    }
}

impl Drop for Settle {
    fn drop(&mut self) {
        self.settle(Outcome::Inconclusive);
    }
}

/// The protocol a state names, if found out.
fn known(state: State) -> Option<Protocol> {
    match state {
        State::Unknown => None,
        State::Known(p) => Some(p),
    }
}
