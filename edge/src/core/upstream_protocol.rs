//! Which protocol an origin's waiting requests (shared tails, collapsed
//! long-polls, the invalidation feed) take: HTTP/2 with prior knowledge,
//! many to a connection, when the origin (or whatever stands between) speaks
//! it; else HTTP/1.1, a connection each.
//!
//! Why found out rather than assumed: a deployment may put any HTTP hop
//! between an edge and its origin (an internal balancer, nginx, a sidecar
//! without `h2c`). Such a hop answers HTTP/2's preface with an HTTP/1.1
//! error or a close, and every waiting request sent as HTTP/2 through it
//! would fail, while HTTP/1.1 requests pass.
//!
//! So each origin starts [`State::Unknown`], and one probe at a time (the
//! shell's, sent whatever becomes of the requests that asked for it) sends
//! HTTP/2's preface and reads the first bytes back:
//! - a `SETTINGS` frame: [`Outcome::H2`];
//! - anything else, or a close with nothing: [`Outcome::NoH2`] (positive
//!   evidence: an HTTP/2 server's first frame is always `SETTINGS`);
//! - nothing within the probe's time: [`Outcome::Inconclusive`] (an origin
//!   at its connection cap leaves new connections unread; that says nothing
//!   of the protocol);
//! - no connection: [`Outcome::Unreachable`].
//!
//! Requests that find the origin unknown wait for the probe; one that finds
//! it inconclusive goes over HTTP/1.1 alone, without changing anything.
//! An origin found without HTTP/2 is probed again after `recheck`, in the
//! background (requests never wait for a re-check); one found with it is
//! probed again only after a waiting request on HTTP/2 failed other than by
//! an unreachable address (a hop put in front, an origin restarted).
//!
//! The clock is the caller's: every decision takes `now`.

use std::time::Duration;

use tokio::time::Instant;

/// After an inconclusive or unreachable probe of an unknown origin, how
/// long requests go over HTTP/1.1 before another probe.
pub const RETRY_INCONCLUSIVE: Duration = Duration::from_secs(5);

/// What `--upstream-protocol` asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Mode {
    /// HTTP/2 where the origin speaks it, found out and re-checked; HTTP/1.1
    /// otherwise.
    #[default]
    Auto,
    /// HTTP/2 with prior knowledge always; a hop that does not speak it
    /// fails every waiting request.
    H2,
    /// HTTP/1.1 always, a connection per waiting request.
    Http1,
}

/// The protocol an origin's waiting requests take.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    H2,
    Http1,
}

impl Protocol {
    /// The label value of `ds_edge_upstream_protocol`.
    pub fn label(self) -> &'static str {
        match self {
            Protocol::H2 => "h2",
            Protocol::Http1 => "http1",
        }
    }
}

/// Where one origin stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    Unknown,
    Known(Protocol),
}

/// What a probe found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    H2,
    NoH2,
    Inconclusive,
    Unreachable,
}

/// How to send the next waiting request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    H2,
    Http1,
    /// Start the one probe (it is now out), then: with `wait`, send the
    /// request by its outcome ([`route_after`]); without, over HTTP/1.1 at
    /// once.
    StartProbe {
        wait: bool,
    },
    /// The probe that is out decides ([`route_after`]).
    AwaitProbe,
}

/// How a request that waited for a probe goes: `None` when the origin
/// could not be reached (as a failed connection).
pub fn route_after(outcome: Outcome) -> Option<Protocol> {
    match outcome {
        Outcome::H2 => Some(Protocol::H2),
        Outcome::NoH2 | Outcome::Inconclusive => Some(Protocol::Http1),
        Outcome::Unreachable => None,
    }
}

/// One origin's protocol, as found out.
#[derive(Debug)]
pub struct Discovery {
    mode: Mode,
    recheck: Duration,
    state: State,
    /// No probe starts before this.
    next_probe_at: Option<Instant>,
    /// A probe is out (at most one).
    probing: bool,
}

