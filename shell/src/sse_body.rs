//! The body of a live answer (an SSE tail): a small bounded queue that the
//! tail's task fills and hyper drains, with nothing in between.
//!
//! Why not a `tokio::sync::mpsc` channel behind `Body::from_stream`: an
//! idle tail is the thing a server holds by the ten thousand, and tokio's
//! channel allocates a block of 32 slots (about 1.1 KiB for `Bytes`) and a
//! ~400-byte shared state up front, whatever its capacity, plus the stream
//! adapters around it. This queue is one small allocation; its slots grow
//! only while bytes wait for the reader (at most `capacity` of them) and
//! are let go once it has caught up.
//!
//! One task writes (its [`SseSender`]); the body is the only reader. The
//! sender learns when the reader has gone ([`SseSender::closed`]), so an
//! idle tail ends as soon as its answer is dropped.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http_body::{Body, Frame};
use parking_lot::Mutex;

/// Makes a tail's queue of at most `capacity` waiting writes (at least 1).
pub fn channel(capacity: usize) -> (SseSender, SseBody) {
    let shared = Arc::new(Mutex::new(State {
        queue: VecDeque::new(),
        capacity: capacity.max(1),
        sender_gone: false,
        body_gone: false,
        body_waker: None,
        sender_waker: None,
    }));
    (
        SseSender {
            shared: Arc::clone(&shared),
        },
        SseBody { shared },
    )
}

struct State {
    queue: VecDeque<Bytes>,
    capacity: usize,
    sender_gone: bool,
    body_gone: bool,
    body_waker: Option<Waker>,
    /// The writing task, waiting for room or for the body to go.
    sender_waker: Option<Waker>,
}

impl State {
    fn wake_body(&mut self) {
        if let Some(w) = self.body_waker.take() {
            w.wake();
        }
    }

    fn wake_sender(&mut self) {
        if let Some(w) = self.sender_waker.take() {
            w.wake();
        }
    }

    /// The slots of a drained queue go: an idle tail holds none.
    fn let_go_if_drained(&mut self) {
        if self.queue.is_empty() && self.queue.capacity() > 0 {
            self.queue = VecDeque::new();
        }
    }
}

/// Why a write was not queued.
#[derive(Debug, PartialEq, Eq)]
pub enum TrySendError {
    /// `capacity` writes are waiting for the reader.
    Full,
    /// The reader has gone.
    Closed,
}

/// The writing half.
pub struct SseSender {
    shared: Arc<Mutex<State>>,
}

impl SseSender {
    /// Queues `bytes` unless the queue is full or the reader has gone.
    pub fn try_send(&self, bytes: Bytes) -> Result<(), TrySendError> {
        let mut st = self.shared.lock();
        if st.body_gone {
            return Err(TrySendError::Closed);
        }
        if st.queue.len() >= st.capacity {
            return Err(TrySendError::Full);
        }
        st.queue.push_back(bytes);
        st.wake_body();
        Ok(())
    }

    /// Queues `bytes`, waiting for room; `Err` once the reader has gone.
    pub async fn send(&self, bytes: Bytes) -> Result<(), Closed> {
        let mut bytes = Some(bytes);
        poll_fn(|cx| {
            let mut st = self.shared.lock();
            if st.body_gone {
                return Poll::Ready(Err(Closed));
            }
            if st.queue.len() >= st.capacity {
                st.sender_waker = Some(cx.waker().clone());
                return Poll::Pending;
            }
            st.queue
                .push_back(bytes.take().expect("polled again after it was sent"));
            st.wake_body();
            Poll::Ready(Ok(()))
        })
        .await
    }

    /// Resolves once the reader has gone (its answer was dropped).
    #[cfg(test)]
    pub async fn closed(&self) {
        poll_fn(|cx| self.poll_closed(cx)).await
    }

    /// Ready once the body is gone.
    pub fn poll_closed(&self, cx: &Context<'_>) -> Poll<()> {
        let mut st = self.shared.lock();
        if st.body_gone {
            return Poll::Ready(());
        }
        st.sender_waker = Some(cx.waker().clone());
        Poll::Pending
    }
}

/// The reader has gone.
#[derive(Debug, PartialEq, Eq)]
pub struct Closed;

impl Drop for SseSender {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.sender_gone = true;
        st.wake_body();
    }
}

/// The answer's body: every queued write in order, then the end once the
/// sender has gone.
pub struct SseBody {
    shared: Arc<Mutex<State>>,
}

impl Body for SseBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let mut st = self.shared.lock();
        if let Some(bytes) = st.queue.pop_front() {
            st.let_go_if_drained();
            st.wake_sender();
            return Poll::Ready(Some(Ok(Frame::data(bytes))));
        }
        if st.sender_gone {
            return Poll::Ready(None);
        }
        st.body_waker = Some(cx.waker().clone());
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        let st = self.shared.lock();
        st.sender_gone && st.queue.is_empty()
    }
}

impl Drop for SseBody {
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.body_gone = true;
        st.queue = VecDeque::new();
        st.wake_sender();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn writes_arrive_in_order_and_the_end_follows_the_sender() {
        let (tx, mut body) = channel(2);
        tx.try_send(Bytes::from_static(b"a")).unwrap();
        tx.send(Bytes::from_static(b"b")).await.unwrap();
        assert_eq!(
            tx.try_send(Bytes::from_static(b"c")),
            Err(TrySendError::Full)
        );
        let a = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&a[..], b"a");
        tx.try_send(Bytes::from_static(b"c")).unwrap();
        drop(tx);
        let rest = body.collect().await.unwrap().to_bytes();
        assert_eq!(&rest[..], b"bc");
    }

    #[tokio::test]
    async fn a_waiting_send_goes_on_when_the_reader_takes_a_write() {
        let (tx, mut body) = channel(1);
        tx.try_send(Bytes::from_static(b"1")).unwrap();
        let writer = tokio::spawn(async move {
            tx.send(Bytes::from_static(b"2")).await.unwrap();
            tx
        });
        tokio::task::yield_now().await;
        assert!(!writer.is_finished(), "the send waits for room");
        let one = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&one[..], b"1");
        let tx = writer.await.unwrap();
        let two = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&two[..], b"2");
        // Drained: the slots are let go.
        assert_eq!(tx.shared.lock().queue.capacity(), 0);
    }

    #[tokio::test]
    async fn the_sender_learns_the_reader_has_gone() {
        let (tx, body) = channel(1);
        tx.try_send(Bytes::from_static(b"x")).unwrap();
        let waiting = tokio::spawn(async move {
            tx.closed().await;
            tx
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(body);
        let tx = waiting.await.unwrap();
        assert_eq!(
            tx.try_send(Bytes::from_static(b"y")),
            Err(TrySendError::Closed)
        );
        assert_eq!(tx.send(Bytes::from_static(b"z")).await, Err(Closed));
    }
}
