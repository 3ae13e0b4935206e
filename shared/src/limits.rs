//! Per-budget limits, counted the same way by origin and edge: requests per
//! second (a token bucket; a burst of one second's worth) and live reads (long-polls, SSE) open at
//! once (long-polls and SSE). Over either, a request answers 429 with
//! `Retry-After`.
//!
//! A budget is what a request is charged to once its caller is known
//! ([`budget`]): the key a credential came from, or an account's anonymous
//! public readers. Limits are per process: an edge counts its own requests
//! and live reads, so a budget behind N edges can reach N times the edge limit
//! there, and the origin's own limit bounds what reaches the origin
//! (README, "Access").
//!
//! Memory is bounded twice: a budget idle for [`IDLE`] with no open tail is
//! dropped by [`Limits::sweep`], and at most `LimitConfig::budgets` are
//! kept. Past that bound, a new budget is counted in one shared overflow
//! budget until the sweep makes room: the limits still hold (for all the
//! overflowing callers together) and memory does not grow. Long budget
//! names are kept as a fixed-size digest.
//!
//! Time is passed in (`now`), never read here: callers take it from
//! tokio's clock, so paused-clock tests drive the buckets.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use crate::auth::Grant;

/// A budget with no open tail and no request for this long is forgotten.
pub const IDLE: Duration = Duration::from_secs(600);

/// Budget names longer than this are kept as their SHA-256.
const LONGEST_NAME: usize = 64;

/// The budget every new one is counted in while the map is full.
const OVERFLOW: &str = "(overflow)";

#[derive(Clone, Copy, Debug)]
pub struct LimitConfig {
    /// Requests per second per budget (0: no limit).
    pub rps: u32,
    /// Live reads open at once per budget (0: no limit).
    pub live_reads: u32,
    /// Budgets remembered at once; past it, new ones share one overflow
    /// budget until idle ones are swept.
    pub budgets: usize,
}

impl Default for LimitConfig {
    fn default() -> Self {
        LimitConfig {
            rps: 1000,
            live_reads: 16,
            budgets: 100_000,
        }
    }
}

/// The budget a request is charged to: its credential's key, or for a
/// request without one (a public stream's reader) the stream's account.
pub fn budget(grant: Option<&Grant>, account: &str) -> String {
    match grant {
        Some(g) => format!("key {}", g.key_id),
        None => format!("public {account}"),
    }
}

struct Bucket {
    tokens: f64,
    at: Instant,
    live_reads: u32,
}

struct Map {
    budgets: HashMap<Box<str>, Bucket>,
    /// When the map was last swept (a full map is swept at most once a
    /// second, so new names cannot make every request walk it).
    swept: Option<Instant>,
}

pub struct Limits {
    config: LimitConfig,
    map: Mutex<Map>,
}

/// Refused: retry after this many seconds.
#[derive(Debug, PartialEq, Eq)]
pub struct RetryAfter(pub u64);

/// The name a budget is kept under: itself, or its digest when long.
fn kept_name(budget: &str) -> std::borrow::Cow<'_, str> {
    if budget.len() <= LONGEST_NAME {
        budget.into()
    } else {
        format!("sha256 {}", hex::encode(Sha256::digest(budget.as_bytes()))).into()
    }
}

impl Map {
    fn idle(b: &Bucket, now: Instant) -> bool {
        b.live_reads == 0 && now.saturating_duration_since(b.at) >= IDLE
    }

    fn sweep(&mut self, now: Instant) {
        self.budgets.retain(|_, b| !Map::idle(b, now));
        self.swept = Some(now);
    }

    /// The name a request for `name` is counted under: itself, or while
    /// the map is full (after a sweep, at most once a second) the overflow.
    fn admitted<'n>(&mut self, name: &'n str, config: LimitConfig, now: Instant) -> &'n str {
        if self.budgets.contains_key(name) || self.budgets.len() < config.budgets {
            return name;
        }
        let due = self
            .swept
            .is_none_or(|at| now.saturating_duration_since(at) >= Duration::from_secs(1));
        if due {
            self.sweep(now);
        }
        if self.budgets.len() < config.budgets {
            name
        } else {
            OVERFLOW
        }
    }

    /// The bucket of `name`, made on its first request (the only time a
    /// name is allocated).
    fn bucket(&mut self, name: &str, config: LimitConfig, now: Instant) -> &mut Bucket {
        if !self.budgets.contains_key(name) {
            self.budgets.insert(
                name.into(),
                Bucket {
                    tokens: f64::from(config.rps),
                    at: now,
                    live_reads: 0,
                },
            );
        }
        self.budgets.get_mut(name).expect("made above")
    }
}

impl Limits {
    pub fn new(config: LimitConfig) -> Arc<Limits> {
        Arc::new(Limits {
            config,
            map: Mutex::new(Map {
                budgets: HashMap::new(),
                swept: None,
            }),
        })
    }

    pub fn config(&self) -> LimitConfig {
        self.config
    }

