//! The invalidation feed's memory: the last [`INVALIDATIONS_KEPT`] events,
//! numbered from 0 since the process started (`shared::invalidation`).
//!
//! On one origin it is not persisted: the feed's incarnation names the
//! process, so an edge that tailed an origin before its restart sees
//! another incarnation, knows it may have missed events, and stops
//! answering from what it kept until it has caught up again. An edge that
//! falls more than the kept events behind learns the same from a `410`.
//! A region's partition logs its events (`store::invalidations`): a new
//! owner starts from the position and events its replay found
//! ([`InvalidationLog::resumed`]), under the same incarnation.

use std::collections::VecDeque;

use shared::invalidation::{Change, Invalidation};

/// Events kept for edges that are behind; a position older than these
/// answers `410`.
pub const INVALIDATIONS_KEPT: usize = 65_536;

/// What a read of the log from a position finds.
#[derive(Debug, PartialEq, Eq)]
pub enum Since {
    /// The events from there (possibly none yet), and the next position.
    Events(Vec<Invalidation>, u64),
    /// The position is older than the oldest kept event.
    Gone { oldest: u64 },
    /// The position is past the end (it came from another process).
    Beyond { next: u64 },
}

#[derive(Debug)]
pub struct InvalidationLog {
    events: VecDeque<Invalidation>,
    /// The position of the next event.
    next: u64,
    capacity: usize,
}

impl InvalidationLog {
    pub fn new(capacity: usize) -> InvalidationLog {
        InvalidationLog {
            events: VecDeque::new(),
            next: 0,
            capacity: capacity.max(1),
        }
    }

    /// A log whose next position is `next`, holding `events` (the last
    /// ones before it, in order; older ones past the capacity dropped).
    pub fn resumed(
        capacity: usize,
        next: u64,
        events: impl IntoIterator<Item = Invalidation>,
    ) -> Self {
        let mut log = InvalidationLog::new(capacity);
        for e in events {
            log.push_event(e);
        }
        if next > log.next {
            // Positions between were never given: nothing older is kept.
            log.events.clear();
            log.next = next;
        }
        log
    }

    /// Adds an event at its own position: past a gap, what came before
    /// is forgotten (positions stay dense); an older one is ignored.
    pub fn push_event(&mut self, event: Invalidation) {
        if event.seq < self.next {
            return;
        }
        if event.seq != self.next {
            self.events.clear();
            self.next = event.seq;
        }
        if self.events.len() == self.capacity {
            self.events.pop_front();
        }
        self.events.push_back(event);
        self.next += 1;
    }

    /// The position the next event will have.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Adds an event; the oldest is forgotten past the capacity.
    pub fn push(&mut self, stream: u64, incarnation: &str, change: Change, retained: Option<u64>) {
        if self.events.len() == self.capacity {
            self.events.pop_front();
        }
        self.events.push_back(Invalidation {
            seq: self.next,
            stream,
            incarnation: incarnation.to_owned(),
            change,
            retained,
        });
        self.next += 1;
    }

    /// At most `max` events from position `from`.
    pub fn since(&self, from: u64, max: usize) -> Since {
        let oldest = self.next - self.events.len() as u64;
        if from < oldest {
            return Since::Gone { oldest };
        }
        if from > self.next {
            return Since::Beyond { next: self.next };
        }
        let skip = (from - oldest) as usize;
        let events: Vec<_> = self.events.iter().skip(skip).take(max).cloned().collect();
        let next = from + events.len() as u64;
        Since::Events(events, next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_from_a_position_and_forgets_the_oldest() {
        let mut log = InvalidationLog::new(3);
        assert_eq!(log.since(0, 10), Since::Events(vec![], 0));
        for i in 0..5 {
            log.push(i, "1-a", Change::Deleted, None);
        }
        assert_eq!(log.next(), 5);
        assert_eq!(log.since(1, 10), Since::Gone { oldest: 2 });
        let Since::Events(events, next) = log.since(3, 10) else {
            panic!("events")
        };
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [3, 4]);
        assert_eq!(events[0].stream, 3);
        assert_eq!(next, 5);
        let Since::Events(events, next) = log.since(2, 1) else {
            panic!("events")
        };
        assert_eq!((events.len(), next), (1, 3));
        assert_eq!(log.since(5, 10), Since::Events(vec![], 5));
        assert_eq!(log.since(6, 10), Since::Beyond { next: 5 });
    }

    fn event(seq: u64) -> Invalidation {
        Invalidation {
            seq,
            stream: seq,
            incarnation: "1-a".into(),
            change: Change::Created,
            retained: None,
        }
    }

    #[test]
    fn a_resumed_log_answers_the_positions_it_was_given() {
        let log = InvalidationLog::resumed(3, 12, (8..12).map(event));
        assert_eq!(log.next(), 12);
        assert_eq!(log.since(8, 10), Since::Gone { oldest: 9 });
        let Since::Events(events, next) = log.since(10, 10) else {
            panic!("events")
        };
        assert_eq!(events.iter().map(|e| e.seq).collect::<Vec<_>>(), [10, 11]);
        assert_eq!(next, 12);
        // No events, a later position: nothing before it is known.
        let log = InvalidationLog::resumed(3, 40, (8..12).map(event));
        assert_eq!(log.since(11, 10), Since::Gone { oldest: 40 });
        assert_eq!(log.since(40, 10), Since::Events(vec![], 40));
        // A gap forgets what came before it.
        let mut log = InvalidationLog::resumed(8, 3, (0..3).map(event));
        log.push_event(event(5));
        assert_eq!(log.since(2, 10), Since::Gone { oldest: 5 });
        log.push_event(event(4));
        assert_eq!(log.next(), 6, "an older one is ignored");
    }
}
