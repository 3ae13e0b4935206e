//! Wakers that say who woke: one task drives many waiting entries (parked
//! answers, `crate::lot`; the edge's detached SSE readers) and polls only
//! those whose waker fired, never all of them.
//!
//! Each entry gets a waker of its own ([`Woken::wake_of`]); waking it puts
//! the entry's id on its driver's list (once until the driver takes it)
//! and wakes the driver ([`Woken::notified`]). The driver takes the list
//! ([`Woken::take`]) and re-arms each entry before polling it
//! ([`EntryWake::rearm`]), so a wake during that poll queues it again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Wake, Waker};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// A driver's list of woken entries.
#[derive(Default)]
pub struct Woken {
    ids: Mutex<Vec<usize>>,
    notify: Notify,
}

/// One entry's waker.
pub struct EntryWake {
    id: usize,
    woken: Arc<Woken>,
    queued: AtomicBool,
}

impl Woken {
    /// A waker for entry `id` (keep the `Arc`; `Waker::from` makes the
    /// waker itself when needed).
    pub fn wake_of(self: &Arc<Self>, id: usize) -> Arc<EntryWake> {
        Arc::new(EntryWake {
            id,
            woken: Arc::clone(self),
            queued: AtomicBool::new(false),
        })
    }

    /// The entries woken since the last take.
    pub fn take(&self) -> Vec<usize> {
        std::mem::take(&mut *self.ids.lock())
    }

    /// Wakes the driver (something other than an entry has news for it).
    pub fn notify(&self) {
        self.notify.notify_one();
    }

    /// Resolves once an entry woke, or [`Woken::notify`] was called, since
    /// the last time it resolved (a wake in between is never lost).
    pub async fn notified(&self) {
        self.notify.notified().await
    }
}

impl EntryWake {
    /// The entry is about to be polled: a wake from now on queues it again.
    pub fn rearm(&self) {
        self.queued.store(false, Ordering::Release);
    }

    /// Its waker.
    pub fn waker(self: &Arc<Self>) -> Waker {
        Waker::from(Arc::clone(self))
    }
}

impl Wake for EntryWake {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        if !self.queued.swap(true, Ordering::AcqRel) {
            self.woken.ids.lock().push(self.id);
        }
        self.woken.notify.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_woken_entry_is_listed_once_until_rearmed() {
        let woken = Arc::new(Woken::default());
        let a = woken.wake_of(3);
        let b = woken.wake_of(7);
        a.waker().wake_by_ref();
        a.waker().wake_by_ref();
        b.waker().wake();
        woken.notified().await;
        assert_eq!(woken.take(), vec![3, 7]);
        // Not re-armed: a second wake is not listed again.
        a.waker().wake_by_ref();
        assert!(woken.take().is_empty());
        a.rearm();
        a.waker().wake_by_ref();
        assert_eq!(woken.take(), vec![3]);
    }
}
