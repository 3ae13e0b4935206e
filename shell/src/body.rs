//! Request bodies that cannot hold a server's memory or a connection by
//! going silent: a body that sends no frame for `body_idle_timeout` ends in
//! a [`BodyIdle`] error. Origin and edge answer it with 408 and drop what
//! the body held (the origin its room in the ingress budget, the edge the
//! write it was forwarding).
//!
//! A timer is armed only when a frame is not there at once, so a small
//! append whose body arrives with its head never touches the timer wheel.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::{Body, Frame, SizeHint};
use tokio::time::{Instant, Sleep};

/// The error a body ends in after it was silent too long.
#[derive(Debug, thiserror::Error)]
#[error("the request body sent nothing for {0:?}")]
pub struct BodyIdle(pub Duration);

impl BodyIdle {
    /// The idle error behind a body error, however many layers wrap it.
    pub fn find<'a>(error: &'a (dyn std::error::Error + 'static)) -> Option<&'a BodyIdle> {
        let mut e = Some(error);
        while let Some(err) = e {
            if let Some(idle) = err.downcast_ref::<BodyIdle>() {
                return Some(idle);
            }
            e = err.source();
        }
        None
    }
}

/// `inner`, ending in [`BodyIdle`] once it sends nothing for `idle`.
pub struct IdleBody<B> {
    inner: B,
    idle: Duration,
    /// Armed the first time a frame is not there at once; re-armed (not
    /// reallocated) after each frame that arrives.
    timer: Option<Pin<Box<Sleep>>>,
    /// A frame arrived since the timer was last armed.
    stale: bool,
}

impl<B> IdleBody<B> {
    pub fn new(inner: B, idle: Duration) -> IdleBody<B> {
        IdleBody {
            inner,
            idle,
            timer: None,
            stale: false,
        }
    }
}

impl<B> Body for IdleBody<B>
where
    B: Body + Unpin,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    type Data = B::Data;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<B::Data>, Self::Error>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.stale = true;
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                let deadline = Instant::now() + this.idle;
                let timer = match &mut this.timer {
                    Some(t) => {
                        if std::mem::take(&mut this.stale) {
                            t.as_mut().reset(deadline);
                        }
                        t
                    }
                    None => {
                        this.stale = false;
                        this.timer
                            .insert(Box::pin(tokio::time::sleep_until(deadline)))
                    }
                };
                match timer.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyIdle(this.idle))))),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::BodyExt;
    use tokio::sync::mpsc;

    /// A body whose frames a test sends when it likes.
    struct Channel(mpsc::Receiver<Bytes>);

    impl Body for Channel {
        type Data = Bytes;
        type Error = std::io::Error;
        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
            self.0.poll_recv(cx).map(|b| b.map(|b| Ok(Frame::data(b))))
        }
    }

    fn body() -> (mpsc::Sender<Bytes>, IdleBody<Channel>) {
        let (tx, rx) = mpsc::channel(4);
        (tx, IdleBody::new(Channel(rx), Duration::from_secs(10)))
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_silent_for_the_timeout_ends_in_an_error() {
        let (tx, mut body) = body();
        let started = Instant::now();
        let err = body.frame().await.expect("an end").expect_err("idle");
        assert!(BodyIdle::find(&*err).is_some());
        assert_eq!(started.elapsed(), Duration::from_secs(10));
        drop(tx);
    }

    #[tokio::test(start_paused = true)]
    async fn each_frame_restarts_the_timeout() {
        let (tx, mut body) = body();
        let started = Instant::now();
        for i in 0..5u8 {
            let send = tx.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_secs(9)).await;
                send.send(Bytes::from(vec![i])).await.unwrap();
            });
            let frame = body.frame().await.unwrap().unwrap();
            assert_eq!(frame.into_data().unwrap(), Bytes::from(vec![i]));
        }
        // 45 s of a body that never went 10 s without a frame.
        assert_eq!(started.elapsed(), Duration::from_secs(45));
        drop(tx);
        assert!(body.frame().await.is_none(), "the end, not a timeout");
    }

    #[test]
    fn the_idle_error_is_found_behind_wrappers() {
        #[derive(Debug, thiserror::Error)]
        #[error("wrapped")]
        struct Wrapper(#[source] BodyIdle);
        let e = Wrapper(BodyIdle(Duration::from_secs(1)));
        assert_eq!(BodyIdle::find(&e).unwrap().0, Duration::from_secs(1));
        let other = std::io::Error::other("no");
        assert!(BodyIdle::find(&other).is_none());
    }
}
