//! Time on the serving path, read from tokio's clock so that tests on a
//! paused clock (`start_paused`) drive every limit, TTL and timeout without
//! sleeping. Wall time is derived from it (SlateDB's model): the wall clock
//! read once at start, plus how far tokio's monotonic clock has moved since.
//! A paused test's wall time therefore moves with the time it advances, and
//! a wall clock stepped by NTP does not step the server's notion of now.
//!
//! Threads outside the runtime (the origin's writer) read the origin's
//! injected `Clock` instead.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Monotonic now, from tokio's clock (paused in tests).
pub fn now() -> std::time::Instant {
    tokio::time::Instant::now().into_std()
}

/// Wall time derived from tokio's clock.
#[derive(Clone, Copy, Debug)]
pub struct WallClock {
    /// Since the Unix epoch, when `at` was read.
    wall: Duration,
    at: tokio::time::Instant,
}

impl WallClock {
    /// Reads the wall clock once; from then on it moves with tokio's.
    pub fn start() -> WallClock {
        WallClock {
            wall: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default(),
            at: tokio::time::Instant::now(),
        }
    }

    /// A wall clock reading `since_epoch` now (tests).
    pub fn at(since_epoch: Duration) -> WallClock {
        WallClock {
            wall: since_epoch,
            at: tokio::time::Instant::now(),
        }
    }

    pub fn since_epoch(&self) -> Duration {
        self.wall.saturating_add(self.at.elapsed())
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
    async fn wall_time_moves_with_tokios_clock() {
        let clock = WallClock::at(Duration::from_secs(1_000));
        assert_eq!(clock.now_secs(), 1_000);
        let before = now();
        tokio::time::sleep(Duration::from_secs(3_600)).await;
        assert_eq!(clock.now_secs(), 4_600);
        assert_eq!(now() - before, Duration::from_secs(3_600));
    }
}
