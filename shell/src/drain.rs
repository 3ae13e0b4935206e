//! Graceful shutdown of open connections, at no cost per request.
//!
//! `hyper_util`'s `GracefulShutdown` wraps each connection in a future that
//! polls a `watch` receiver on every poll of the connection: twice per
//! append, a few percent of the origin's work under load. Here a connection
//! hands its task's waker over once (again only if the task's waker
//! changes), and a poll costs one atomic load; shutting down sets the flag
//! and wakes every registered task, which then asks its connection to finish
//! the request in flight and close.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Waker};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// The open connections of one server.
#[derive(Default)]
pub struct Drain {
    closing: AtomicBool,
    next_id: AtomicU64,
    /// Every open connection, with its task's waker once it has been polled.
    open: Mutex<HashMap<u64, Option<Waker>>>,
    /// Notified when the last connection leaves during shutdown.
    emptied: Notify,
}

/// One connection's membership; it leaves when dropped.
pub struct Member {
    drain: Arc<Drain>,
    id: u64,
    waker: Option<Waker>,
}

impl Drain {
    /// Counts a new connection in (before its task first runs, so a
    /// shutdown that starts meanwhile waits for it too).
    pub fn enter(self: &Arc<Self>) -> Member {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.open.lock().insert(id, None);
        Member {
            drain: Arc::clone(self),
            id,
            waker: None,
        }
    }

    /// Tells every connection to finish, and waits until all have closed.
    pub async fn shutdown(&self) {
        self.closing.store(true, Ordering::SeqCst);
        for waker in self.open.lock().values().flatten() {
            waker.wake_by_ref();
        }
        loop {
            let emptied = self.emptied.notified();
            if self.open.lock().is_empty() {
                return;
            }
            emptied.await;
        }
    }
}

impl Member {
    /// Whether the connection should finish now. Registers the polling
    /// task's waker so that a shutdown can wake an idle connection.
    #[inline]
    pub fn should_close(&mut self, cx: &Context<'_>) -> bool {
        if !self.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            self.register(cx.waker());
        }
        // After the registration: a shutdown that set the flag earlier is
        // seen here, and one that sets it later finds the waker.
        self.drain.closing.load(Ordering::SeqCst)
    }

    /// Forgets the waker of the task that served the connection so far:
    /// the connection leaves that task (parked in `crate::lot`, or
    /// detached), and a waker kept here would keep the finished task's
    /// memory (room for its whole future, ~1 KiB) allocated for as long as
    /// the connection lives. Its new holder registers a waker of its own
    /// with [`Member::should_close`], or learns of the shutdown otherwise
    /// (a parked answer is answered by its handler when the server stops).
    pub fn leave_task(&mut self) {
        if self.waker.take().is_some() {
            self.drain.open.lock().insert(self.id, None);
        }
    }

    /// Whether the server is draining (no waker registered: for a
    /// connection deciding whether to stay open after an answer).
    pub fn closing(&self) -> bool {
        self.drain.closing.load(Ordering::SeqCst)
    }

    #[cold]
    fn register(&mut self, waker: &Waker) {
        self.drain.open.lock().insert(self.id, Some(waker.clone()));
        self.waker = Some(waker.clone());
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let mut open = self.drain.open.lock();
        open.remove(&self.id);
        if open.is_empty() {
            self.drain.emptied.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::task::Poll;
    use std::time::Duration;

    struct Woken;

    impl std::task::Wake for Woken {
        fn wake(self: Arc<Self>) {}
    }

    #[test]
    fn a_member_that_leaves_its_task_keeps_none_of_its_waker() {
        // The waker stands for a connection's task: kept, it would keep
        // the finished task's memory (decision 0020, a parked long-poll).
        let drain = Arc::new(Drain::default());
        let mut member = drain.enter();
        let task = Arc::new(Woken);
        let waker = Waker::from(Arc::clone(&task));
        assert!(!member.should_close(&Context::from_waker(&waker)));
        drop(waker);
        assert_eq!(Arc::strong_count(&task), 3, "the member's and the drain's");
        member.leave_task();
        assert_eq!(Arc::strong_count(&task), 1);
        // Still counted in: a shutdown waits for it.
        assert_eq!(drain.open.lock().len(), 1);
    }

    #[tokio::test]
    async fn shutdown_wakes_idle_connections_and_waits_for_them() {
        let drain = Arc::new(Drain::default());
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let mut member = drain.enter();
            // An idle connection: pending until told to close, then it takes
            // a moment to finish.
            tasks.push(tokio::spawn(async move {
                poll_fn(|cx| match member.should_close(cx) {
                    true => Poll::Ready(()),
                    false => Poll::Pending,
                })
                .await;
                tokio::task::yield_now().await;
                drop(member);
            }));
        }
        // One counted in but never polled yet must be waited for as well.
        let late = drain.enter();
        let stopping = tokio::spawn({
            let drain = Arc::clone(&drain);
            async move { drain.shutdown().await }
        });
        for t in tasks {
            tokio::time::timeout(Duration::from_secs(10), t)
                .await
                .expect("woken by the shutdown")
                .unwrap();
        }
        // The never-polled one still holds the shutdown up.
        assert!(!stopping.is_finished());
        drop(late);
        tokio::time::timeout(Duration::from_secs(10), stopping)
            .await
            .expect("the shutdown ends once every connection left")
            .unwrap();
        assert!(drain.open.lock().is_empty());
    }

    #[tokio::test]
    async fn shutdown_with_no_connections_returns_at_once() {
        let drain = Drain::default();
        tokio::time::timeout(Duration::from_secs(10), drain.shutdown())
            .await
            .expect("nothing to wait for");
    }
}
