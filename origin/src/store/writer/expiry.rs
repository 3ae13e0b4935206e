//! Expiry of idle streams without looking at every stream: a queue of
//! deadlines, checked lazily.
//!
//! A stream's deadline moves with every read and write (sliding TTL), and
//! reads do not tell the writer. So the queue holds the earliest moment a
//! stream *could* expire; when that comes, the stream's real deadline is
//! asked again, and the stream is either deleted or queued again at it. A
//! tick therefore costs the streams due, not the streams held, and at most
//! [`EXAMINE_PER_TICK`] are looked at and [`EXPIRE_PER_TICK`] deleted per
//! tick, so a million streams expiring
//! at once are deleted over a few minutes while appends go on (reads and
//! writes of an expired stream answer 404 at once either way: they check
//! the deadline themselves).

use std::collections::BTreeSet;

use super::{AfterCommit, Writer};
use crate::core::config::StreamConfig;
use crate::core::Millis;

/// Deletions of expired streams per tick (one tick a second).
pub const EXPIRE_PER_TICK: usize = 10_000;
/// Streams looked at per tick, deleted or queued again (kept alive by reads
/// since they were queued): a tick's work stays bounded either way.
pub const EXAMINE_PER_TICK: usize = 4 * EXPIRE_PER_TICK;

/// Streams by the earliest moment they may expire.
#[derive(Default)]
pub struct ExpiryQueue {
    due: BTreeSet<(Millis, u64)>,
}

impl ExpiryQueue {
    /// Queues a stream created (or restored) at `now`, if it can expire.
    pub fn schedule(&mut self, config: &StreamConfig, id: u64, now: Millis) {
        if let Some(at) = config.expires_at(now) {
            self.due.insert((at, id));
        }
    }

    pub fn at(&mut self, at: Millis, id: u64) {
        self.due.insert((at, id));
    }

    /// Takes up to `limit` streams whose earliest deadline has come.
    pub fn take_due(&mut self, now: Millis, limit: usize) -> Vec<u64> {
        let mut out = Vec::new();
        while out.len() < limit {
            match self.due.first() {
                Some(&(at, id)) if at <= now => {
                    self.due.pop_first();
                    out.push(id);
                }
                _ => break,
            }
        }
        out
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.due.len()
    }
}

impl Writer {
    /// Deletes the streams that expired (at most [`EXPIRE_PER_TICK`]);
    /// the others that were due go back in the queue at their new deadline.
    pub(super) fn expire_due(
        &mut self,
        now: Millis,
        frames: &mut Vec<u8>,
        after: &mut Vec<AfterCommit>,
    ) {
        let (mut deleted, mut examined) = (0, 0);
        while deleted < EXPIRE_PER_TICK && examined < EXAMINE_PER_TICK {
            let due = self
                .expiry
                .take_due(now, EXPIRE_PER_TICK.min(EXAMINE_PER_TICK - examined));
            if due.is_empty() {
                break;
            }
            examined += due.len();
            for id in due {
                let Some(entry) = self.engine.entry_by_id(id) else {
                    continue; // deleted meanwhile
                };
                if entry.core.soft_deleted {
                    continue; // expired already; it goes with its last fork
                }
                match entry.core.config.expires_at(entry.view.last_access()) {
                    Some(at) if at <= now && deleted < EXPIRE_PER_TICK => {
                        let path = entry.core.path.clone();
                        self.delete(&path, now, frames, after);
                        deleted += 1;
                    }
                    // Touched since, or over this tick's share: later.
                    Some(at) => self.expiry.at(at.max(now), id),
                    None => {}
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::Expiry;

    #[test]
    fn only_what_is_due_is_taken_and_no_more_than_asked() {
        let mut q = ExpiryQueue::default();
        let cfg = StreamConfig {
            content_type: "a/b".into(),
            expiry: Expiry::IdleSecs(1),
            public: false,
        };
        for id in 0..10 {
            q.schedule(&cfg, id, id * 100);
        }
        q.schedule(
            &StreamConfig {
                expiry: Expiry::Never,
                ..cfg.clone()
            },
            99,
            0,
        );
        assert_eq!(q.len(), 10, "a stream that never expires is not queued");
        assert!(q.take_due(999, 100).is_empty());
        assert_eq!(q.take_due(1_300, 100), vec![0, 1, 2, 3]);
        assert_eq!(q.take_due(5_000, 2), vec![4, 5]);
    }
}
