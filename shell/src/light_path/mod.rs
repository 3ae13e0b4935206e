//! The light path: HTTP/1.1 tails (long-polls and SSE reads) served
//! without hyper, so a waiting reader costs what its own state costs and
//! not an HTTP/1.1 connection's buffers (decision 0020).
//!
//! hyper keeps an 8 KiB read buffer and an 8 KiB write buffer for the life
//! of every HTTP/1.1 connection, with its connection future beside them:
//! ~20 KiB a connection, ten times what decision 0020 allows an idle reader.
//! Here the first bytes of a connection (and of each request after a tail
//! on it) are peeked at ([`head`]); a whole head of a bodiless `GET` live
//! read is taken off the socket and answered by the same handler hyper
//! would call, the answer written here ([`answer`], [`socket`]). While it
//! waits, the connection holds the socket, the handler's future or body,
//! and a few words of state: no buffer (the peek's lives only for the
//! look).
//!
//! Any other request goes to hyper, with the socket as it is (nothing of
//! it was read), and hyper serves the connection to its end: a client that
//! mixes writes and tails on one connection gets hyper's connection, as
//! before.
//!
//! As hyper does: the answer is dated, framed by its length or in chunks,
//! and ends the connection when the client or the handler asked for it or
//! the server drains; a client that closes its side while its answer waits
//! ends the answer (its future and body are dropped); between requests the
//! connection waits at most `header_read_timeout` for the next one. Unlike
//! hyper, a head that does not arrive whole in one peek goes to hyper
//! rather than being waited for here.

mod answer;
mod head;
mod socket;

pub(crate) use answer::chunk_size;
pub(crate) use socket::{Owed, Watch};

use std::future::{poll_fn, Future};
use std::pin::{pin, Pin};
use std::task::Poll;
use std::time::Duration;

use bytes::{Buf, Bytes};
use http::{Request, Response};
use http_body::Body;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;

use crate::detached::{Detached, Offered, Slot};
use crate::drain::Member;
use crate::request_body::RequestBody;
use answer::Framing;
use head::Peeked;

/// How a connection on the light path ended.
pub enum Ended<F> {
    /// Its next request is not a tail: hyper serves it from here.
    Hyper(TcpStream),
    /// Closed, or handed over to its answer's holder ([`crate::detached`]).
    Closed,
    /// Its answer waits: the connection, the answer's future, and whether
    /// the client asked to close after it (for `crate::lot`).
    Parked(TcpStream, F, bool),
}

/// An answer: one being made, or one made already (a parked answer's,
/// taken up again; boxed, as a response inline would keep its room in the
/// connection's state for the connection's life).
enum Answer<F, B> {
    Making(F),
    Made(Option<Box<(Response<B>, bool)>>),
}

impl<F, B> Future for Answer<F, B>
where
    F: Future<Output = Response<B>> + Unpin,
    B: Unpin,
{
    type Output = Response<B>;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<Response<B>> {
        match self.get_mut() {
            Answer::Making(f) => Pin::new(f).poll(cx),
            Answer::Made(r) => Poll::Ready(r.take().expect("an answer is taken once").0),
        }
    }
}

