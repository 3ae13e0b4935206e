//! A stream's durable end, and a way for live readers to wait for it to move.
//!
//! Every append publishes a new end, and almost never has anyone waiting on
//! it (a long-poll or an SSE tail). `tokio::sync::watch` wakes its waiters on
//! every send whether there are any or not (eight mutexes), which was a
//! measurable share of an append. Here a publish wakes only the waiters
//! registered with the end it replaces: a waiter registers its waker under
//! the lock the end is read and written under, so either it sees the new
//! end or the publish finds its waker, and no wake-up is lost; a publish
//! with none registered costs a look at a counter.
//!
//! Waiters are polled by hand ([`EndReceiver::poll_wait_for`]), each
//! keeping a slot of a `shell::waker_set`: a parked long-poll waits in
//! place, without a channel's future in its own (decision 0020: a parked
//! long-poll costs ≤ 2 KiB; a `Notify` wait made it 160 bytes larger).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use std::time::Instant;

use parking_lot::Mutex;
use shell::waker_set::{self, Slot, WakerSet};

use super::view::End;

/// The end of one stream, shared by the writer side and its readers.
pub struct EndWatch {
    shared: Arc<Shared>,
}

struct Shared {
    current: Mutex<Current>,
    /// Wakers registered now (the count of `current.wakers`, read without
    /// the lock).
    waiting: AtomicUsize,
}

struct Current {
    end: End,
    /// One more per publish.
    version: u64,
    /// When it was published, if a reader waited for it then (a
    /// delivery's lag counts from there; an end nobody waited for costs no
    /// clock read).
    stamp: Option<Instant>,
    wakers: WakerSet,
}

/// One reader's view: the version it has seen, and when that end was
/// published (read with it, so a later publish cannot change it).
pub struct EndReceiver {
    shared: Arc<Shared>,
    seen: u64,
    stamp: Option<Instant>,
    /// Its waker's place while it waits.
    slot: Slot,
}

impl EndWatch {
    pub fn new(end: End) -> Self {
        EndWatch {
            shared: Arc::new(Shared {
                current: Mutex::new(Current {
                    end,
                    version: 0,
                    stamp: None,
                    wakers: WakerSet::default(),
                }),
                waiting: AtomicUsize::new(0),
            }),
        }
    }

    pub fn get(&self) -> End {
        self.shared.current.lock().end
    }

    /// Sets a new end and wakes the receivers waiting for one.
    pub fn publish(&self, end: End) {
        let stamp = (self.shared.waiting.load(Ordering::Relaxed) > 0).then(Instant::now);
        let wakers = {
            let mut current = self.shared.current.lock();
            current.end = end;
            current.version += 1;
            current.stamp = stamp;
            if current.wakers.is_empty() {
                return;
            }
            self.shared.waiting.store(0, Ordering::SeqCst);
            current.wakers.take()
        };
        waker_set::wake_all(wakers);
    }

    /// Whether a receiver waits for the next end now.
    pub fn has_waiters(&self) -> bool {
        self.shared.waiting.load(Ordering::SeqCst) > 0
    }

    /// A receiver that has seen the current end.
    pub fn subscribe(&self) -> EndReceiver {
        let c = self.shared.current.lock();
        EndReceiver {
            shared: Arc::clone(&self.shared),
            seen: c.version,
            stamp: c.stamp,
            slot: Slot::default(),
        }
    }
}

impl EndReceiver {
    /// The current end.
    pub fn borrow(&self) -> End {
        self.shared.current.lock().end
    }

    /// When the end last marked seen was published, if a reader waited
    /// for it.
    pub fn published_at(&self) -> Option<Instant> {
        self.stamp
    }

    /// The current end, marked as seen.
    pub fn borrow_and_update(&mut self) -> End {
        let c = self.shared.current.lock();
        self.seen = c.version;
        self.stamp = c.stamp;
        c.end
    }

    /// Ready once an end newer than the last one seen is published (then
    /// marked seen); until then its waker waits for the next publish.
    pub fn poll_changed(&mut self, cx: &Context<'_>) -> Poll<()> {
        let mut c = self.shared.current.lock();
        if c.version != self.seen {
            self.seen = c.version;
            unregister(&self.shared.waiting, &mut c, &mut self.slot);
            return Poll::Ready(());
        }
        register(&self.shared.waiting, &mut c, &mut self.slot, cx);
        Poll::Pending
    }

    /// Ready with the end (marked seen) once it satisfies `done`; until
    /// then its waker waits for the next publish. One look under the lock:
    /// an end it has seen can only change by a publish, which wakes it.
    pub fn poll_wait_for(
        &mut self,
        cx: &Context<'_>,
        mut done: impl FnMut(&End) -> bool,
    ) -> Poll<End> {
        let mut c = self.shared.current.lock();
        self.seen = c.version;
        self.stamp = c.stamp;
        if done(&c.end) {
            unregister(&self.shared.waiting, &mut c, &mut self.slot);
            return Poll::Ready(c.end);
        }
        register(&self.shared.waiting, &mut c, &mut self.slot, cx);
        Poll::Pending
    }

    /// Waits until an end newer than the last one seen is published, and
    /// marks it seen.
    #[cfg(test)]
    pub async fn changed(&mut self) {
        std::future::poll_fn(|cx| self.poll_changed(cx)).await
    }

    /// Waits until the end satisfies `done`, and returns it.
    #[cfg(test)]
    pub async fn wait_for(&mut self, mut done: impl FnMut(&End) -> bool) -> End {
        std::future::poll_fn(|cx| self.poll_wait_for(cx, &mut done)).await
    }

    /// Its wait ends: its waker leaves.
    pub fn leave(&mut self) {
        if self.slot.is_set() {
            let mut c = self.shared.current.lock();
            unregister(&self.shared.waiting, &mut c, &mut self.slot);
        }
    }
}

/// Puts a receiver's waker in (`waiting` follows the set's count).
fn register(waiting: &AtomicUsize, c: &mut Current, slot: &mut Slot, cx: &Context<'_>) {
    c.wakers.register(slot, cx.waker());
    waiting.store(c.wakers.len(), Ordering::SeqCst);
}

/// Takes a receiver's waker out.
fn unregister(waiting: &AtomicUsize, c: &mut Current, slot: &mut Slot) {
    c.wakers.remove(slot);
    waiting.store(c.wakers.len(), Ordering::SeqCst);
}

impl Drop for EndReceiver {
    fn drop(&mut self) {
        self.leave();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn end(next: u64) -> End {
        End {
            next,
            closed: false,
            gone: false,
            retained: 0,
        }
    }

    #[tokio::test]
    async fn a_waiter_wakes_on_the_next_publish() {
        let watch = EndWatch::new(end(0));
        let mut rx = watch.subscribe();
        let waiter = tokio::spawn(async move { rx.wait_for(|t| t.next >= 5).await });
        // Publishes that do not satisfy the waiter, then one that does: it
        // wakes whether it was already waiting or not.
        for next in 1..=5 {
            watch.publish(end(next));
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
        let watch = EndWatch::new(end(0));
        let mut rx = watch.subscribe();
        watch.publish(end(1));
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
        let watch = Arc::new(EndWatch::new(end(0)));
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
            watch.publish(end(next));
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
