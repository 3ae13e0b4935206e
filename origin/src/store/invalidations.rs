//! The invalidation feed as the writer fills it and `GET /_invalidations`
//! reads it: the pure [`InvalidationLog`] behind a lock, and a watch of its
//! end that long-polls wait on.
//!
//! The writer adds an event after the change is durable and visible (the
//! stream unregistered, its new tail published) and before the request
//! that caused it is answered, so an edge that hears of it and asks again
//! finds the change already made.
//!
//! A region's partition names its feed for the partition, not the process
//! ([`Invalidations::logged`]): the writer gives each event its position
//! when it makes the change and logs it (`Record::Feed`) in the same
//! commit, and checkpoints carry the next position (`Record::FeedFrom`),
//! so whichever origin claims the partition next replays the same events
//! at the same positions and answers an edge where the last owner left it
//! (decision 0017). An edge behind the partition's last checkpoint learns
//! of its loss from a `410`, as from an origin that forgot.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use shared::invalidation::{stream_id, Change};
use tokio::sync::watch;

use crate::core::invalidation_log::{InvalidationLog, Since, INVALIDATIONS_KEPT};

/// Events whose making is remembered for the feed's delivery lag (an edge
/// further behind is not timed): 16 bytes each.
pub const MADE_KEPT: usize = 4_096;

pub struct Invalidations {
    log: Mutex<InvalidationLog>,
    end: watch::Sender<u64>,
    /// Names this process's feed (or the region partition's): positions of
    /// another mean nothing here.
    incarnation: String,
    /// The position the writer gives the next event, when its events are
    /// logged (a region's); None on one origin.
    logged: Option<std::sync::atomic::AtomicU64>,
    /// When the last [`MADE_KEPT`] events were added here, by position
    /// (events a replay brought back have none).
    made: Mutex<VecDeque<(u64, Instant)>>,
    /// Readers parked at the end, waiting for the next event.
    parked: std::sync::atomic::AtomicUsize,
}

/// A reader parked at the feed's end, counted while it waits.
pub struct Parked<'a>(&'a std::sync::atomic::AtomicUsize);

impl Drop for Parked<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

impl Default for Invalidations {
    fn default() -> Self {
        Invalidations::new(INVALIDATIONS_KEPT)
    }
}

impl Invalidations {
    pub fn new(capacity: usize) -> Invalidations {
        Invalidations {
            log: Mutex::new(InvalidationLog::new(capacity)),
            end: watch::Sender::new(0),
            incarnation: format!("feed-{:016x}", rand::random::<u64>()),
            logged: None,
            made: Mutex::default(),
            parked: Default::default(),
        }
    }

    /// A region partition's feed named `incarnation`, resumed where the
    /// replay left it: `next`, with the events logged since the image.
    pub fn logged(
        incarnation: String,
        next: u64,
        events: impl IntoIterator<Item = shared::invalidation::Invalidation>,
    ) -> Invalidations {
        let log = InvalidationLog::resumed(INVALIDATIONS_KEPT, next, events);
        let next = log.next();
        Invalidations {
            log: Mutex::new(log),
            end: watch::Sender::new(next),
            incarnation,
            logged: Some(std::sync::atomic::AtomicU64::new(next)),
            made: Mutex::default(),
            parked: Default::default(),
        }
    }

    /// The position of the next event, given now by the writer (which
    /// logs the event in the change's commit); None when not logged.
    pub fn assign(&self) -> Option<u64> {
        self.logged
            .as_ref()
            .map(|n| n.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }

    /// The next position the writer would give (what a checkpoint keeps).
    pub fn assigned(&self) -> Option<u64> {
        self.logged
            .as_ref()
            .map(|n| n.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Adds a logged event at its position, once its commit is durable.
    pub fn push_event(&self, event: shared::invalidation::Invalidation) {
        let seq = event.seq;
        let (before, next) = {
            let mut log = self.log.lock();
            let before = log.next();
            log.push_event(event);
            (before, log.next())
        };
        // Timed only if the log took it (an older one it ignored is not).
        if next != before {
            self.made_now(seq);
        }
        self.end.send_replace(next);
    }

    /// Remembers when the event at `seq` was added (positions only grow:
    /// an older one, which the log ignored, is not timed).
    fn made_now(&self, seq: u64) {
        let mut made = self.made.lock();
        if made.back().is_some_and(|(last, _)| *last >= seq) {
            return;
        }
        if made.len() == MADE_KEPT {
            made.pop_front();
        }
        made.push_back((seq, Instant::now()));
    }

    /// How long ago each of the events at positions `from..from + count`
    /// was added, for those still remembered (the feed's delivery lag).
    pub fn ages(&self, from: u64, count: usize) -> Vec<Duration> {
        let made = self.made.lock();
        let end = from.saturating_add(count as u64);
        let first = made.partition_point(|(seq, _)| *seq < from);
        made.range(first..)
            .take_while(|(seq, _)| *seq < end)
            .map(|(_, at)| at.elapsed())
            .collect()
    }

    pub fn incarnation(&self) -> &str {
        &self.incarnation
    }

    /// Adds the event of a change to the stream at `path`.
    pub fn push(&self, path: &str, incarnation: &str, change: Change, retained: Option<u64>) {
        let next = {
            let mut log = self.log.lock();
            log.push(stream_id(path), incarnation, change, retained);
            log.next()
        };
        self.made_now(next - 1);
        self.end.send_replace(next);
    }

    pub fn since(&self, from: u64, max: usize) -> Since {
        self.log.lock().since(from, max)
    }

    /// The position of the next event, watched.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.end.subscribe()
    }

    /// Counts a reader parked at the end until the guard drops.
    pub fn park(&self) -> Parked<'_> {
        self.parked
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Parked(&self.parked)
    }

    /// Readers parked at the end now (edges following the feed).
    pub fn parked(&self) -> usize {
        self.parked.load(std::sync::atomic::Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ages_of_events_answered_are_those_remembered() {
        let feed = Invalidations::new(16);
        for n in 0..3 {
            feed.push(&format!("/v1/stream/{n}"), "1-a", Change::Created, None);
        }
        assert_eq!(feed.ages(0, 3).len(), 3);
        assert_eq!(feed.ages(1, 10).len(), 2, "from a position on");
        assert_eq!(feed.ages(0, 1).len(), 1, "as many as answered");
        assert!(feed.ages(3, 5).is_empty(), "none made there yet");
        // An event older than the last remembered is not timed again.
        feed.made_now(1);
        assert_eq!(feed.ages(0, 10).len(), 3);
    }

    #[test]
    fn only_the_last_events_are_remembered() {
        let feed = Invalidations::new(16);
        for seq in 0..(MADE_KEPT as u64 + 10) {
            feed.made_now(seq);
        }
        assert!(feed.ages(0, 10).is_empty(), "forgotten");
        assert_eq!(feed.ages(MADE_KEPT as u64, 100).len(), 10);
        assert_eq!(feed.made.lock().len(), MADE_KEPT, "bounded");
    }
}
