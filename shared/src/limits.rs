//! Per-account limits, counted the same way by origin and edge: requests per
//! second (a token bucket; a burst of one second's worth) and tails open at
//! once (long-polls and SSE). Over either, a request answers 429 with
//! `Retry-After`.
//!
//! Limits are per process: an edge counts its own requests and tails, so an
//! account behind N edges can reach N times the edge limit there, and the
//! origin's own limit bounds what reaches the origin (README, "Access").
//! Memory: one small entry per account seen; entries idle for 10 minutes
//! are dropped by [`Limits::sweep`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use std::sync::Mutex;

#[derive(Clone, Copy, Debug)]
pub struct LimitConfig {
    /// Requests per second per budget (a key; an account's anonymous
    /// public readers) (0: no limit).
    pub rps: u32,
    /// Tails open at once per budget (0: no limit).
    pub tails: u32,
}

struct Bucket {
    tokens: f64,
    at: Instant,
    tails: u32,
}

pub struct Limits {
    config: LimitConfig,
    accounts: Mutex<HashMap<String, Bucket>>,
}

/// Refused: retry after this many seconds.
#[derive(Debug, PartialEq, Eq)]
pub struct RetryAfter(pub u64);

impl Limits {
    pub fn new(config: LimitConfig) -> Arc<Limits> {
        Arc::new(Limits {
            config,
            accounts: Mutex::new(HashMap::new()),
        })
    }

    pub fn config(&self) -> LimitConfig {
        self.config
    }

    fn bucket<'a>(
        &self,
        map: &'a mut HashMap<String, Bucket>,
        account: &str,
        now: Instant,
    ) -> &'a mut Bucket {
        if !map.contains_key(account) {
            map.insert(
                account.to_owned(),
                Bucket {
                    tokens: f64::from(self.config.rps),
                    at: now,
                    tails: 0,
                },
            );
        }
        map.get_mut(account).expect("inserted above")
    }

    /// Takes one request from the account's budget.
    pub fn request(&self, account: &str, now: Instant) -> Result<(), RetryAfter> {
        if self.config.rps == 0 {
            return Ok(());
        }
        let rate = f64::from(self.config.rps);
        let mut map = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
        let b = self.bucket(&mut map, account, now);
        b.tokens = (b.tokens + now.duration_since(b.at).as_secs_f64() * rate).min(rate);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(RetryAfter(((1.0 - b.tokens) / rate).ceil().max(1.0) as u64))
        }
    }

    /// Opens a tail for the account; the guard closes it.
    pub fn open_tail(self: &Arc<Self>, account: &str) -> Result<TailGuard, RetryAfter> {
        let mut map = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let limit = self.config.tails;
        let b = self.bucket(&mut map, account, now);
        if limit > 0 && b.tails >= limit {
            // A tail ends within its timeout (long-poll) or session (SSE).
            return Err(RetryAfter(1));
        }
        b.tails += 1;
        Ok(TailGuard {
            limits: Arc::clone(self),
            account: account.to_owned(),
        })
    }

    /// Drops accounts idle for 10 minutes with no open tail.
    pub fn sweep(&self, now: Instant) {
        self.accounts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, b| b.tails > 0 || now.duration_since(b.at) < Duration::from_secs(600));
    }
}

pub struct TailGuard {
    limits: Arc<Limits>,
    account: String,
}

impl Drop for TailGuard {
    fn drop(&mut self) {
        let mut map = self
            .limits
            .accounts
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(b) = map.get_mut(&self.account) {
            b.tails = b.tails.saturating_sub(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_over_the_rate_waits_then_passes() {
        let l = Limits::new(LimitConfig { rps: 10, tails: 0 });
        let t0 = Instant::now();
        for _ in 0..10 {
            assert_eq!(l.request("a", t0), Ok(()));
        }
        assert_eq!(l.request("a", t0), Err(RetryAfter(1)));
        assert_eq!(l.request("b", t0), Ok(()), "accounts are apart");
        assert_eq!(l.request("a", t0 + Duration::from_millis(150)), Ok(()));
    }

    #[test]
    fn tails_are_counted_until_their_guard_drops() {
        let l = Limits::new(LimitConfig { rps: 0, tails: 2 });
        let a = l.open_tail("a").unwrap();
        let _b = l.open_tail("a").unwrap();
        assert!(l.open_tail("a").is_err());
        drop(a);
        assert!(l.open_tail("a").is_ok());
    }
}
