//! Which protocol an origin's waiting requests (shared tails, collapsed
//! long-polls, the invalidation feed) take: HTTP/2 with prior knowledge,
//! many to a connection, when the origin (or whatever stands between) speaks
//! it; else HTTP/1.1, a connection each.
//!
//! Why found out rather than assumed: a deployment may put any HTTP hop
//! between an edge and its origin (an internal balancer, nginx, a sidecar
//! without `h2c`). Such a hop answers HTTP/2's preface with an error or a
//! close, and every waiting request sent as HTTP/2 through it would fail,
//! while HTTP/1.1 requests pass. So each origin starts [`State::Unknown`]:
//! the first HTTP/2 connection opened to it is probed (a request that
//! answers at once); a probe that fails for any reason but an unreachable
//! origin makes the origin [`Protocol::Http1`] until `recheck` has passed,
//! when one probe runs beside the HTTP/1.1 traffic (requests never wait for
//! a re-check) and, if it passes, HTTP/2 is used again.
//!
//! The clock is the caller's: every decision takes `now`.

use std::time::Duration;

use tokio::time::Instant;

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
    /// Not found out yet: the next waiting request opens (and probes) an
    /// HTTP/2 connection.
    Unknown,
    Known(Protocol),
}

/// How to send the next waiting request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Route {
    /// On an HTTP/2 connection (a new one is probed before use in
    /// [`Mode::Auto`]).
    H2 { probe: bool },
    /// Over HTTP/1.1; with `recheck`, the caller also starts one probe of
    /// HTTP/2 in the background and reports its outcome.
    Http1 { recheck: bool },
}

/// One origin's protocol, as found out.
#[derive(Debug)]
pub struct Discovery {
    mode: Mode,
    recheck: Duration,
    state: State,
    /// With [`Protocol::Http1`] in [`Mode::Auto`]: when the next probe is due.
    recheck_at: Option<Instant>,
    /// A background probe is out (at most one at a time).
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
            recheck_at: None,
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
        match (self.mode, self.state) {
            (Mode::H2, _) => Route::H2 { probe: false },
            (Mode::Http1, _) => Route::Http1 { recheck: false },
            (Mode::Auto, State::Unknown | State::Known(Protocol::H2)) => Route::H2 { probe: true },
            (Mode::Auto, State::Known(Protocol::Http1)) => {
                let due = self.recheck_at.is_none_or(|at| now >= at);
                let recheck = due && !self.probing;
                if recheck {
                    self.probing = true;
                }
                Route::Http1 { recheck }
            }
        }
    }

    /// A probe (inline or in the background) was answered over HTTP/2.
    /// Whether the protocol changed (worth a log line).
    pub fn spoke_h2(&mut self) -> bool {
        self.probing = false;
        self.recheck_at = None;
        self.learned(Protocol::H2)
    }

    /// A probe failed although the origin's address accepted the
    /// connection: the origin, or a hop before it, does not speak HTTP/2
    /// with prior knowledge. Whether the protocol changed.
    pub fn no_h2(&mut self, now: Instant) -> bool {
        self.probing = false;
        if self.mode != Mode::Auto {
            return false;
        }
        self.recheck_at = Some(now + self.recheck);
        self.learned(Protocol::Http1)
    }

    /// A background probe could not even connect (the origin is down): it
    /// says nothing about the protocol; the next request after `recheck`
    /// tries again.
    pub fn probe_unreachable(&mut self, now: Instant) {
        self.probing = false;
        if self.state == State::Known(Protocol::Http1) {
            self.recheck_at = Some(now + self.recheck);
        }
    }

    fn learned(&mut self, protocol: Protocol) -> bool {
        let changed = self.state != State::Known(protocol);
        self.state = State::Known(protocol);
        changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECHECK: Duration = Duration::from_secs(60);

    #[test]
    fn auto_probes_first_and_keeps_h2_where_it_answers() {
        let now = Instant::now();
        let mut d = Discovery::new(Mode::Auto, RECHECK);
        assert_eq!(d.state(), State::Unknown);
        assert_eq!(d.route(now), Route::H2 { probe: true });
        assert!(d.spoke_h2());
        assert_eq!(d.state(), State::Known(Protocol::H2));
        assert_eq!(d.route(now), Route::H2 { probe: true });
        assert!(!d.spoke_h2(), "no change, no log line");
    }

    #[test]
    fn a_hop_without_h2_sends_http1_until_a_recheck_passes() {
        let t0 = Instant::now();
        let mut d = Discovery::new(Mode::Auto, RECHECK);
        assert_eq!(d.route(t0), Route::H2 { probe: true });
        assert!(d.no_h2(t0));
        assert_eq!(d.state(), State::Known(Protocol::Http1));
        // Before the re-check is due: HTTP/1.1, no probe.
        assert_eq!(d.route(t0), Route::Http1 { recheck: false });
        assert_eq!(
            d.route(t0 + RECHECK - Duration::from_millis(1)),
            Route::Http1 { recheck: false }
        );
        // Due: one request starts the probe, the others do not.
        assert_eq!(d.route(t0 + RECHECK), Route::Http1 { recheck: true });
        assert_eq!(d.route(t0 + RECHECK), Route::Http1 { recheck: false });
        // The probe fails again: the next one a whole period later.
        let t1 = t0 + RECHECK + Duration::from_secs(1);
        assert!(!d.no_h2(t1), "still HTTP/1.1: no new log line");
        assert_eq!(d.route(t1 + RECHECK / 2), Route::Http1 { recheck: false });
        assert_eq!(d.route(t1 + RECHECK), Route::Http1 { recheck: true });
        // It passes: HTTP/2 from then on.
        assert!(d.spoke_h2());
        assert_eq!(d.route(t1 + RECHECK), Route::H2 { probe: true });
    }

    #[test]
    fn an_unreachable_origin_says_nothing_of_its_protocol() {
        let t0 = Instant::now();
        let mut d = Discovery::new(Mode::Auto, RECHECK);
        d.no_h2(t0);
        assert_eq!(d.route(t0 + RECHECK), Route::Http1 { recheck: true });
        d.probe_unreachable(t0 + RECHECK);
        assert_eq!(d.state(), State::Known(Protocol::Http1));
        assert_eq!(d.route(t0 + RECHECK), Route::Http1 { recheck: false });
        assert_eq!(d.route(t0 + 2 * RECHECK), Route::Http1 { recheck: true });
    }

    #[test]
    fn forced_modes_never_probe_or_change() {
        let now = Instant::now();
        let mut h2 = Discovery::new(Mode::H2, RECHECK);
        assert_eq!(h2.route(now), Route::H2 { probe: false });
        assert!(!h2.no_h2(now));
        assert_eq!(h2.route(now + RECHECK), Route::H2 { probe: false });
        let mut h1 = Discovery::new(Mode::Http1, RECHECK);
        assert_eq!(h1.state(), State::Known(Protocol::Http1));
        assert_eq!(
            h1.route(now + 10 * RECHECK),
            Route::Http1 { recheck: false }
        );
    }
}
