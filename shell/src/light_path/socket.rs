//! What the light path does to the socket itself: peek at the next head
//! and take it off once it is known to be a tail, notice a client that
//! leaves while its answer waits, and write what is owed.

use std::io;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use rustix::net::RecvFlags;
use tokio::io::Interest;
use tokio::net::TcpStream;

use super::head::{self, Peeked};

/// Peeks at what the client sent (at most `max` bytes, in a buffer that
/// lives only for the look) and, when it is a tail, takes its head off the
/// socket. `None` when nothing is there yet.
pub fn take_head(stream: &TcpStream, max: usize) -> io::Result<Option<Peeked>> {
    let mut buf = vec![0u8; max];
    let peeked = stream.try_io(Interest::READABLE, || {
        rustix::net::recv(stream, &mut buf[..], RecvFlags::PEEK)
            .map(|(n, _)| n)
            .map_err(io::Error::from)
    });
    let n = match peeked {
        Ok(n) => n,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
        Err(e) => return Err(e),
    };
    let peeked = head::parse(&buf[..n]);
    if let Peeked::Tail { len, .. } = &peeked {
        // The peek saw these bytes in the socket's queue: one read takes
        // exactly them.
        let read = stream.try_read(&mut buf[..*len])?;
        if read != *len {
            return Err(io::Error::other("a peeked head was not all there"));
        }
    }
    Ok(Some(peeked))
}

/// Watches for a client that leaves while its answer is pending.
#[derive(Default)]
pub struct Watch {
    /// The client sent its next request already: it is there, and the
    /// bytes wait for their turn (looking again would find them again).
    pipelined: bool,
}

impl Watch {
    /// Whether the client has closed its side (or the socket failed). A
    /// peek of one byte; never reads.
    pub fn left(&mut self, stream: &TcpStream, cx: &mut Context<'_>) -> bool {
        if self.pipelined {
            return false;
        }
        loop {
            match stream.poll_read_ready(cx) {
                Poll::Pending => return false,
                Poll::Ready(Err(_)) => return true,
                Poll::Ready(Ok(())) => {}
            }
            let mut byte = [0u8; 1];
            let peeked = stream.try_io(Interest::READABLE, || {
                rustix::net::recv(stream, &mut byte[..], RecvFlags::PEEK)
                    .map(|(n, _)| n)
                    .map_err(io::Error::from)
            });
            match peeked {
                Ok(0) => return true,
                Ok(_) => {
                    self.pipelined = true;
                    return false;
                }
                // The readiness was stale and is cleared now: poll again
                // to wait for the next.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(_) => return true,
            }
        }
    }
}

/// Bytes owed to the client: a chunk's size line, its data, and the
/// chunk's end (or plain bytes alone).
pub struct Owed {
    size: [u8; 18],
    size_len: usize,
    size_sent: usize,
    data: Bytes,
    after: &'static [u8],
}

impl Owed {
    /// Plain bytes.
    pub fn bytes(data: Bytes) -> Owed {
        Owed {
            size: [0; 18],
            size_len: 0,
            size_sent: 0,
            data,
            after: b"",
        }
    }

    /// One chunk of a chunked body.
    pub fn chunk(data: Bytes) -> Owed {
        let (size, size_len) = super::answer::chunk_size(data.len());
        Owed {
            size,
            size_len,
            size_sent: 0,
            data,
            after: b"\r\n",
        }
    }

    /// Writes as much as the socket takes; ready once all is written.
    pub fn poll_write(&mut self, stream: &TcpStream, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        use std::io::IoSlice;
        loop {
            if self.size_sent == self.size_len && self.data.is_empty() && self.after.is_empty() {
                return Poll::Ready(Ok(()));
            }
            std::task::ready!(stream.poll_write_ready(cx))?;
            let parts = [
                IoSlice::new(&self.size[self.size_sent..self.size_len]),
                IoSlice::new(&self.data),
                IoSlice::new(self.after),
            ];
            match stream.try_write_vectored(&parts) {
                Ok(0) => return Poll::Ready(Err(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.advance(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }

    fn advance(&mut self, mut n: usize) {
        let size = (self.size_len - self.size_sent).min(n);
        self.size_sent += size;
        n -= size;
        let data = self.data.len().min(n);
        self.data.advance(data);
        n -= data;
        self.after = &self.after[n.min(self.after.len())..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_was_written_is_not_owed_again() {
        let mut owed = Owed::chunk(Bytes::from_static(b"hello"));
        // "5\r\n" + "hello" + "\r\n" = 10 bytes, written 2 then 4 then 4.
        owed.advance(2);
        assert_eq!(owed.size_sent, 2);
        owed.advance(4);
        assert_eq!(owed.size_sent, 3);
        assert_eq!(&owed.data[..], b"lo");
        owed.advance(4);
        assert!(owed.data.is_empty() && owed.after.is_empty());
    }
}
