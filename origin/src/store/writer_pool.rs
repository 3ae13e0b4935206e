//! Writers of several partitions on a few shared threads (one WAL per
//! origin, decision 0028).
//!
//! With a thread per store, an origin serving 64 partitions to 500
//! writers spent a third of its CPU waking threads: each store saw about 8
//! writers, its batches held 1.14 commands, and every append paid its
//! store's writer a wake for its command and another for its put's
//! settlement (`loadtest/RESULTS.md`, "Why 64 partitions on one origin
//! cost p99"). Batching within a partition cannot help at that spread,
//! and the origin's log already batches across them. Here a few threads
//! each serve many stores' writers in turns: a turn takes whatever one
//! store has queued as one batch ([`Writer::turn`]), so one wake of a
//! shared thread serves every store that got commands meanwhile, and a
//! thread with work never sleeps.
//!
//! A turn never waits for a command: a thread sleeps only once a pass
//! over its stores found nothing, and every sender of a command rings its
//! thread's [`Bell`] ([`CommandTx`]). A store whose writer stops (its
//! queue closed, or a `Shutdown`) leaves its thread, and its last
//! settlements and checkpoint run on a thread of their own, so one
//! store's stop never holds the others' turns. A store waits in its turn
//! only where a writer on its own thread waits too: for a settlement when
//! it has `region::fence::WINDOW` puts in flight. Meanwhile the other
//! stores of its thread wait as well; their puts go to the same log, so
//! it is the same wait for the bucket, but a store with little in flight
//! then waits for a busier one's (not measured apart).

use std::sync::atomic::{fence, AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::writer::{Command, Turn, Turns, Writer};

/// Where a store's commands go: the writer's queue, and the bell of the
/// shared thread that serves it (none for a writer on its own thread,
/// which waits on the queue itself).
pub struct CommandTx {
    /// Always there until the drop, which lets it go before it rings.
    tx: Option<mpsc::Sender<Command>>,
    bell: Option<Arc<Bell>>,
}

impl Clone for CommandTx {
    fn clone(&self) -> Self {
        CommandTx {
            tx: self.tx.clone(),
            bell: self.bell.clone(),
        }
    }
}

// The sends give a command that did not go back to its caller, as
// tokio's own sender does (`Store::call` waits with it when the queue is
// full): the error is as large as a command.
#[allow(clippy::result_large_err)]
impl CommandTx {
    pub fn new(tx: mpsc::Sender<Command>, bell: Option<Arc<Bell>>) -> Self {
        CommandTx { tx: Some(tx), bell }
    }

    fn tx(&self) -> &mpsc::Sender<Command> {
        self.tx.as_ref().expect("a sender until dropped")
    }

    fn ring(&self) {
        if let Some(bell) = &self.bell {
            bell.ring();
        }
    }

    pub async fn send(&self, cmd: Command) -> Result<(), mpsc::error::SendError<Command>> {
        let sent = self.tx().send(cmd).await;
        self.ring();
        sent
    }

    pub fn try_send(&self, cmd: Command) -> Result<(), mpsc::error::TrySendError<Command>> {
        let sent = self.tx().try_send(cmd);
        if sent.is_ok() {
            self.ring();
        }
        sent
    }

    pub fn blocking_send(&self, cmd: Command) -> Result<(), mpsc::error::SendError<Command>> {
        let sent = self.tx().blocking_send(cmd);
        self.ring();
        sent
    }
}

/// The last sender gone ends the writer (as on its own thread, where the
/// queue's end wakes it): a sender rings once it is gone (not before: the
/// thread would look while the queue is still open, and sleep), so a
/// sleeping thread looks.
impl Drop for CommandTx {
    fn drop(&mut self) {
        drop(self.tx.take());
        self.ring();
    }
}

/// Wakes a shared writer thread that found nothing to do.
#[derive(Default)]
pub struct Bell {
    thread: OnceLock<std::thread::Thread>,
    sleeping: AtomicBool,
}

impl Bell {
    /// After a command was queued: wakes the thread if it sleeps (or is
    /// about to: it looks at the queues again after saying so).
    pub fn ring(&self) {
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }
}

/// A store's writer on a shared thread.
struct Seat {
    writer: Writer,
    rx: mpsc::Receiver<Command>,
    turns: Turns,
    /// Dropped once the writer ended: what `Store::shutdown` waits for.
    _ended: std::sync::mpsc::Sender<()>,
}

impl Seat {
    fn has_work(&self) -> bool {
        !self.rx.is_empty() || self.turns.carries() || self.rx.is_closed()
    }
}

/// One shared thread: its bell and the stores waiting to join it.
#[derive(Default)]
struct Shared {
    bell: Arc<Bell>,
    joining: Mutex<Vec<Seat>>,
    /// The pool is gone: the thread ends once its last store's writer did.
    closed: AtomicBool,
    /// Its thread was started (a place on a thread that could not be is
    /// refused, to every caller).
    running: AtomicBool,
}

/// A store's writer has ended (on its own thread or a shared one) once
/// this says so: the other half was dropped.
pub struct Ended(std::sync::mpsc::Receiver<()>);

impl Ended {
    /// The half the writer's side holds until it ended, and this.
    pub fn pair() -> (std::sync::mpsc::Sender<()>, Ended) {
        let (ended, waiting) = std::sync::mpsc::channel();
        (ended, Ended(waiting))
    }

    pub fn is_finished(&self) -> bool {
        matches!(
            self.0.try_recv(),
            Err(std::sync::mpsc::TryRecvError::Disconnected)
        )
    }

    /// Blocks until the writer ended.
    pub fn wait(self) {
        let _ = self.0.recv();
    }
}

/// The shared threads of one origin's partitions (`threads` of them,
/// started at the first store).
pub struct WriterPool {
    threads: Vec<Arc<Shared>>,
    started: std::sync::Once,
    next: AtomicUsize,
}

impl std::fmt::Debug for WriterPool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "WriterPool({} threads)", self.threads.len())
    }
}

