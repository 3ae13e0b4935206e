//! Time on the serving path, read from tokio's clock so that tests on a
//! paused clock (`start_paused`) drive every limit, TTL and timeout without
//! sleeping. A test's wall time is derived from it (SlateDB's model): a wall
//! time given at start, plus how far tokio's clock has moved since, so it
//! moves with the time the test advances. A server's wall time is the
//! system's (a clock set right after start, by NTP, counts at once).
//!
//! Threads outside the runtime (the origin's writer) read the origin's
//! injected `Clock` instead.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Monotonic now, from tokio's clock (paused in tests).
pub fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// The instant `after` from now on tokio's clock; a duration too long for
/// the clock (an operator's `--sse-session 584542y`) is a deadline a
/// century away, never an overflow.
pub fn deadline(after: Duration) -> tokio::time::Instant {
    const CENTURY: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
    let now = tokio::time::Instant::now();
    now.checked_add(after.min(CENTURY))
        .or_else(|| now.checked_add(Duration::from_secs(24 * 3600)))
        .unwrap_or(now)
}

/// Wall time: the system's, or (tests) derived from tokio's clock.
#[derive(Clone, Copy, Debug)]
pub enum WallClock {
    System,
    /// `wall` since the Unix epoch when tokio's clock read `at`.
    Derived {
        wall: Duration,
        at: tokio::time::Instant,
    },
}

impl WallClock {
    /// The system's wall clock.
    pub fn start() -> WallClock {
        WallClock::System
    }

    /// A wall clock reading `since_epoch` now and moving with tokio's
    /// clock from then on (tests).
    pub fn at(since_epoch: Duration) -> WallClock {
        WallClock::Derived {
            wall: since_epoch,
            at: tokio::time::Instant::now(),
        }
    }

    pub fn since_epoch(&self) -> Duration {
        match self {
            WallClock::System => SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
            WallClock::Derived { wall, at } => wall.saturating_add(at.elapsed()),
        }
    }

    /// Unix seconds now.
    pub fn now_secs(&self) -> u64 {
        self.since_epoch().as_secs()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_deadline_too_far_for_the_clock_is_a_century_away_not_a_panic() {
        let now = tokio::time::Instant::now();
        assert_eq!(
            deadline(Duration::from_secs(60)) - now,
            Duration::from_secs(60)
        );
        let far = deadline(Duration::MAX) - now;
        assert!(far >= Duration::from_secs(24 * 3600), "{far:?}");
        assert!(far <= Duration::from_secs(100 * 365 * 24 * 3600), "{far:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn wall_time_moves_with_tokios_clock() {
        let clock = WallClock::at(Duration::from_secs(1_000));
        assert_eq!(clock.now_secs(), 1_000);
        let before = now();
        tokio::time::sleep(Duration::from_secs(3_600)).await;
        assert_eq!(clock.now_secs(), 4_600);
        assert_eq!(now() - before, Duration::from_secs(3_600));
    }
}