/// Serves tails on `stream` for as long as they come. `stream` has bytes
/// to read (a request's start). The connection's place in the drain and
/// among `max_connections` go with it when it is detached (borrowed, not
/// moved in: a moved-in copy would keep room of its own in the
/// connection's state for its whole life).
///
/// An answer that is not there at its first poll parks: the connection
/// leaves this task with it ([`Ended::Parked`], `crate::lot`), and is
/// taken up again with the answer once it is there (`made`).
pub async fn serve<C, F, B>(
    stream: TcpStream,
    call: C,
    held: &mut Option<(Member, OwnedSemaphorePermit)>,
    made: Option<Box<(Response<B>, bool)>>,
    head_bytes: usize,
    keep_alive: Duration,
) -> Ended<F>
where
    C: Fn(Request<RequestBody>) -> F,
    F: Future<Output = Response<B>> + Unpin,
    B: Body + Unpin + Send + 'static,
    B::Data: Buf,
{
    let Some((member, _)) = held else {
        return close_now(stream);
    };
    let mut made = made;
    loop {
        // The request goes into the handler's call at once: a local that
        // lived on past an await would keep its room in the connection's
        // state for the connection's life.
        let (mut answer, close) = match made.take() {
            Some(made) => {
                let close = made.1;
                (Answer::Made(Some(made)), close)
            }
            None => match socket::take_head(&stream, head_bytes) {
                Ok(Some(Peeked::Tail { request, close, .. })) => {
                    let mut request = (*request).map(|()| RequestBody::Empty);
                    request.extensions_mut().insert(Offered);
                    (Answer::Making(call(request)), close)
                }
                Ok(Some(Peeked::Other)) => return Ended::Hyper(stream),
                // Ready, then nothing there after all: wait for the next bytes.
                Ok(None) => {
                    if next_request(&stream, member, keep_alive).await {
                        continue;
                    }
                    return close_now(stream);
                }
                Ok(Some(Peeked::Closed)) | Err(_) => return close_now(stream),
            },
        };
        // One look: an answer not there yet parks, with its connection.
        if let Answer::Making(f) = &mut answer {
            match poll_fn(|cx| Poll::Ready(Pin::new(&mut *f).poll(cx))).await {
                Poll::Ready(response) => answer = Answer::Made(Some(Box::new((response, close)))),
                Poll::Pending => {
                    let Answer::Making(f) = answer else {
                        unreachable!("matched above")
                    };
                    return Ended::Parked(stream, f, close);
                }
            }
        }
        match respond(&stream, answer, member, close).await {
            Next::Keep => {}
            Next::Close => return close_now(stream),
            Next::Detach(slot, body) => {
                if let Some((member, permit)) = held.take() {
                    slot.fill(Detached::new(stream, member, permit, body));
                }
                return Ended::Closed;
            }
        }
        if !next_request(&stream, member, keep_alive).await {
            return close_now(stream);
        }
    }
}

/// What follows an answer on the connection.
enum Next {
    /// The next request.
    Keep,
    /// Its close.
    Close,
    /// The answer's head is written; its holder writes the rest.
    Detach(Slot, Box<dyn Send>),
}

fn close_now<F>(stream: TcpStream) -> Ended<F> {
    // A socket the client reset has nothing left to shut.
    let _ = rustix::net::shutdown(&stream, rustix::net::Shutdown::Write);
    Ended::Closed
}

/// Waits for the client's next request: true once bytes (or its close)
/// arrive, false after `keep_alive` of silence or when the server drains.
async fn next_request(stream: &TcpStream, member: &mut Member, keep_alive: Duration) -> bool {
    let mut timer = pin!(tokio::time::sleep(keep_alive));
    poll_fn(|cx| {
        if member.should_close(cx) {
            return Poll::Ready(false);
        }
        match stream.poll_read_ready(cx) {
            Poll::Ready(ready) => return Poll::Ready(ready.is_ok()),
            Poll::Pending => {}
        }
        timer.as_mut().poll(cx).map(|()| false)
    })
    .await
}

/// Answers one request: waits for the handler's answer, writes its head
/// and streams its body (or hands the body over: [`crate::detached`]).
async fn respond<F, B>(stream: &TcpStream, answer: F, member: &Member, close: bool) -> Next
where
    F: Future<Output = Response<B>>,
    B: Body + Unpin + Send + 'static,
    B::Data: Buf,
{
    let mut watch = Watch::default();
    // In a block of its own: the answer's future is dropped as soon as it
    // has answered, not kept (with the handler's boxed state, 3 KiB) for
    // as long as its body streams; and the answer's parts, made into its
    // head here, keep no room in this state while the body streams.
    let (mut body, framing, close, head, detach) = {
        let answered = {
            let mut answer = pin!(answer);
            poll_fn(|cx| {
                if let Poll::Ready(response) = answer.as_mut().poll(cx) {
                    return Poll::Ready(Some(response));
                }
                if watch.left(stream, cx) {
                    return Poll::Ready(None);
                }
                Poll::Pending
            })
            .await
        };
        let Some(response) = answered else {
            return Next::Close;
        };
        let (mut parts, body) = response.into_parts();
        let detach = parts.extensions.remove::<Slot>();
        let exact = if detach.is_some() {
            None // streamed by its holder, in chunks
        } else if body.is_end_stream() {
            Some(0)
        } else {
            body.size_hint().exact()
        };
        let framing = answer::framing(parts.status, &parts.headers, exact);
        // Its holder writes chunks: an answer framed otherwise (a status
        // without a body, a declared length) is not handed over.
        let detach = detach.filter(|_| framing == Framing::Chunked);
        let close = close || detach.is_some() || answer::closes(&parts.headers) || member.closing();
        let date = httpdate::fmt_http_date(std::time::SystemTime::now());
        let head = answer::head(parts.status, &parts.headers, framing, close, &date);
        (body, framing, close, head, detach)
    };
    let mut owed = Some(Owed::bytes(Bytes::from(head)));
    let mut left = match framing {
        Framing::Length(n) => n,
        _ => 0,
    };
    let mut ended = framing == Framing::None || detach.is_some();
    let keep = poll_fn(|cx| loop {
        if let Some(o) = &mut owed {
            match o.poll_write(stream, cx) {
                Poll::Ready(Ok(())) => owed = None,
                Poll::Ready(Err(_)) => return Poll::Ready(false),
                Poll::Pending => return Poll::Ready(false).filter_left(watch.left(stream, cx)),
            }
        }
        if ended {
            return Poll::Ready(!close);
        }
        match pull(&mut body, cx, framing, &mut left) {
            Pulled::Owed(o, end) => {
                owed = Some(o);
                ended = end;
            }
            Pulled::Pending => return Poll::Ready(false).filter_left(watch.left(stream, cx)),
            // The body failed mid-answer, or its bytes would break its
            // framing: as hyper does, the connection ends without the
            // answer's end, so the client sees it cut.
            Pulled::Cut => return Poll::Ready(false),
        }
    })
    .await;
    match detach {
        // The head is out: the body's holder takes the connection (and the
        // body, with whatever it holds, for as long as the answer lasts).
        Some(slot) if owed.is_none() => Next::Detach(slot, Box::new(body)),
        _ if keep => Next::Keep,
        _ => Next::Close,
    }
}