/// A place on one shared thread, taken before the store's queue is made
/// (its senders ring that thread's bell).
pub struct Place(Arc<Shared>);

impl Place {
    pub fn bell(&self) -> Arc<Bell> {
        Arc::clone(&self.0.bell)
    }

    /// Hands the writer to its thread.
    pub fn join(self, writer: Writer, rx: mpsc::Receiver<Command>) -> Ended {
        let (ended, waiting) = Ended::pair();
        self.0.joining.lock().push(Seat {
            writer,
            rx,
            turns: Turns::default(),
            _ended: ended,
        });
        self.0.bell.ring();
        waiting
    }
}

/// The threads end once the stores they serve did.
impl Drop for WriterPool {
    fn drop(&mut self) {
        for shared in &self.threads {
            shared.closed.store(true, Ordering::SeqCst);
            shared.bell.ring();
        }
    }
}

impl WriterPool {
    /// A pool of `threads` threads (at least one).
    pub fn new(threads: usize) -> Arc<WriterPool> {
        Arc::new(WriterPool {
            threads: (0..threads.max(1)).map(|_| Arc::default()).collect(),
            started: std::sync::Once::new(),
            next: AtomicUsize::new(0),
        })
    }

    /// A place for one more store, on the threads in turn.
    pub fn place(&self) -> std::io::Result<Place> {
        let mut failed = None;
        self.started.call_once(|| {
            for (i, shared) in self.threads.iter().enumerate() {
                let serving = Arc::clone(shared);
                match std::thread::Builder::new()
                    .name(format!("wal-writers-{i}"))
                    .spawn(move || serve(serving))
                {
                    Ok(_) => shared.running.store(true, Ordering::Release),
                    Err(e) => failed = Some(e),
                }
            }
        });
        if let Some(e) = failed {
            return Err(e);
        }
        let i = self.next.fetch_add(1, Ordering::Relaxed) % self.threads.len();
        let shared = &self.threads[i];
        if !shared.running.load(Ordering::Acquire) {
            return Err(std::io::Error::other(
                "this shared writer thread could not be started",
            ));
        }
        Ok(Place(Arc::clone(shared)))
    }
}

