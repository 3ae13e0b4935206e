//! A stream's durable end, and a way for live readers to wait for it to move.
//!
//! Every append publishes a new end, and almost never has anyone waiting on
//! it (a long-poll or an SSE tail). `tokio::sync::watch` wakes its waiters on
//! every send whether there are any or not (eight mutexes), which was a
//! measurable share of an append. Here a publish only notifies when a waiter
//! has announced itself: the waiter counts itself in, then reads the end;
//! the publisher writes the end, then reads the count (both sequentially
//! consistent), so either the waiter sees the new end or the publisher sees
//! the waiter, and no wake-up is lost.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use std::time::Instant;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::view::Tail;

/// The end of one stream, shared by the writer side and its readers.
pub struct TailWatch {
    shared: Arc<Shared>,
}

struct Shared {
    /// The end, its version (one more per publish) and when it was
    /// published if a reader waited for it then (a delivery's lag counts
    /// from there; an end nobody waited for costs no clock read).
    current: Mutex<(Tail, u64, Option<Instant>)>,
    /// Receivers inside `changed`.
    waiting: AtomicUsize,
    notify: Notify,
}

/// One reader's view: the version it has seen, and when that end was
/// published (read with it, so a later publish cannot change it).
pub struct TailReceiver {
    shared: Arc<Shared>,
    seen: u64,
    stamp: Option<Instant>,
}

impl TailWatch {
    pub fn new(tail: Tail) -> Self {
        TailWatch {
            shared: Arc::new(Shared {
                current: Mutex::new((tail, 0, None)),
                waiting: AtomicUsize::new(0),
                notify: Notify::new(),
            }),
        }
    }

    pub fn get(&self) -> Tail {
        self.shared.current.lock().0
    }

    /// Sets a new end and wakes the receivers waiting for one.
    pub fn publish(&self, tail: Tail) {
        let stamp = (self.shared.waiting.load(Ordering::Relaxed) > 0).then(Instant::now);
        {
            let mut current = self.shared.current.lock();
            current.0 = tail;
            current.1 += 1;
            current.2 = stamp;
        }
        if self.shared.waiting.load(Ordering::SeqCst) > 0 {
            self.shared.notify.notify_waiters();
        }
    }

    /// Whether a receiver waits in `changed` now.
    pub fn has_waiters(&self) -> bool {
        self.shared.waiting.load(Ordering::SeqCst) > 0
    }

    /// A receiver that has seen the current end.
    pub fn subscribe(&self) -> TailReceiver {
        let (_, seen, stamp) = *self.shared.current.lock();
        TailReceiver {
            shared: Arc::clone(&self.shared),
            seen,
            stamp,
        }
    }
}

impl TailReceiver {
    /// The current end.
    pub fn borrow(&self) -> Tail {
        self.shared.current.lock().0
    }

    /// When the end last marked seen was published, if a reader waited
    /// for it.
    pub fn published_at(&self) -> Option<Instant> {
        self.stamp
    }

    /// The current end, marked as seen.
    pub fn borrow_and_update(&mut self) -> Tail {
        let (tail, version, stamp) = *self.shared.current.lock();
        self.seen = version;
        self.stamp = stamp;
        tail
    }

    /// Waits until an end newer than the last one seen is published, and
    /// marks it seen.
    pub async fn changed(&mut self) {
        loop {
            let notified = self.shared.notify.notified();
            let _counted = Counted::enter(&self.shared.waiting);
            let version = self.shared.current.lock().1;
            if version != self.seen {
                self.seen = version;
                return;
            }
            // `notify_waiters` reaches a `Notified` from its creation on.
            notified.await;
        }
    }

    /// Waits until the end satisfies `done`, and returns it.
    pub async fn wait_for(&mut self, mut done: impl FnMut(&Tail) -> bool) -> Tail {
        loop {
            let tail = self.borrow_and_update();
            if done(&tail) {
                return tail;
            }
            self.changed().await;
        }
    }
}

/// Counts a waiter in for as long as it lives.
struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Counted(count)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn tail(next: u64) -> Tail {
        Tail {
            next,
            closed: false,
            gone: false,
            retained: 0,
        }
    }

    #[tokio::test]
    async fn a_waiter_wakes_on_the_next_publish() {
        let watch = TailWatch::new(tail(0));
        let mut rx = watch.subscribe();
        let waiter = tokio::spawn(async move { rx.wait_for(|t| t.next >= 5).await });
        // Publishes that do not satisfy the waiter, then one that does: it
        // wakes whether it was already waiting or not.
        for next in 1..=5 {
            watch.publish(tail(next));
            tokio::task::yield_now().await;
        }
        let got = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(got.next, 5);
        assert_eq!(watch.shared.waiting.load(Ordering::SeqCst), 0);
    }

    #[tokio::test]
    async fn a_publish_before_the_wait_is_not_missed() {
        let watch = TailWatch::new(tail(0));
        let mut rx = watch.subscribe();
        watch.publish(tail(1));
        tokio::time::timeout(Duration::from_secs(10), rx.changed())
            .await
            .expect("the publish before the wait counts");
        assert_eq!(rx.borrow().next, 1);
        // Seen now: the next `changed` waits for a new publish.
        let pending = tokio::time::timeout(Duration::from_millis(20), rx.changed()).await;
        assert!(pending.is_err());
    }

    #[test]
    fn many_threads_never_lose_a_wake_up() {
        // Writers publish from a plain thread while readers on a runtime wait
        // for each value in turn; a lost wake-up would hang a reader (and
        // fail the timeout).
        let watch = Arc::new(TailWatch::new(tail(0)));
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let readers: Vec<_> = (0..4)
            .map(|_| {
                let mut rx = watch.subscribe();
                rt.spawn(async move {
                    let mut seen = 0;
                    while seen < 2_000 {
                        let t = rx.wait_for(|t| t.next > seen).await;
                        seen = t.next;
                    }
                })
            })
            .collect();
        for next in 1..=2_000 {
            watch.publish(tail(next));
        }
        rt.block_on(async {
            for r in readers {
                tokio::time::timeout(Duration::from_secs(30), r)
                    .await
                    .expect("every reader saw the last value")
                    .unwrap();
            }
        });
    }
}