impl Discovery {
    pub fn new(mode: Mode, recheck: Duration) -> Discovery {
        let state = match mode {
            Mode::Auto => State::Unknown,
            Mode::H2 => State::Known(Protocol::H2),
            Mode::Http1 => State::Known(Protocol::Http1),
        };
        Discovery {
            mode,
            recheck,
            state,
            next_probe_at: None,
            probing: false,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// How long HTTP/1.1 is used before HTTP/2 is probed again.
    pub fn recheck(&self) -> Duration {
        self.recheck
    }

    /// How to send a waiting request now.
    pub fn route(&mut self, now: Instant) -> Route {
        if self.mode != Mode::Auto {
            return match self.state {
                State::Known(Protocol::Http1) => Route::Http1,
                _ => Route::H2,
            };
        }
        let due = self.next_probe_at.is_none_or(|at| now >= at);
        match self.state {
            State::Known(Protocol::H2) => Route::H2,
            State::Unknown if self.probing => Route::AwaitProbe,
            State::Unknown if due => self.start(true),
            State::Unknown => Route::Http1,
            State::Known(Protocol::Http1) if due && !self.probing => self.start(false),
            State::Known(Protocol::Http1) => Route::Http1,
        }
    }

    fn start(&mut self, wait: bool) -> Route {
        self.probing = true;
        Route::StartProbe { wait }
    }

    /// The probe that was out found `outcome`; the protocol it changed to,
    /// if it changed (worth a log line and the metric).
    pub fn settle(&mut self, outcome: Outcome, now: Instant) -> Option<Protocol> {
        self.probing = false;
        let learned = match outcome {
            Outcome::H2 => Protocol::H2,
            Outcome::NoH2 => Protocol::Http1,
            Outcome::Inconclusive | Outcome::Unreachable => {
                let wait = match self.state {
                    State::Known(Protocol::Http1) => self.recheck,
                    _ => RETRY_INCONCLUSIVE.min(self.recheck),
                };
                self.next_probe_at = Some(now + wait);
                return None;
            }
        };
        self.next_probe_at = (learned == Protocol::Http1).then(|| now + self.recheck);
        let changed = self.state != State::Known(learned);
        self.state = State::Known(learned);
        changed.then_some(learned)
    }

    /// A waiting request over HTTP/2 failed other than by an unreachable
    /// address: the next one probes again (in [`Mode::Auto`]). Whether the
    /// state changed.
    pub fn h2_failed(&mut self) -> bool {
        if self.mode != Mode::Auto || self.state != State::Known(Protocol::H2) {
            return false;
        }
        self.state = State::Unknown;
        self.next_probe_at = None;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECHECK: Duration = Duration::from_secs(60);

    #[test]
    fn one_probe_decides_for_every_request_that_finds_the_origin_unknown() {
        let now = Instant::now();
        let mut d = Discovery::new(Mode::Auto, RECHECK);
        assert_eq!(d.state(), State::Unknown);
        assert_eq!(d.route(now), Route::StartProbe { wait: true });
        assert_eq!(d.route(now), Route::AwaitProbe);
        assert_eq!(d.route(now), Route::AwaitProbe);
        assert_eq!(d.settle(Outcome::H2, now), Some(Protocol::H2));
        assert_eq!(d.state(), State::Known(Protocol::H2));
        assert_eq!(d.route(now + 10 * RECHECK), Route::H2, "never re-probed");
        assert_eq!(route_after(Outcome::H2), Some(Protocol::H2));
    }

    #[test]
    fn a_hop_without_h2_sends_http1_and_is_rechecked_in_the_background() {
        let t0 = Instant::now();
        let mut d = Discovery::new(Mode::Auto, RECHECK);
        assert_eq!(d.route(t0), Route::StartProbe { wait: true });
        assert_eq!(d.settle(Outcome::NoH2, t0), Some(Protocol::Http1));
        assert_eq!(route_after(Outcome::NoH2), Some(Protocol::Http1));
        assert_eq!(d.route(t0), Route::Http1);
        assert_eq!(
            d.route(t0 + RECHECK - Duration::from_millis(1)),
            Route::Http1
        );
        // Due: one request starts the probe and goes on; the others too.
        assert_eq!(d.route(t0 + RECHECK), Route::StartProbe { wait: false });
        assert_eq!(d.route(t0 + RECHECK), Route::Http1);
        // Still no HTTP/2: no change, the next probe a whole period later.
        let t1 = t0 + RECHECK + Duration::from_secs(1);
        assert_eq!(d.settle(Outcome::NoH2, t1), None);
        assert_eq!(d.route(t1 + RECHECK / 2), Route::Http1);
        assert_eq!(d.route(t1 + RECHECK), Route::StartProbe { wait: false });
        // It passes: HTTP/2 from then on.
        assert_eq!(d.settle(Outcome::H2, t1 + RECHECK), Some(Protocol::H2));
        assert_eq!(d.route(t1 + RECHECK), Route::H2);
    }

    #[test]
    fn an_inconclusive_probe_changes_nothing_and_is_tried_again_soon() {
        let t0 = Instant::now();
        let mut d = Discovery::new(Mode::Auto, RECHECK);
        assert_eq!(d.route(t0), Route::StartProbe { wait: true });
        assert_eq!(d.settle(Outcome::Inconclusive, t0), None);
        assert_eq!(d.state(), State::Unknown);
        assert_eq!(route_after(Outcome::Inconclusive), Some(Protocol::Http1));
        // Meanwhile, HTTP/1.1 for each request alone; then a probe again.
        assert_eq!(d.route(t0 + Duration::from_secs(1)), Route::Http1);
        assert_eq!(
            d.route(t0 + RETRY_INCONCLUSIVE),
            Route::StartProbe { wait: true }
        );
        // Unreachable: the waiters fail as on a refused connection.
        assert_eq!(
            d.settle(Outcome::Unreachable, t0 + RETRY_INCONCLUSIVE),
            None
        );
        assert_eq!(route_after(Outcome::Unreachable), None);
        assert_eq!(d.state(), State::Unknown);
        // Known HTTP/1.1 stays so when a re-check is inconclusive.
        assert_eq!(
            d.route(t0 + 2 * RETRY_INCONCLUSIVE),
            Route::StartProbe { wait: true }
        );
        d.settle(Outcome::NoH2, t0 + 2 * RETRY_INCONCLUSIVE);
        let t1 = t0 + 2 * RETRY_INCONCLUSIVE + RECHECK;
        assert_eq!(d.route(t1), Route::StartProbe { wait: false });
        assert_eq!(d.settle(Outcome::Inconclusive, t1), None);
        assert_eq!(d.state(), State::Known(Protocol::Http1));
        assert_eq!(d.route(t1 + RECHECK / 2), Route::Http1);
    }

    #[test]
    fn a_failed_h2_request_makes_the_next_probe_again() {
        let now = Instant::now();
        let mut d = Discovery::new(Mode::Auto, RECHECK);
        d.route(now);
        d.settle(Outcome::H2, now);
        assert!(d.h2_failed());
        assert!(!d.h2_failed(), "once");
        assert_eq!(d.route(now), Route::StartProbe { wait: true });
        assert_eq!(d.settle(Outcome::NoH2, now), Some(Protocol::Http1));
    }

    #[test]
    fn forced_modes_never_probe_or_change() {
        let now = Instant::now();
        let mut h2 = Discovery::new(Mode::H2, RECHECK);
        assert_eq!(h2.route(now), Route::H2);
        assert!(!h2.h2_failed());
        assert_eq!(h2.route(now + RECHECK), Route::H2);
        let mut h1 = Discovery::new(Mode::Http1, RECHECK);
        assert_eq!(h1.state(), State::Known(Protocol::Http1));
        assert_eq!(h1.route(now + 10 * RECHECK), Route::Http1);
    }
}
