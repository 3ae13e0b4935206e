//! The wakers of everything waiting for one event, each in a slot of its
//! own (decision 0020: a parked long-poll is to cost ≤ 2 KiB).
//!
//! A waiting read waits for a few things at once: its stream's next end
//! (the origin), its collapsed upstream answer (the edge), the server's
//! shutdown. Waited on as futures (a channel's `wait_for`, `Notify`'s
//! `Notified`, under a `select!`), each brings its own state into the
//! parked answer's future: 150–180 bytes apiece, most of a parked
//! long-poll's future. Here a waiter keeps one [`Slot`] (24 bytes) per
//! thing it waits for and is polled by hand; the thing keeps one waker per
//! waiter (16 bytes) in a [`WakerSet`], under the lock it already has for
//! its state, and takes them all when it happens.
//!
//! A slot is valid for one round: taking the set's wakers starts the next
//! (its generation), and a waiter that polls again registers anew. A
//! waiter that leaves empties its slot ([`WakerSet::remove`]), so a set
//! holds no waker of anyone gone.

use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use parking_lot::Mutex;

/// The wakers of the waiters of one event (kept under its owner's lock).
///
/// Its memory is bounded by the most waiters at once (each has at most one
/// waker in it, and waiters are bounded by the servers' connections and
/// waiter limits): a place a waiter leaves is reused, and a set that
/// empties lets its room go.
#[derive(Default)]
pub struct WakerSet {
    wakers: Vec<Option<Waker>>,
    /// Places of `wakers` left empty, for the next waiter.
    free: Vec<usize>,
    /// One more each time the wakers are taken: slots of earlier rounds
    /// are void.
    round: u64,
}

/// A waiter's place in a [`WakerSet`].
#[derive(Debug, Default)]
pub struct Slot(Option<(u64, usize)>);

impl Slot {
    /// Whether it holds a place (of this round or an earlier one).
    pub fn is_set(&self) -> bool {
        self.0.is_some()
    }
}

impl WakerSet {
    /// Puts `waker` in `slot` (in place of the one there, unless that one
    /// wakes the same task).
    pub fn register(&mut self, slot: &mut Slot, waker: &Waker) {
        if let Some((round, i)) = slot.0 {
            if round == self.round {
                if let Some(w) = &mut self.wakers[i] {
                    if !w.will_wake(waker) {
                        *w = waker.clone();
                    }
                    return;
                }
            }
        }
        let i = match self.free.pop() {
            Some(i) => {
                self.wakers[i] = Some(waker.clone());
                i
            }
            None => {
                self.wakers.push(Some(waker.clone()));
                self.wakers.len() - 1
            }
        };
        slot.0 = Some((self.round, i));
    }

    /// Empties `slot` (its waiter leaves, or has what it waited for).
    pub fn remove(&mut self, slot: &mut Slot) {
        let Some((round, i)) = slot.0.take() else {
            return;
        };
        if round != self.round || self.wakers[i].take().is_none() {
            return;
        }
        self.free.push(i);
        if self.free.len() == self.wakers.len() {
            // No waiter holds a place now: the room goes.
            self.wakers = Vec::new();
            self.free = Vec::new();
        }
    }

    /// Takes every waker (to wake once the owner's lock is let go), and
    /// starts the next round.
    #[must_use = "the wakers are to be woken"]
    pub fn take(&mut self) -> Vec<Waker> {
        self.round += 1;
        self.free = Vec::new();
        std::mem::take(&mut self.wakers)
            .into_iter()
            .flatten()
            .collect()
    }

    /// Wakers in the set now.
    pub fn len(&self) -> usize {
        self.wakers.len() - self.free.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Wakes them all.
pub fn wake_all(wakers: Vec<Waker>) {
    for w in wakers {
        w.wake();
    }
}

/// A server's shutdown, for requests that wait to poll by hand (a future
/// would bring a channel's wait into theirs).
#[derive(Default)]
pub struct Closing {
    closed: AtomicBool,
    waiters: Mutex<WakerSet>,
}

impl Closing {
    /// The server shuts down: wakes every waiter.
    pub fn close(&self) {
        let wakers = {
            let mut w = self.waiters.lock();
            self.closed.store(true, Ordering::SeqCst);
            w.take()
        };
        wake_all(wakers);
    }

    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::SeqCst)
    }

    /// Ready once the server shuts down; until then the waker is kept in
    /// `slot` (empty it with `leave` when the wait ends).
    fn poll_closed(&self, slot: &mut Slot, cx: &Context<'_>) -> Poll<()> {
        if self.is_closed() {
            return Poll::Ready(());
        }
        let mut w = self.waiters.lock();
        // Under the lock `close` sets the flag under: seen here, or the
        // waker is found there.
        if self.is_closed() {
            return Poll::Ready(());
        }
        w.register(slot, cx.waker());
        Poll::Pending
    }

