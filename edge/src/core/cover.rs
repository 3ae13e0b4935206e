//! Whether the edge may still answer from what it keeps about a stream.
//!
//! Everything kept (a chunk, a snapshot, a stream's state) is stamped with a [`Mark`]
//! taken *before* it was asked of the origin. The origin's invalidation
//! feed (`shared::invalidation`) moves a clock and notes, per stream, the
//! clock of its last event; a kept thing is covered only while
//!
//! - the feed is live: caught up, and answered within `stale_after` (time
//!   is passed in), so an edge cut off from its feed stops answering from
//!   memory instead of serving what may have changed;
//! - its mark is not older than the last loss of the feed (a restart of the
//!   origin's feed, a gap, an error): events may have been missed then;
//! - no event came for its stream after its mark: a fill that raced with a
//!   delete is not covered, whichever finished first.
//!
//! Streams with events are remembered up to [`TRACKED_STREAMS`]; past it
//! the memory starts again empty and every mark before counts as lost (too
//! cautious, never wrong).

use std::collections::HashMap;
use std::time::Duration;

use tokio::time::Instant;

/// Streams whose last event is remembered.
pub const TRACKED_STREAMS: usize = 100_000;

/// When something kept was asked of the origin.
pub type Mark = u64;

#[derive(Debug)]
pub struct Cover {
    clock: u64,
    /// Marks before this are void (the feed was lost after them).
    floor: u64,
    /// The last event's clock, per stream id.
    touched: HashMap<u64, u64>,
    /// The last answer of the feed, while it is caught up.
    live_since: Option<Instant>,
    stale_after: Duration,
    capacity: usize,
}

impl Cover {
    pub fn new(stale_after: Duration) -> Cover {
        Cover::with_capacity(stale_after, TRACKED_STREAMS)
    }

    pub fn with_capacity(stale_after: Duration, capacity: usize) -> Cover {
        Cover {
            clock: 0,
            floor: 1,
            touched: HashMap::new(),
            live_since: None,
            stale_after,
            capacity: capacity.max(1),
        }
    }

    /// The mark of something about to be asked of the origin.
    pub fn mark(&self) -> Mark {
        self.clock
    }

    /// Whether something of `stream` marked `mark` may still be served.
    pub fn covers(&self, stream: u64, mark: Mark, now: Instant) -> bool {
        self.is_live(now)
            && mark >= self.floor
            && self.touched.get(&stream).is_none_or(|&t| t <= mark)
    }

    pub fn is_live(&self, now: Instant) -> bool {
        self.live_since
            .is_some_and(|at| now.saturating_duration_since(at) <= self.stale_after)
    }

    /// An event of the feed about `stream`.
    pub fn event(&mut self, stream: u64) {
        self.clock += 1;
        if self.touched.len() >= self.capacity && !self.touched.contains_key(&stream) {
            self.touched.clear();
            self.floor = self.clock;
        }
        self.touched.insert(stream, self.clock);
    }

    /// The feed answered (caught up to that answer) at `now`.
    pub fn answered(&mut self, now: Instant) {
        self.live_since = Some(now);
    }

    /// The feed was lost: nothing kept so far is covered again, and
    /// nothing at all until the feed answers again.
    pub fn lost(&mut self) {
        self.clock += 1;
        self.floor = self.clock;
        self.touched.clear();
        self.live_since = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STALE: Duration = Duration::from_secs(2);

    #[tokio::test(start_paused = true)]
    async fn nothing_is_covered_until_the_feed_answers() {
        let mut v = Cover::new(STALE);
        let now = Instant::now();
        let m = v.mark();
        assert!(!v.covers(1, m, now));
        v.lost(); // the first connection
        let m = v.mark();
        v.answered(now);
        assert!(v.covers(1, m, now));
    }

    #[tokio::test(start_paused = true)]
    async fn an_event_voids_what_was_asked_before_it_only() {
        let mut v = Cover::new(STALE);
        v.lost();
        let now = Instant::now();
        v.answered(now);
        let before = v.mark();
        v.event(7);
        let after = v.mark();
        assert!(!v.covers(7, before, now), "filled before the delete");
        assert!(v.covers(7, after, now), "filled after it");
        assert!(v.covers(8, before, now), "another stream");
    }

    #[tokio::test(start_paused = true)]
    async fn a_silent_or_lost_feed_covers_nothing() {
        let mut v = Cover::new(STALE);
        v.lost();
        let t0 = Instant::now();
        v.answered(t0);
        let m = v.mark();
        tokio::time::advance(STALE).await;
        assert!(v.covers(1, m, Instant::now()));
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(!v.covers(1, m, Instant::now()), "no answer for too long");
        v.answered(Instant::now());
        assert!(v.covers(1, m, Instant::now()));
        v.lost();
        v.answered(Instant::now());
        assert!(!v.covers(1, m, Instant::now()), "marked before the loss");
        assert!(v.covers(1, v.mark(), Instant::now()));
    }

    #[tokio::test(start_paused = true)]
    async fn past_its_capacity_it_forgets_by_voiding_everything() {
        let mut v = Cover::with_capacity(STALE, 2);
        v.lost();
        let now = Instant::now();
        v.answered(now);
        let m = v.mark();
        v.event(1);
        v.event(2);
        assert!(v.covers(3, m, now));
        v.event(3);
        assert!(!v.covers(4, m, now), "marks before the reset are void");
        assert!(v.covers(1, v.mark(), now));
    }
}