    fn map(&self) -> std::sync::MutexGuard<'_, Map> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Budgets remembered now.
    pub fn len(&self) -> usize {
        self.map().budgets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Takes one request from the budget.
    pub fn request(&self, budget: &str, now: Instant) -> Result<(), RetryAfter> {
        if self.config.rps == 0 {
            return Ok(());
        }
        let rate = f64::from(self.config.rps);
        let mut map = self.map();
        let kept = kept_name(budget);
        let name = map.admitted(&kept, self.config, now);
        let b = map.bucket(name, self.config, now);
        let since = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + since * rate).min(rate);
        b.at = b.at.max(now);
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(RetryAfter(((1.0 - b.tokens) / rate).ceil().max(1.0) as u64))
        }
    }

    /// Opens a tail for the budget; the guard closes it.
    pub fn open_tail(
        self: &Arc<Self>,
        budget: &str,
        now: Instant,
    ) -> Result<LiveReadGuard, RetryAfter> {
        let limit = self.config.live_reads;
        let mut map = self.map();
        let kept = kept_name(budget);
        let name: Box<str> = map.admitted(&kept, self.config, now).into();
        let b = map.bucket(&name, self.config, now);
        if limit > 0 && b.live_reads >= limit {
            // A tail ends within its timeout (long-poll) or session (SSE).
            return Err(RetryAfter(1));
        }
        b.live_reads += 1;
        b.at = b.at.max(now);
        Ok(LiveReadGuard {
            limits: Arc::clone(self),
            name,
        })
    }

    /// Drops budgets idle for [`IDLE`] with no open tail.
    pub fn sweep(&self, now: Instant) {
        self.map().sweep(now);
    }
}

pub struct LiveReadGuard {
    limits: Arc<Limits>,
    name: Box<str>,
}

impl Drop for LiveReadGuard {
    fn drop(&mut self) {
        if let Some(b) = self.limits.map().budgets.get_mut(&self.name) {
            b.live_reads = b.live_reads.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(rps: u32, live_reads: u32, budgets: usize) -> Arc<Limits> {
        Limits::new(LimitConfig {
            rps,
            live_reads,
            budgets,
        })
    }

    #[test]
    fn a_burst_over_the_rate_waits_then_passes() {
        let l = limits(10, 0, 100);
        let t0 = Instant::now();
        for _ in 0..10 {
            assert_eq!(l.request("a", t0), Ok(()));
        }
        assert_eq!(l.request("a", t0), Err(RetryAfter(1)));
        assert_eq!(l.request("b", t0), Ok(()), "budgets are apart");
        assert_eq!(l.request("a", t0 + Duration::from_millis(150)), Ok(()));
    }

    #[test]
    fn live_reads_are_counted_until_their_guard_drops() {
        let l = limits(0, 2, 100);
        let t0 = Instant::now();
        let a = l.open_tail("a", t0).unwrap();
        let _b = l.open_tail("a", t0).unwrap();
        assert!(l.open_tail("a", t0).is_err());
        drop(a);
        assert!(l.open_tail("a", t0).is_ok());
    }

    #[test]
    fn idle_budgets_are_swept_and_open_live_reads_keep_theirs() {
        let l = limits(10, 4, 100);
        let t0 = Instant::now();
        l.request("idle", t0).unwrap();
        let _tail = l.open_tail("tailing", t0).unwrap();
        l.sweep(t0 + IDLE - Duration::from_secs(1));
        assert_eq!(l.len(), 2);
        l.sweep(t0 + IDLE);
        assert_eq!(l.len(), 1, "the budget with an open tail stays");
    }

    #[test]
    fn past_the_bound_new_budgets_share_the_overflow_and_memory_stays() {
        let l = limits(5, 0, 3);
        let t0 = Instant::now();
        for name in ["a", "b", "c"] {
            l.request(name, t0).unwrap();
        }
        // A thousand new names fit in one overflow budget of 5 a second.
        let passed = (0..1000)
            .filter(|i| l.request(&format!("new {i}"), t0).is_ok())
            .count();
        assert_eq!(passed, 5);
        assert_eq!(l.len(), 4, "three budgets and the overflow");
        // Known budgets keep their own bucket meanwhile.
        assert_eq!(l.request("a", t0), Ok(()));
        // Once the idle ones are swept, a new name gets a budget again.
        let later = t0 + IDLE;
        l.request("a", later).unwrap();
        l.request("fresh", later).unwrap();
        assert_eq!(l.len(), 2, "`a` and `fresh`; the rest were idle");
    }

    #[test]
    fn long_names_are_kept_as_a_digest() {
        let l = limits(1, 0, 100);
        let t0 = Instant::now();
        let long = "x".repeat(4096);
        l.request(&long, t0).unwrap();
        assert_eq!(l.request(&long, t0), Err(RetryAfter(1)), "the same budget");
        let map = l.map();
        let (name, _) = map.budgets.iter().next().unwrap();
        assert!(name.len() <= 80, "{} bytes kept", name.len());
    }
}
