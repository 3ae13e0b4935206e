//! Carries out what a durable batch makes visible: registry changes, new
//! tails, answers.
//!
//! The writer thread hands each durable batch over here instead of waking
//! each waiting request itself: a wake-up from outside the runtime costs a
//! cross-thread hand-off per request, one from inside it a push onto the
//! waking worker's own queue. Inside the runtime, the batch is carried out
//! by whichever comes first: a request starting on a runtime worker
//! ([`Publisher::help`], one atomic load when nothing waits), or the
//! publisher's own task, which the writer wakes. The task alone was late:
//! a wake-up from outside the runtime waits in its global queue until a
//! busy worker looks there, 0.4–0.5 ms on average and up to 5 ms under 500
//! closed-loop writers, while the batch's requests and the writer's next
//! batch waited with it.
//!
//! Batches are carried out one at a time, in the order they became durable,
//! so a stream's published tail only moves forward.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::engine::Engine;
use super::view::End;
use super::writer::{AfterCommit, AppendOutcome, Registry};

/// Durable batches waiting past this many, the writer carries them out
/// itself: the runtime is gone, or too busy to keep up.
const MAX_WAITING_BATCHES: usize = 256;

/// Every stream in path order, beside the registry (a hash map, which
/// the hot path asks): a listing's page, and the region's sweeps of its
/// own streams (under `shared::partition::HIDDEN`), walk a range of it,
/// never every stream. Changed with the registry, so bounded by the
/// stream count as it is. Per stream a B-tree slot (a shared path and a
/// view pointer, 24 B) in nodes half to fully used: 24–48 B.
pub type Ordered =
    Arc<parking_lot::RwLock<std::collections::BTreeMap<Arc<str>, Arc<super::StreamView>>>>;

/// Told of streams created and appended to, once visible (subscriptions
/// wake on them). Called on the publishing thread: it must only note what
/// happened and return.
pub trait Observer: Send + Sync {
    fn created(&self, path: &Arc<str>);
    fn appended(&self, path: &Arc<str>);
}

pub struct Publisher {
    /// Set once, when subscriptions start; read on every publish.
    observer: std::sync::OnceLock<Arc<dyn Observer>>,
    registry: Registry,
    ordered: Ordered,
    data: std::path::PathBuf,
    /// Durable batches not carried out yet, oldest first.
    waiting: Mutex<VecDeque<Vec<AfterCommit>>>,
    /// Whether `waiting` may hold a batch (set and cleared under its lock).
    pending: AtomicBool,
    /// Held while batches are carried out, so they go one at a time.
    applying: Mutex<()>,
    wake: Notify,
    closed: AtomicBool,
}

impl Publisher {
    pub fn new(registry: Registry, ordered: Ordered, data: std::path::PathBuf) -> Self {
        Publisher {
            observer: std::sync::OnceLock::new(),
            registry,
            ordered,
            data,
            waiting: Mutex::new(VecDeque::new()),
            pending: AtomicBool::new(false),
            applying: Mutex::new(()),
            wake: Notify::new(),
            closed: AtomicBool::new(false),
        }
    }

    /// Sets the observer (once; a second is ignored).
    pub fn observe(&self, observer: Arc<dyn Observer>) {
        let _ = self.observer.set(observer);
    }

    /// Hands a durable batch over (writer thread).
    pub fn submit(&self, actions: Vec<AfterCommit>) {
        let backlog = {
            let mut waiting = self.waiting.lock();
            waiting.push_back(actions);
            self.pending.store(true, Ordering::Release);
            waiting.len()
        };
        if backlog > MAX_WAITING_BATCHES || self.closed.load(Ordering::Acquire) {
            self.carry_out(true);
        } else {
            self.wake.notify_one();
        }
    }

    /// Carries out the waiting batches, if any and if no one else is at it
    /// (a runtime worker, at the start of a request).
    pub fn help(&self) {
        if self.pending.load(Ordering::Acquire) {
            self.carry_out(false);
        }
    }

    /// Carries out the waiting batches until the writer stops. It may wait
    /// on its worker for a request that is carrying batches out already: as
    /// long as one batch takes (microseconds), never across an await.
    pub async fn run(self: Arc<Self>) {
        while !self.closed.load(Ordering::Acquire) {
            self.wake.notified().await;
            self.carry_out(true);
        }
    }

