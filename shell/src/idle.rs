//! Idle HTTP/2 connections. HTTP/1.1 has hyper's header-read timeout, which
//! also closes a keep-alive connection idle between requests; HTTP/2 has no
//! such timer, so a client could hold a connection (and its place under the
//! cap) forever by opening it and sending nothing, or by answering pings.
//! Here a connection counts its requests in flight (a request lasts until
//! its answer's body is dropped: an SSE tail is in flight while it streams),
//! and one with none for the idle timeout is asked to close.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use http::{Request, Response};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::service::{HttpService, Service};
use parking_lot::Mutex;

/// Requests in flight on one connection.
#[derive(Default)]
pub struct Activity {
    active: AtomicUsize,
    /// Moves on every change, so the idle timer restarts from the last one.
    changes: AtomicU64,
    /// The connection's task, woken when its last request ends.
    waker: Mutex<Option<Waker>>,
}

impl Activity {
    fn enter(self: &Arc<Self>) -> InFlight {
        self.active.fetch_add(1, Ordering::SeqCst);
        self.changes.fetch_add(1, Ordering::SeqCst);
        InFlight(Arc::clone(self))
    }

    /// Whether no request is in flight, and the count of changes so far;
    /// registers the polling task to be woken when the last one ends.
    pub fn idle(&self, cx: &Context<'_>) -> (bool, u64) {
        {
            let mut w = self.waker.lock();
            if !w.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                *w = Some(cx.waker().clone());
            }
        }
        (
            self.active.load(Ordering::SeqCst) == 0,
            self.changes.load(Ordering::SeqCst),
        )
    }
}

/// One request in flight; it ends when dropped.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.changes.fetch_add(1, Ordering::SeqCst);
        if self.0.active.fetch_sub(1, Ordering::SeqCst) == 1 {
            if let Some(w) = self.0.waker.lock().as_ref() {
                w.wake_by_ref();
            }
        }
    }
}

/// A service whose requests are counted in an [`Activity`].
#[derive(Clone)]
pub struct Tracked<S> {
    pub inner: S,
    pub activity: Arc<Activity>,
}

/// An answer's body, counting its request in flight until dropped.
pub struct Counted<B> {
    body: B,
    _in_flight: InFlight,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> Service<Request<Incoming>> for Tracked<S>
where
    S: HttpService<Incoming> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response<Counted<S::ResBody>>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Self::Response, S::Error>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let in_flight = self.activity.enter();
        let answer = self.inner.clone().call(req);
        Box::pin(async move {
            let resp = answer.await?;
            Ok(resp.map(|body| Counted {
                body,
                _in_flight: in_flight,
            }))
        })
    }
}

impl<B: Body + Unpin> Body for Counted<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, B::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