/// A pending answer, ended early when its client left.
trait FilterLeft {
    fn filter_left(self, left: bool) -> Self;
}

impl FilterLeft for Poll<bool> {
    /// `self` (the end of the answer) if the client left, else pending.
    fn filter_left(self, left: bool) -> Poll<bool> {
        if left {
            self
        } else {
            Poll::Pending
        }
    }
}

/// Frames at least this large are written as they are, not copied.
const LARGE_FRAME: usize = 16 * 1024;

/// At most this much is gathered for one write.
const GATHER_BYTES: usize = 64 * 1024;

/// What the body has for the client now.
enum Pulled {
    /// Bytes to write, and whether the body ended with them.
    Owed(Owed, bool),
    Pending,
    Cut,
}

/// Takes every frame the body has ready, framed: small ones gathered into
/// one buffer (an SSE event comes as two frames, its data and its control
/// event, and each write is a system call for every reader of every
/// event), a large one as it is. `left`: bytes a sized answer still owes.
fn pull<B>(
    body: &mut B,
    cx: &mut std::task::Context<'_>,
    framing: Framing,
    left: &mut u64,
) -> Pulled
where
    B: Body + Unpin,
    B::Data: Buf,
{
    let mut gathered = Vec::new();
    let ended = loop {
        match std::pin::Pin::new(&mut *body).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let Ok(mut data) = frame.into_data() else {
                    continue; // trailers: HTTP/1.1 tails send none
                };
                let data = data.copy_to_bytes(data.remaining());
                if data.is_empty() {
                    continue;
                }
                match framing {
                    Framing::None => return Pulled::Cut,
                    Framing::Length(_) => match left.checked_sub(data.len() as u64) {
                        Some(l) => *left = l,
                        // More than it declared: the framing would lie.
                        None => return Pulled::Cut,
                    },
                    Framing::Chunked => {}
                }
                if gathered.is_empty() && data.len() >= LARGE_FRAME {
                    let owed = match framing {
                        Framing::Chunked => Owed::chunk(data),
                        _ => Owed::bytes(data),
                    };
                    return Pulled::Owed(owed, false);
                }
                if framing == Framing::Chunked {
                    let (size, n) = answer::chunk_size(data.len());
                    gathered.extend_from_slice(&size[..n]);
                    gathered.extend_from_slice(&data);
                    gathered.extend_from_slice(b"\r\n");
                } else {
                    gathered.extend_from_slice(&data);
                }
                if gathered.len() >= GATHER_BYTES {
                    break false;
                }
            }
            Poll::Ready(Some(Err(_))) => return Pulled::Cut,
            Poll::Ready(None) => {
                match framing {
                    Framing::Chunked => gathered.extend_from_slice(b"0\r\n\r\n"),
                    // Fewer bytes than it declared: the client would wait
                    // for the rest.
                    Framing::Length(_) if *left > 0 => return Pulled::Cut,
                    _ => {}
                }
                break true;
            }
            Poll::Pending if gathered.is_empty() => return Pulled::Pending,
            Poll::Pending => break false,
        }
    };
    Pulled::Owed(Owed::bytes(Bytes::from(gathered)), ended)
}