    /// The writer stopped: carries out what is left and ends the task.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake.notify_one();
        self.carry_out(true);
    }

    /// Carries out waiting batches in order; `wait`: even if another thread
    /// is at it (then after it), else leave them to that thread.
    fn carry_out(&self, wait: bool) {
        let _turn = if wait {
            self.applying.lock()
        } else {
            match self.applying.try_lock() {
                Some(turn) => turn,
                None => return,
            }
        };
        loop {
            let next = {
                let mut waiting = self.waiting.lock();
                let next = waiting.pop_front();
                if next.is_none() {
                    self.pending.store(false, Ordering::Release);
                }
                next
            };
            match next {
                Some(actions) => self.apply(actions),
                None => return,
            }
        }
    }

    fn apply(&self, actions: Vec<AfterCommit>) {
        for action in actions {
            match action {
                AfterCommit::Register(view) => {
                    self.ordered
                        .write()
                        .insert(view.path.clone(), Arc::clone(&view));
                    let path = view.path.clone();
                    self.registry.write().insert(view.path.clone(), view);
                    if let Some(o) = self.observer.get() {
                        o.created(&path);
                    }
                }
                AfterCommit::Unregister(view) => {
                    let mut reg = self.registry.write();
                    if reg.get(&*view.path).is_some_and(|v| Arc::ptr_eq(v, &view)) {
                        reg.remove(&*view.path);
                    }
                    drop(reg);
                    let mut ordered = self.ordered.write();
                    if ordered
                        .get(&*view.path)
                        .is_some_and(|v| Arc::ptr_eq(v, &view))
                    {
                        ordered.remove(&*view.path);
                    }
                    drop(ordered);
                    view.set_soft_deleted(false);
                    view.publish(End {
                        gone: true,
                        ..view.end()
                    });
                    Engine::remove_file(&self.data, &view.disk().files, view.id);
                }
                // A replica's appends come so (and a close, a trim): the
                // subscriptions hear of them as of an append.
                AfterCommit::Publish(view, tail) => {
                    view.publish(tail);
                    if let Some(o) = self.observer.get() {
                        o.appended(&view.path);
                    }
                }
                AfterCommit::Appended(reply, result) => {
                    if let Ok(a) = &result {
                        if matches!(a.outcome, AppendOutcome::Applied { .. }) {
                            a.view.publish(a.end);
                            if let Some(o) = self.observer.get() {
                                o.appended(&a.view.path);
                            }
                        }
                    }
                    let _ = reply.send(result);
                }
                AfterCommit::Reply(reply) => reply(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use parking_lot::{Mutex, RwLock};

    use super::{AfterCommit, Publisher, MAX_WAITING_BATCHES};

    fn publisher() -> Arc<Publisher> {
        Arc::new(Publisher::new(
            Arc::new(RwLock::new(Default::default())),
            Arc::default(),
            std::env::temp_dir(),
        ))
    }

    /// A batch of one action that notes `n` in `log` when carried out.
    fn noting(log: &Arc<Mutex<Vec<usize>>>, n: usize) -> Vec<AfterCommit> {
        let log = Arc::clone(log);
        vec![AfterCommit::Reply(Box::new(move || log.lock().push(n)))]
    }

    #[test]
    fn a_request_carries_out_waiting_batches_in_order_and_only_once() {
        let (p, log) = (publisher(), Arc::new(Mutex::new(Vec::new())));
        p.help();
        for n in 0..3 {
            p.submit(noting(&log, n));
        }
        assert!(log.lock().is_empty(), "submitting carries nothing out");
        p.help();
        assert_eq!(*log.lock(), [0, 1, 2]);
        p.help();
        assert_eq!(*log.lock(), [0, 1, 2]);
    }

    #[test]
    fn a_helper_leaves_batches_to_the_thread_already_at_them() {
        // The first batch asks for help while it is being carried out: the
        // helper must neither wait for itself nor take the second batch out
        // of turn.
        let (p, log) = (publisher(), Arc::new(Mutex::new(Vec::new())));
        let (inner, inner_log) = (Arc::clone(&p), Arc::clone(&log));
        p.submit(vec![AfterCommit::Reply(Box::new(move || {
            inner.help();
            inner_log.lock().push(0);
        }))]);
        p.submit(noting(&log, 1));
        p.help();
        assert_eq!(*log.lock(), [0, 1]);
    }

    #[tokio::test]
    async fn the_task_carries_out_a_batch_when_no_request_comes() {
        let p = publisher();
        let task = tokio::spawn(Arc::clone(&p).run());
        let (tx, rx) = tokio::sync::oneshot::channel();
        p.submit(vec![AfterCommit::Reply(Box::new(move || {
            let _ = tx.send(());
        }))]);
        tokio::time::timeout(Duration::from_secs(10), rx)
            .await
            .expect("carried out by the task")
            .expect("answered");
        p.close();
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the task ends once closed")
            .expect("task");
    }

    #[test]
    fn without_a_runtime_the_writer_carries_out_a_full_backlog_itself() {
        let (p, log) = (publisher(), Arc::new(Mutex::new(Vec::new())));
        for n in 0..MAX_WAITING_BATCHES {
            p.submit(noting(&log, n));
        }
        assert!(log.lock().is_empty());
        p.submit(noting(&log, MAX_WAITING_BATCHES));
        assert_eq!(*log.lock(), (0..=MAX_WAITING_BATCHES).collect::<Vec<_>>());
    }

    #[test]
    fn once_closed_each_batch_is_carried_out_as_it_is_submitted() {
        let (p, log) = (publisher(), Arc::new(Mutex::new(Vec::new())));
        p.submit(noting(&log, 0));
        p.close();
        assert_eq!(*log.lock(), [0], "closing carries out what waits");
        p.submit(noting(&log, 1));
        assert_eq!(*log.lock(), [0, 1]);
    }
}
