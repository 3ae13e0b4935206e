//! A tail's connection detached from its task: what lets one task write a
//! shared frame to thousands of readers with no task, queue or buffer per
//! reader (decision 0020, "Decision").
//!
//! On the light path ([`crate::light_path`]) a request reaches its handler
//! with [`Offered`] among its extensions. A handler that will stream its
//! answer from elsewhere (the edge's SSE hub) answers with a [`Slot`] among
//! the answer's extensions; the light path then writes the answer's head
//! (chunked, `connection: close`), hands the connection over as a
//! [`Detached`] through the slot, and its task ends. The holder writes the
//! body's chunks itself and ends the answer with [`Detached::finish`].
//!
//! A detached answer always closes its connection at its end: the
//! connection has no task left to serve a next request, and an SSE client
//! opens a new connection for its next session anyway (once a minute).
//!
//! What a detached connection holds: the socket (its registration with
//! tokio's I/O driver), its place in the drain and among
//! `max_connections`, whether a pipelined request was seen, and the
//! answer's body as the handler made it (dropped with the connection, so
//! whatever the body holds, a per-account tail guard say, lives as long as
//! the answer). About 150 bytes.

use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::sync::{oneshot, OwnedSemaphorePermit};

use crate::drain::Member;
use crate::light_path::{chunk_size, Owed, Watch};

/// A request extension: this request's connection can be detached (it
/// came by the light path).
#[derive(Clone, Copy, Debug)]
pub struct Offered;

/// An answer extension: detach the connection into this slot once the
/// answer's head is written.
#[derive(Clone)]
pub struct Slot(Arc<Mutex<Option<oneshot::Sender<Detached>>>>);

/// Where the detached connection arrives.
pub struct Pending(oneshot::Receiver<Detached>);

/// A slot for an answer, and where its connection will arrive.
pub fn slot() -> (Slot, Pending) {
    let (tx, rx) = oneshot::channel();
    (Slot(Arc::new(Mutex::new(Some(tx)))), Pending(rx))
}

impl Slot {
    /// Hands the connection over; false when nobody waits for it any more
    /// (the connection is then dropped, which closes it).
    pub(crate) fn fill(self, conn: Detached) -> bool {
        match self.0.lock().take() {
            Some(tx) => tx.send(conn).is_ok(),
            None => false,
        }
    }
}

impl Pending {
    /// The connection, once its answer's head is written; `None` when the
    /// client left first or the server drained.
    pub async fn take(self) -> Option<Detached> {
        self.0.await.ok()
    }
}

/// The last chunk of a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// `data` framed as one chunk of a chunked body (empty `data`: nothing, as
/// an empty chunk would end the body).
pub fn chunk(data: &[u8]) -> Bytes {
    if data.is_empty() {
        return Bytes::new();
    }
    let (size, n) = chunk_size(data.len());
    let mut out = BytesMut::with_capacity(n + data.len() + 2);
    out.put_slice(&size[..n]);
    out.put_slice(data);
    out.put_slice(b"\r\n");
    out.freeze()
}

/// A connection whose answer's head is written, its body owed.
pub struct Detached {
    stream: TcpStream,
    member: Member,
    watch: Watch,
    /// Part of a chunk was written and not the rest: ending the answer
    /// with its last chunk would break its framing, so it is cut.
    mid_chunk: bool,
    _permit: OwnedSemaphorePermit,
    /// Never looked at, only kept (so shared freely: `SyncWrapper`).
    _body: sync_wrapper::SyncWrapper<Box<dyn Send>>,
}

impl Detached {
    pub(crate) fn new(
        stream: TcpStream,
        mut member: Member,
        permit: OwnedSemaphorePermit,
        body: Box<dyn Send>,
    ) -> Detached {
        member.leave_task();
        Detached {
            stream,
            member,
            watch: Watch::default(),
            mid_chunk: false,
            _permit: permit,
            _body: sync_wrapper::SyncWrapper::new(body),
        }
    }

    /// Writes what the socket takes of `bufs` now, without waiting.
    pub fn try_write(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        match self.stream.try_write_vectored(bufs) {
            Ok(0) if bufs.iter().any(|b| !b.is_empty()) => Err(io::ErrorKind::WriteZero.into()),
            r => r,
        }
    }

    /// Ready once the socket takes bytes again (registers `cx` until then).
    pub fn poll_writable(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.stream.poll_write_ready(cx)
    }

    /// Whether the answer should end now: the client closed its side, or
    /// the server drains. Registers `cx` for both until then.
    pub fn ended(&mut self, cx: &mut Context<'_>) -> bool {
        self.member.should_close(cx) || self.watch.left(&self.stream, cx)
    }

    /// Resolves once the answer should end ([`Detached::ended`]).
    pub async fn closed(&mut self) {
        poll_fn(|cx| {
            if self.ended(cx) {
                std::task::Poll::Ready(())
            } else {
                std::task::Poll::Pending
            }
        })
        .await
    }

    /// Writes `data` as one chunk, waiting for the socket as long as it
    /// takes (its caller bounds the wait: a reader's session).
    pub async fn send_chunk(&mut self, data: Bytes) -> io::Result<()> {
        if data.is_empty() {
            return Ok(());
        }
        let mut owed = Owed::chunk(data);
        self.mid_chunk = true;
        poll_fn(|cx| owed.poll_write(&self.stream, cx)).await?;
        self.mid_chunk = false;
        Ok(())
    }

    /// Ends the answer with its last chunk, if the socket takes it now, and
    /// closes the connection (what dropping it does). One that does not
    /// take five bytes is cut: its client sees the answer end without its
    /// last chunk.
    pub fn finish(self) {}

    /// Closes the connection without the answer's last chunk (a chunk was
    /// written in part): the client sees its answer cut.
    pub fn cut(mut self) {
        self.mid_chunk = true;
    }
}

impl Drop for Detached {
    fn drop(&mut self) {
        if !self.mid_chunk {
            let _ = self.stream.try_write(LAST_CHUNK);
        }
        let _ = rustix::net::shutdown(&self.stream, rustix::net::Shutdown::Write);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chunk_is_its_size_its_data_and_its_end() {
        assert_eq!(&chunk(b"hello")[..], b"5\r\nhello\r\n");
        assert_eq!(&chunk(&[b'x'; 26])[..4], b"1a\r\n");
        assert!(chunk(b"").is_empty());
    }
}
