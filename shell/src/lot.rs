//! Answers still waiting, held without a task each (decision
//! 0020, "Decision").
//!
//! On the light path a long-poll's answer usually waits: for the stream's
//! next append, or for its collapsed upstream answer. Its connection's task
//! would wait with it (~900 bytes with the light path's state) beside the
//! handler's own future. So once the handler's future is found waiting on
//! its first poll, the connection leaves its task: the future, the socket
//! and the connection's few words become an entry of a lot, and one task
//! per shard of [`SHARD`] entries polls an entry's future only when that
//! entry's waker fires (`crate::wakes`). The same waker watches the client:
//! one that closes drops its entry, and so its handler's future, as its
//! task would have. Once the answer is there, a new task takes the
//! connection up where it was: it writes the answer and serves the
//! connection's next request (a long-poll's client sends one at once).
//!
//! The drain needs nothing of its own here: an entry keeps its place in
//! it, and the servers' handlers answer their waiting requests when the
//! server stops (503), which sends them on as any answer.

use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Request, Response};
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use crate::accept::{Http1, Served};
use crate::config::ServeConfig;
use crate::connection::{self, AnswerBody};
use crate::drain::Member;
use crate::light_path::Watch;
use crate::request_body::RequestBody;
use crate::request_id::Answered;
use crate::shards::Shards;
use crate::wakes::EntryWake;

/// Entries one task drives at most; a lot with more starts another task.
pub const SHARD: usize = 4096;

/// A connection whose answer waits.
pub(crate) struct Parked<H, F> {
    pub stream: TcpStream,
    /// The handler's future, run as its request's context.
    pub answer: Answered<F>,
    /// The client asked to close after this answer.
    pub close: bool,
    pub held: (Member, OwnedSemaphorePermit),
    pub served: Served<H>,
}

struct Entry<H, F> {
    parked: Parked<H, F>,
    watch: Watch,
    wake: Arc<EntryWake>,
}

/// One task's share of the lot.
type Door<H, F> = crate::shards::Door<Parked<H, F>>;

/// The waiting answers of one server.
pub(crate) struct Lot<H, F, B> {
    pub(crate) config: Arc<ServeConfig>,
    pub(crate) http1: Http1,
    shards: Shards<Parked<H, F>>,
    _body: PhantomData<fn() -> B>,
}

impl<H, F, B> Lot<H, F, B>
where
    H: Fn(Request<RequestBody>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + Unpin + 'static,
    B: AnswerBody,
{
    pub(crate) fn new(config: Arc<ServeConfig>, http1: Http1) -> Arc<Self> {
        Arc::new(Lot {
            config,
            http1,
            shards: Shards::default(),
            _body: PhantomData,
        })
    }

    /// Takes a connection whose answer waits.
    pub(crate) fn park(self: &Arc<Self>, mut parked: Parked<H, F>) {
        parked.held.0.leave_task();
        self.shards.join(SHARD, parked, |door| {
            tokio::spawn(drive(Arc::clone(self), door));
        });
    }
}

/// One task of the lot: polls the entries whose waker fired.
async fn drive<H, F, B>(lot: Arc<Lot<H, F, B>>, door: Arc<Door<H, F>>)
where
    H: Fn(Request<RequestBody>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + Unpin + 'static,
    B: AnswerBody,
{
    // Should this task end any other way, its door leaves the lot all the
    // same (no connection parks with a task that is gone; those on their
    // way in are closed with their answers).
    let _leaving = lot.shards.leaving(&door);
    let mut entries: Vec<Option<Entry<H, F>>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    loop {
        door.woken().notified().await;
        let joins = door.take_joins();
        for parked in joins {
            let id = free.pop().unwrap_or_else(|| {
                entries.push(None);
                entries.len() - 1
            });
            entries[id] = Some(Entry {
                parked,
                watch: Watch::default(),
                wake: door.woken().wake_of(id),
            });
            poll(&lot, &door, &mut entries, &mut free, id);
        }
        for id in door.woken().take() {
            if let Some(Some(e)) = entries.get(id) {
                e.wake.rearm();
                poll(&lot, &door, &mut entries, &mut free, id);
            }
        }
        if lot.shards.retire(&door) {
            return;
        }
    }
}

/// Polls one entry: its client may have left, its answer may be there.
/// A handler that panics ends its own request only (as it would in a task
/// of its own): its entry is dropped, and its connection closes.
fn poll<H, F, B>(
    lot: &Arc<Lot<H, F, B>>,
    door: &Door<H, F>,
    entries: &mut [Option<Entry<H, F>>],
    free: &mut Vec<usize>,
    id: usize,
) where
    H: Fn(Request<RequestBody>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + Unpin + 'static,
    B: AnswerBody,
{
    let Some(e) = entries[id].as_mut() else {
        return;
    };
    let waker = e.wake.waker();
    let mut cx = Context::from_waker(&waker);
    let answered = if e.watch.left(&e.parked.stream, &mut cx) {
        None
    } else {
        let polled = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            Pin::new(&mut e.parked.answer).poll(&mut cx)
        }));
        match polled {
            Ok(Poll::Pending) => return,
            Ok(Poll::Ready(response)) => Some(response),
            Err(_) => None,
        }
    };
    let Some(e) = entries[id].take() else {
        return;
    };
    free.push(id);
    door.left();
    let Some(response) = answered else {
        // The client left (or its handler panicked): its answer's future
        // goes with it.
        let _ = rustix::net::shutdown(&e.parked.stream, rustix::net::Shutdown::Write);
        return;
    };
    let p = e.parked;
    tokio::spawn(resume(
        p.stream,
        p.served,
        p.held,
        Arc::clone(lot),
        Box::new((response, p.close)),
    ));
}

/// The connection's task again, from its answer on. (Its type is named,
/// not inferred: the task it spawns may park again, and an inferred type
/// would need itself to be known first.)
fn resume<H, F, B>(
    stream: TcpStream,
    served: Served<H>,
    held: (Member, OwnedSemaphorePermit),
    lot: Arc<Lot<H, F, B>>,
    answer: Box<(Response<B>, bool)>,
) -> Pin<Box<dyn Future<Output = ()> + Send>>
where
    H: Fn(Request<RequestBody>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + Unpin + 'static,
    B: AnswerBody,
{
    Box::pin(connection::serve(
        stream,
        served,
        Some(held),
        lot,
        Some(answer),
    ))
}
