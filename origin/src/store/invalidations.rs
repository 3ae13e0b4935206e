//! The invalidation feed as the writer fills it and `GET /_invalidations`
//! reads it: the pure [`InvalidationLog`] behind a lock, and a watch of its
//! end that long-polls wait on.
//!
//! The writer adds an event after the change is durable and visible (the
//! stream unregistered, its new tail published) and before the request
//! that caused it is answered, so an edge that hears of it and asks again
//! finds the change already made.

use parking_lot::Mutex;
use shared::invalidation::{stream_id, Change};
use tokio::sync::watch;

use crate::core::invalidation_log::{InvalidationLog, Since, INVALIDATIONS_KEPT};

pub struct Invalidations {
    log: Mutex<InvalidationLog>,
    end: watch::Sender<u64>,
    /// Names this process's feed: positions of another mean nothing here.
    incarnation: String,
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
        }
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
        self.end.send_replace(next);
    }

    pub fn since(&self, from: u64, max: usize) -> Since {
        self.log.lock().since(from, max)
    }

    /// The position of the next event, watched.
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.end.subscribe()
    }
}