    /// The wait ends: its waker leaves.
    fn leave(&self, slot: &mut Slot) {
        if slot.is_set() {
            self.waiters.lock().remove(slot);
        }
    }

    /// A wait for the shutdown, polled by hand; its waker leaves when it
    /// is dropped (kept, a task's waker would keep the finished task's
    /// memory).
    pub fn watch(&self) -> Stopping<'_> {
        Stopping {
            closing: self,
            slot: Slot::default(),
        }
    }

    /// Waiters registered now.
    #[cfg(test)]
    pub fn waiting(&self) -> usize {
        self.waiters.lock().len()
    }
}

/// One wait for a [`Closing`] ([`Closing::watch`]).
pub struct Stopping<'a> {
    closing: &'a Closing,
    slot: Slot,
}

impl Stopping<'_> {
    /// Ready once the server shuts down.
    pub fn poll(&mut self, cx: &Context<'_>) -> Poll<()> {
        self.closing.poll_closed(&mut self.slot, cx)
    }
}

impl Drop for Stopping<'_> {
    fn drop(&mut self) {
        self.closing.leave(&mut self.slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;
    use std::sync::Arc;
    use std::task::Wake;

    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    fn counter() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count(AtomicUsize::new(0)));
        (Arc::clone(&c), Waker::from(c))
    }

    #[test]
    fn each_waiter_is_woken_once_and_slots_are_per_round() {
        let mut set = WakerSet::default();
        let (a, wa) = counter();
        let (b, wb) = counter();
        let (mut sa, mut sb) = (Slot::default(), Slot::default());
        set.register(&mut sa, &wa);
        set.register(&mut sa, &wa); // polled again: still one waker
        set.register(&mut sb, &wb);
        assert_eq!(set.len(), 2);
        set.remove(&mut sb);
        assert_eq!(set.len(), 1);
        wake_all(set.take());
        assert_eq!(a.0.load(Ordering::SeqCst), 1);
        assert_eq!(b.0.load(Ordering::SeqCst), 0);
        assert!(set.is_empty());
        // A slot of the last round registers anew; removing a void slot
        // removes nothing of this round's.
        set.register(&mut sa, &wa);
        let mut stale = Slot(Some((0, 0)));
        set.remove(&mut stale);
        assert_eq!(set.len(), 1);
        wake_all(set.take());
        assert_eq!(a.0.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn waiters_that_come_and_go_reuse_places() {
        // A stream nobody appends to, its long-polls timing out and
        // coming back: the set stays as large as the most at once.
        let mut set = WakerSet::default();
        let (_, w) = counter();
        let mut held: Vec<Slot> = (0..3).map(|_| Slot::default()).collect();
        for s in &mut held {
            set.register(s, &w);
        }
        for _ in 0..1000 {
            let mut s = Slot::default();
            set.register(&mut s, &w);
            set.remove(&mut s);
        }
        assert_eq!(set.wakers.len(), 4);
        for s in &mut held {
            set.remove(s);
        }
        assert!(set.is_empty());
        assert_eq!(set.wakers.capacity(), 0, "an empty set lets its room go");
    }

    #[test]
    fn a_changed_waker_takes_the_slots_place() {
        let mut set = WakerSet::default();
        let (a, wa) = counter();
        let (b, wb) = counter();
        let mut s = Slot::default();
        set.register(&mut s, &wa);
        set.register(&mut s, &wb);
        assert_eq!(set.len(), 1);
        wake_all(set.take());
        assert_eq!(a.0.load(Ordering::SeqCst), 0);
        assert_eq!(b.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn closing_wakes_its_waiters_and_answers_later_ones_at_once() {
        let closing = Closing::default();
        let (a, wa) = counter();
        let mut slot = Slot::default();
        let cx = Context::from_waker(&wa);
        assert!(closing.poll_closed(&mut slot, &cx).is_pending());
        let (_, wb) = counter();
        let mut left = Slot::default();
        assert!(closing
            .poll_closed(&mut left, &Context::from_waker(&wb))
            .is_pending());
        closing.leave(&mut left);
        assert_eq!(closing.waiting(), 1);
        closing.close();
        assert_eq!(a.0.load(Ordering::SeqCst), 1);
        assert!(closing.poll_closed(&mut slot, &cx).is_ready());
        assert_eq!(closing.waiting(), 0);
    }

    #[test]
    fn a_dropped_watch_leaves_no_waker_behind() {
        let closing = Closing::default();
        let (task, w) = counter();
        {
            let mut watch = closing.watch();
            assert!(watch.poll(&Context::from_waker(&w)).is_pending());
            assert_eq!(closing.waiting(), 1);
        }
        drop(w);
        assert_eq!(closing.waiting(), 0);
        assert_eq!(Arc::strong_count(&task), 1);
    }
}