/// A shared thread's life: turns for every seated store while any has
/// work, sleeping when none has; it ends once the pool is gone and no
/// store is seated.
fn serve(me: Arc<Shared>) {
    let _ = me.bell.thread.set(std::thread::current());
    let slice = super::scheduling::ask_for_slice(super::scheduling::WRITER_SLICE);
    tracing::debug!(?slice, "a shared writer thread's time slice");
    let mut seats: Vec<Seat> = Vec::new();
    loop {
        seats.append(&mut me.joining.lock());
        let mut worked = false;
        let mut i = 0;
        while i < seats.len() {
            let seat = &mut seats[i];
            match seat.writer.turn(&mut seat.rx, &mut seat.turns) {
                Turn::Idle => i += 1,
                Turn::Worked => {
                    worked = true;
                    i += 1;
                }
                Turn::Ended { finish } => {
                    worked = true;
                    finish_apart(seats.swap_remove(i), finish);
                }
            }
        }
        if worked {
            continue;
        }
        me.bell.sleeping.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let joining = !me.joining.lock().is_empty();
        if !joining && seats.is_empty() && me.closed.load(Ordering::SeqCst) {
            return;
        }
        let waiting = joining || seats.iter().any(Seat::has_work);
        if !waiting {
            std::thread::park();
        }
        me.bell.sleeping.store(false, Ordering::SeqCst);
    }
}

/// A store's writer leaves its shared thread: what it does at its end
/// (settling its last puts, its last checkpoint) runs on a thread of its
/// own, and `Store::shutdown` learns of its end when the seat is dropped.
fn finish_apart(seat: Seat, finish: bool) {
    if !finish {
        return;
    }
    // The whole seat goes to the thread (its `_ended` with it), so the
    // store learns of the end only once `finish` returned.
    let spawned = std::thread::Builder::new()
        .name("wal-writer-end".into())
        .spawn(move || {
            let Seat { writer, _ended, .. } = seat;
            writer.finish();
            drop(_ended);
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "no thread for a writer's end: its last checkpoint is skipped (the next start replays its log)");
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;

    use super::WriterPool;
    use crate::clock::SystemClock;
    use crate::core::config::{Expiry, StreamConfig};
    use crate::core::stream::AppendRequest;
    use crate::store::{Store, StoreConfig};

    fn open(dir: &std::path::Path, pool: Option<Arc<WriterPool>>) -> Store {
        let mut config = StoreConfig::new(dir.to_owned());
        config.writers = pool;
        Store::open(config, Arc::new(SystemClock), Arc::default())
            .expect("store")
            .0
    }

    const STREAM: &str = "/v1/stream/pooled";
    const APPENDS: u64 = 40;

    /// Three stores whose writers share one thread: every append to each
    /// is answered (the bell wakes the thread for each store's commands),
    /// each stop finishes (its end runs apart and `shutdown` learns of it),
    /// and each store reopened on a thread of its own finds every byte.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stores_sharing_a_thread_write_stop_and_reopen_whole() {
        let pool = WriterPool::new(1);
        let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let stores: Vec<Store> = dirs
            .iter()
            .map(|d| open(d.path(), Some(Arc::clone(&pool))))
            .collect();
        let config = StreamConfig {
            content_type: "application/octet-stream".into(),
            expiry: Expiry::Never,
            public: false,
        };
        for store in &stores {
            store
                .create(STREAM.into(), config.clone(), false, Bytes::new())
                .await
                .unwrap();
        }
        let appends = stores.iter().flat_map(|store| {
            (0..APPENDS).map(move |i| async move {
                let view = store.find(STREAM).unwrap();
                let payload = Bytes::from(format!("{i:010}"));
                let req = AppendRequest {
                    content_type: Some("application/octet-stream".into()),
                    payload_len: payload.len() as u64,
                    producer: None,
                    stream_seq: None,
                    close: false,
                };
                store.append(view, None, req, payload).await.unwrap();
            })
        });
        futures::future::join_all(appends).await;
        for store in &stores {
            assert_eq!(store.find(STREAM).unwrap().end().next, APPENDS * 10);
            store.shutdown().await;
            assert!(store.is_stopped());
        }
        drop(stores);
        for dir in &dirs {
            let store = open(dir.path(), None);
            assert_eq!(store.find(STREAM).unwrap().end().next, APPENDS * 10);
            store.shutdown().await;
        }
    }
}
