//! The client at the other end of an HTTP/1.1 connection, for the requests
//! that wait (long-polls, SSE tails): they end when it leaves.
//!
//! hyper can watch for a client that leaves mid-request itself, but only by
//! reading the socket after every request's body, before the answer, into a
//! fresh 8 KiB read buffer (the old one is still shared with the body): an
//! allocation and a free of 8 KiB on every append. Connections are therefore
//! served with hyper's `half_close`, which skips that read, and the few
//! requests that wait watch the socket themselves: the connection's stream
//! is shared between hyper (through [`SharedStream`]) and the waiting request
//! (through [`Peer`]). While a request waits hyper does not read, so the two
//! never race for bytes; the watch only peeks.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::TcpStream;

/// The connection's socket as hyper reads and writes it.
pub struct SharedStream(Arc<TcpStream>);

/// The client of the request in flight.
#[derive(Clone, Debug)]
pub struct Peer(Arc<TcpStream>);

/// One socket, two handles: hyper's and the waiting requests'.
pub fn share(stream: TcpStream) -> (SharedStream, Peer) {
    let stream = Arc::new(stream);
    (SharedStream(Arc::clone(&stream)), Peer(stream))
}

impl Peer {
    /// Resolves once the client has closed its side of the connection (or
    /// the socket failed). Never while it is silent, nor once it has sent
    /// more (a pipelined request: it is still there).
    pub async fn left(&self) {
        let mut byte = [0u8; 1];
        if let Ok(1..) = self.0.peek(&mut byte).await {
            std::future::pending::<()>().await;
        }
    }
}

/// A request's client, watched for its leaving (see [`Peer::left`]).
/// The watch's future (a peek, ~300 bytes) is boxed, and made only when
/// there is a client to watch: a waiting tail's own state need not carry
/// it, and a light-path request (no [`Peer`]: the light path watches its
/// client itself) costs a word.
pub struct ClientWatch(Option<std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>>);

/// Watches `peer` (nothing to watch: never resolves; HTTP/2 watches its
/// streams itself).
pub fn watch(peer: Option<Peer>) -> ClientWatch {
    ClientWatch(peer.map(|p| {
        Box::pin(async move { p.left().await })
            as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
    }))
}

impl ClientWatch {
    /// Resolves once the client has left; never again after that.
    #[cfg(test)]
    pub async fn left(&mut self) {
        std::future::poll_fn(|cx| self.poll_left(cx)).await
    }

    /// Ready once the client has left; never again after that.
    pub fn poll_left(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        let Some(f) = &mut self.0 else {
            return std::task::Poll::Pending;
        };
        let left = f.as_mut().poll(cx);
        if left.is_ready() {
            self.0 = None;
        }
        left
    }
}

impl SharedStream {
    /// Runs `op` (bytes done, bytes asked) once the socket is ready for
    /// `interest`. Like tokio's own `TcpStream`, an operation that did less
    /// than it was asked drained the socket (or filled its send buffer), so
    /// the readiness is cleared and the next one waits for the next event
    /// instead of making a system call that finds nothing. `try_io` clears
    /// it only if no new event arrived since it was read, so none is lost.
    fn poll_io(
        &self,
        cx: &mut Context<'_>,
        interest: Interest,
        mut op: impl FnMut() -> io::Result<(usize, usize)>,
    ) -> Poll<io::Result<usize>> {
        loop {
            let ready = if interest.is_readable() {
                self.0.poll_read_ready(cx)
            } else {
                self.0.poll_write_ready(cx)
            };
            ready!(ready)?;
            let mut done = 0;
            let tried = self.0.try_io(interest, || {
                let (n, asked) = op()?;
                done = n;
                if 0 < n && n < asked {
                    return Err(io::ErrorKind::WouldBlock.into());
                }
                Ok(())
            });
            match tried {
                Ok(()) => return Poll::Ready(Ok(done)),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    if done > 0 {
                        return Poll::Ready(Ok(done));
                    }
                }
                Err(e) => return Poll::Ready(Err(e)),
            }
        }
    }
}

impl AsyncRead for SharedStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let stream = &self.0;
        self.poll_io(cx, Interest::READABLE, || {
            let asked = buf.remaining();
            Ok((stream.try_read_buf(buf)?, asked))
        })
        .map_ok(|_| ())
    }
}

impl AsyncWrite for SharedStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let stream = &self.0;
        self.poll_io(cx, Interest::WRITABLE, || {
            Ok((stream.try_write(buf)?, buf.len()))
        })
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let stream = &self.0;
        let asked = bufs.iter().map(|b| b.len()).sum();
        self.poll_io(cx, Interest::WRITABLE, || {
            Ok((stream.try_write_vectored(bufs)?, asked))
        })
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // A socket already reset by the client has nothing left to shut.
        let _ = rustix::net::shutdown(&*self.0, rustix::net::Shutdown::Write);
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap());
        let (client, accepted) = tokio::join!(client, listener.accept());
        (client.unwrap(), accepted.unwrap().0)
    }

    #[tokio::test]
    async fn reads_and_writes_through_the_shared_stream() {
        let (mut client, server) = pair().await;
        let (mut io, _peer) = share(server);
        client.write_all(b"ping").await.unwrap();
        let mut got = [0u8; 4];
        io.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"ping");
        let parts = [io::IoSlice::new(b"po"), io::IoSlice::new(b"ng")];
        let n = io.write_vectored(&parts).await.unwrap();
        io.write_all(&b"pong"[n..]).await.unwrap();
        io.shutdown().await.unwrap();
        let mut back = Vec::new();
        client.read_to_end(&mut back).await.unwrap();
        assert_eq!(back, b"pong");
    }

    #[tokio::test]
    async fn a_client_that_closes_has_left() {
        let (client, server) = pair().await;
        let (_io, peer) = share(server);
        drop(client);
        tokio::time::timeout(Duration::from_secs(10), peer.left())
            .await
            .expect("the watch sees the close");
    }

    #[tokio::test]
    async fn a_silent_or_pipelining_client_has_not_left() {
        let (mut client, server) = pair().await;
        let (mut io, peer) = share(server);
        let silent = tokio::time::timeout(Duration::from_millis(100), peer.left()).await;
        assert!(silent.is_err(), "a silent client is still there");
        client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        let sent = tokio::time::timeout(Duration::from_millis(100), peer.left()).await;
        assert!(sent.is_err(), "a client that sent more is still there");
        // The peek took nothing: hyper still reads every byte.
        let mut got = [0u8; 16];
        io.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"GET / HTTP/1.1\r\n");
    }

    #[tokio::test(start_paused = true)]
    async fn no_peer_never_leaves() {
        let mut watch = watch(None);
        let never = tokio::time::timeout(Duration::from_secs(3600), watch.left()).await;
        assert!(never.is_err());
    }
}
