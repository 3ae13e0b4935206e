//! Where a tail's task writes its answer's body: the body's queue
//! ([`crate::sse_body`], which hyper or the light path's connection task
//! drains), or, on the light path, the connection itself
//! ([`crate::detached`]), so no connection task waits beside the tail's.
//!
//! [`answer`] makes both halves: the answer's body (and the slot to put
//! among its extensions) and the tail's [`SseOut`].

use bytes::Bytes;
use http::Request;

use crate::detached::{self, Detached, Offered, Pending, Slot};
use crate::sse_body::{self, SseBody, SseSender, TrySendError};

/// Where the bytes go.
pub enum SseOut {
    /// Into the body's queue.
    Queue(SseSender),
    /// To the connection, once the light path has written the head.
    Waiting(Pending),
    Socket(Detached),
    /// Handed on (the edge's hub writer took the connection).
    Gone,
}

/// The body of a tail's answer.
pub enum SseAnswer {
    /// Its queue: the answer's body.
    Body(SseBody),
    /// Its connection is detached into this slot (an answer extension):
    /// the body is empty.
    Detach(Slot),
}

impl SseAnswer {
    /// The answer, its body made by `body` (or `empty`, detached).
    pub fn response<B>(self, body: impl FnOnce(SseBody) -> B, empty: B) -> http::Response<B> {
        match self {
            SseAnswer::Body(b) => http::Response::new(body(b)),
            SseAnswer::Detach(slot) => {
                let mut resp = http::Response::new(empty);
                resp.extensions_mut().insert(slot);
                resp
            }
        }
    }
}

/// The two halves of a tail's answer to `req`: detached when the request
/// came by the light path, else a queue of `capacity` writes.
pub fn answer<B>(req: &Request<B>, capacity: usize) -> (SseOut, SseAnswer) {
    if req.extensions().get::<Offered>().is_some() {
        let (slot, pending) = detached::slot();
        (SseOut::Waiting(pending), SseAnswer::Detach(slot))
    } else {
        let (tx, body) = sse_body::channel(capacity);
        (SseOut::Queue(tx), SseAnswer::Body(body))
    }
}

/// The reader has gone (or the server drains, for a detached one).
#[derive(Debug)]
pub struct Gone;

impl SseOut {
    /// Waits for the connection, if it is on its way; `Err` when it will
    /// not come (the client left or the server drains before the head).
    pub async fn ready(&mut self) -> Result<(), Gone> {
        if let SseOut::Waiting(_) = self {
            let SseOut::Waiting(pending) = std::mem::replace(self, SseOut::Gone) else {
                unreachable!("matched above")
            };
            *self = SseOut::Socket(pending.take().await.ok_or(Gone)?);
        }
        Ok(())
    }

    /// Sends `bytes`, waiting for the reader (a queue with room, or a
    /// socket that takes them).
    pub async fn send(&mut self, bytes: Bytes) -> Result<(), Gone> {
        let sent = match self {
            SseOut::Queue(tx) => tx.send(bytes).await.is_ok(),
            SseOut::Socket(conn) => conn.send_chunk(bytes).await.is_ok(),
            SseOut::Waiting(_) | SseOut::Gone => false,
        };
        sent.then_some(()).ok_or(Gone)
    }

    /// A keepalive: skipped when the queue is full (bytes are waiting for
    /// the reader, so its answer is not silent); a socket's waits.
    pub async fn keep_alive(&mut self, keepalive: &'static [u8]) -> Result<(), Gone> {
        match self {
            SseOut::Queue(tx) => match tx.try_send(Bytes::from_static(keepalive)) {
                Ok(()) | Err(TrySendError::Full) => Ok(()),
                Err(TrySendError::Closed) => Err(Gone),
            },
            _ => self.send(Bytes::from_static(keepalive)).await,
        }
    }

    /// Resolves when the reader has gone: the body was dropped, or the
    /// detached connection's client closed (or the server drains).
    pub async fn closed(&mut self) {
        std::future::poll_fn(|cx| self.poll_closed(cx)).await
    }

    /// Ready once the reader has gone ([`SseOut::closed`]).
    pub fn poll_closed(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        match self {
            SseOut::Queue(tx) => tx.poll_closed(cx),
            SseOut::Socket(conn) => match conn.ended(cx) {
                true => std::task::Poll::Ready(()),
                false => std::task::Poll::Pending,
            },
            SseOut::Waiting(_) | SseOut::Gone => std::task::Poll::Pending,
        }
    }
}
