//! The request's context where the code its future runs can reach it: a
//! thread-local slot the context is moved into for each poll of the
//! request's future and moved back out of after it.
//!
//! Not tokio's `task_local!`: that one borrows a `RefCell` twice and swaps
//! the value in and out through a guard on every poll, ~500 instructions
//! per append request in the append benchmark (callgrind, decision 0021),
//! a quarter of the whole cost of metrics and request ids. Here a poll
//! moves one box pointer in and one out of a `Cell`; the box is made once
//! per request.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use super::RequestContext;

thread_local! {
    /// The context of the request whose future this thread is polling.
    static CURRENT: Cell<Option<Box<RequestContext>>> = const { Cell::new(None) };
}

/// Runs `f` on the current request's context, if this thread is polling
/// a request's future.
pub fn with<R>(f: impl FnOnce(&RequestContext) -> R) -> Option<R> {
    CURRENT.with(|slot| {
        let ctx = slot.take()?;
        let out = f(&ctx);
        slot.set(Some(ctx));
        Some(out)
    })
}

/// A future run as a request: its context is current while it is polled.
/// The future is `Unpin` (a boxed one: the request's handler is boxed
/// anyway, so that only a pointer moves).
pub struct Scoped<F> {
    /// `None` only while the future is being polled (it is in the slot
    /// then), after a panic there, or once taken.
    ctx: Option<Box<RequestContext>>,
    fut: F,
}

impl<F> Scoped<F> {
    pub fn new(ctx: RequestContext, fut: F) -> Scoped<F> {
        Scoped {
            ctx: Some(Box::new(ctx)),
            fut,
        }
    }

    /// The context, taken out (once the future is done with it).
    pub fn take_context(&mut self) -> Option<Box<RequestContext>> {
        self.ctx.take()
    }
}

/// Puts back what the slot held before a poll, and takes the request's
/// context out again, even if the poll panicked.
struct Entered<'a> {
    ctx: &'a mut Option<Box<RequestContext>>,
    before: Option<Box<RequestContext>>,
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        *self.ctx = CURRENT.with(|slot| slot.replace(self.before.take()));
    }
}

impl<F: Future + Unpin> Future for Scoped<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let before = CURRENT.with(|slot| slot.replace(this.ctx.take()));
        let entered = Entered {
            ctx: &mut this.ctx,
            before,
        };
        let out = Pin::new(&mut this.fut).poll(cx);
        drop(entered);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ctx(id: &'static str) -> RequestContext {
        RequestContext {
            id: HeaderValue::from_static(id),
            traceparent: None,
            arrived: tokio::time::Instant::now(),
            client: None,
        }
    }

    fn id() -> Option<String> {
        with(|c| c.id.to_str().unwrap().to_owned())
    }

    #[tokio::test]
    async fn current_only_inside_and_nested_scopes_restore_the_outer_one() {
        assert_eq!(id(), None);
        let outer = Scoped::new(
            ctx("outer"),
            Box::pin(async {
                tokio::task::yield_now().await;
                let before = id();
                let inner = Scoped::new(
                    ctx("inner"),
                    Box::pin(async {
                        tokio::task::yield_now().await;
                        id()
                    }),
                )
                .await;
                (before, inner, id())
            }),
        )
        .await;
        assert_eq!(
            outer,
            (
                Some("outer".to_owned()),
                Some("inner".to_owned()),
                Some("outer".to_owned())
            )
        );
        assert_eq!(id(), None);
    }

    #[tokio::test]
    async fn a_panicking_poll_leaves_no_context_behind() {
        let task = tokio::spawn(Scoped::new(
            ctx("boom"),
            Box::pin(async { panic!("inside the request") }),
        ));
        assert!(task.await.unwrap_err().is_panic());
        assert_eq!(id(), None);
    }
}
