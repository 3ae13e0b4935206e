//! Request ids: every request gets one, a valid incoming `X-Request-Id`
//! (1 to 128 bytes of letters, digits and `-_.:/+=@`) or a new one (32 hex
//! digits: a random prefix per process and a counter). The id is echoed in
//! the answer's `X-Request-Id`, put into the error body
//! (`error.request_id`), added to every log line the request's task
//! writes (`logging`: at the end of a text line, first in a JSON one), and sent on by a server that asks another on the
//! request's behalf (the edge to its origin, a follower to the owner), with
//! the W3C `traceparent` the client sent.
//!
//! It lives beside the request's future, with the request's arrival (its
//! duration in `/metrics` counts from there), and is current while that
//! future is polled (`scope`): no span to create and no extension to
//! insert per request. A task a request spawns (an SSE tail's writer) is
//! outside it: those tasks log nothing today, and a context of its own
//! would cost every open tail ~200 bytes (decision 0020 counts a reader's
//! bytes).

use std::future::Future;
use std::hash::{BuildHasher, Hasher};
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::OnceLock;

use http::{HeaderMap, HeaderName, HeaderValue};

/// The header.
pub const HEADER: HeaderName = HeaderName::from_static("x-request-id");

/// The W3C trace context header, passed on as it came.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// The longest incoming id kept (a longer one is replaced).
pub const MAX_LEN: usize = 128;

/// What a request carries through its task.
#[derive(Clone, Debug)]
pub struct RequestContext {
    pub id: HeaderValue,
    pub traceparent: Option<HeaderValue>,
    /// When its head was read (tokio's clock, so paused-clock tests drive
    /// it).
    pub arrived: tokio::time::Instant,
    /// Who sent it (set by the accept loop; none for a request that came
    /// another way). Kept here rather than in the request's extensions:
    /// the first extension allocates a map and a box for each request
    /// (~340 instructions an append, 1.3 % of its cost), this is moved in
    /// with the rest of the context.
    pub client: Option<crate::Client>,
}

mod scope;

use scope::{with, Scoped};

fn valid(v: &[u8]) -> bool {
    !v.is_empty()
        && v.len() <= MAX_LEN
        && v.iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/+=@".contains(b))
}

/// A new id: a random prefix per process, then this thread's number and
/// its own count (a counter shared by the threads would move its cache
/// line between the cores on every request). The prefix is written out
/// once per thread: a new id renders only its count.
pub fn generate() -> HeaderValue {
    static PREFIX: OnceLock<[u8; 16]> = OnceLock::new();
    static THREADS: AtomicU64 = AtomicU64::new(0);
    thread_local! {
        static NEXT: std::cell::Cell<u64> =
            std::cell::Cell::new(THREADS.fetch_add(1, Relaxed) << 40);
    }
    let prefix = PREFIX.get_or_init(|| {
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u128(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.write_u32(std::process::id());
        hex16(h.finish())
    });
    let n = NEXT.with(|c| {
        let n = c.get();
        c.set(n.wrapping_add(1));
        n
    });
    let mut id = [0u8; 32];
    id[..16].copy_from_slice(prefix);
    id[16..].copy_from_slice(&hex16(n));
    // Owned behind a count from the start: the echo's copy of it (and any
    // other) is a count, not another allocation.
    HeaderValue::from_maybe_shared(bytes::Bytes::from_owner(id)).expect("hex is a header value")
}

/// `word` as 16 lowercase hex digits.
fn hex16(word: u64) -> [u8; 16] {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = [0u8; 16];
    for (i, pair) in word.to_be_bytes().iter().enumerate() {
        out[2 * i] = DIGITS[usize::from(pair >> 4)];
        out[2 * i + 1] = DIGITS[usize::from(pair & 0xf)];
    }
    out
}

/// The context of a request with these headers: its own valid id or a new
/// one, and its `traceparent` (at most [`MAX_LEN`] bytes).
pub fn from_headers(headers: &HeaderMap) -> RequestContext {
    // One pass over the few headers a request has, rather than a hashed
    // look-up of each name.
    let (mut id, mut traceparent) = (None, None);
    // The first of each, as a look-up would find.
    for (name, value) in headers {
        if *name == HEADER {
            id = id.or(Some(value));
        } else if *name == TRACEPARENT {
            traceparent = traceparent.or(Some(value));
        }
    }
    RequestContext {
        id: id
            .filter(|v| valid(v.as_bytes()))
            .cloned()
            .unwrap_or_else(generate),
        traceparent: traceparent.filter(|v| v.len() <= MAX_LEN).cloned(),
        arrived: tokio::time::Instant::now(),
        client: None,
    }
}

/// Runs `fut` as the request `ctx`.
pub fn scope<F: Future>(ctx: RequestContext, fut: F) -> impl Future<Output = F::Output> {
    Scoped::new(ctx, Box::pin(fut))
}

/// Runs `answer` (boxed: see `accept`) as the request `ctx`, and echoes the
/// id on the answer it gives (moved out of the context as it ends: no copy
/// of it made).
pub fn answered<F>(ctx: RequestContext, answer: F) -> Answered<F> {
    Answered {
        scoped: Scoped::new(ctx, answer),
    }
}

/// A request's answer being made, as the request's context (a type with a
/// name: a waiting one is kept where it waits, `crate::lot`).
pub struct Answered<F> {
    scoped: Scoped<F>,
}

impl<B, F> Future for Answered<F>
where
    F: Future<Output = http::Response<B>> + Unpin,
{
    type Output = http::Response<B>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<http::Response<B>> {
        let scoped = &mut self.get_mut().scoped;
        let mut resp = std::task::ready!(std::pin::Pin::new(&mut *scoped).poll(cx));
        if let Some(ctx) = scoped.take_context() {
            // An answer built from a template may hold the id's slot
            // already: filled in place, the map does not grow.
            match resp.headers_mut().get_mut(HEADER) {
                Some(slot) => *slot = ctx.id,
                None => {
                    resp.headers_mut().insert(HEADER, ctx.id);
                }
            }
        }
        std::task::Poll::Ready(resp)
    }
}

/// The current request's context, inside [`scope`].
pub fn current() -> Option<RequestContext> {
    with(RequestContext::clone)
}

/// When the current request arrived (now, outside [`scope`]: a request
/// that came another way, such as a test's).
pub fn arrived() -> tokio::time::Instant {
    with(|c| c.arrived).unwrap_or_else(tokio::time::Instant::now)
}

/// Who sent the current request, inside [`scope`] of one the accept loop
/// took.
pub fn client() -> Option<crate::Client> {
    with(|c| c.client.clone()).flatten()
}

/// The current request's id as text, inside [`scope`].
pub fn current_id() -> Option<String> {
    with(|c| c.id.to_str().ok().map(str::to_owned)).flatten()
}

/// Puts the current request's id and `traceparent` on a request this
/// server sends on its behalf (in place of what a forwarded client
/// request named: its id may have been invalid, and replaced).
pub fn pass_on(headers: &mut HeaderMap) {
    if let Some(ctx) = current() {
        headers.insert(HEADER, ctx.id);
        match ctx.traceparent {
            Some(t) => {
                headers.insert(TRACEPARENT, t);
            }
            None => {
                headers.remove(TRACEPARENT);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_incoming_id_is_kept_and_anything_else_replaced() {
        let mut h = HeaderMap::new();
        h.insert(&HEADER, HeaderValue::from_static("abc-123_x.y:z"));
        assert_eq!(from_headers(&h).id, "abc-123_x.y:z");
        for bad in ["", "has space", "quote\"", &"x".repeat(MAX_LEN + 1)] {
            let mut h = HeaderMap::new();
            h.insert(&HEADER, HeaderValue::from_str(bad).unwrap());
            let id = from_headers(&h).id;
            assert_ne!(id, bad);
            assert_eq!(id.len(), 32, "a new id replaces {bad:?}");
        }
        let (a, b) = (generate(), generate());
        assert_ne!(a, b);
        assert!(a.as_bytes().iter().all(u8::is_ascii_hexdigit));
        // This thread's count is the last digits: its ids differ by one.
        let n = |v: &HeaderValue| u64::from_str_radix(&v.to_str().unwrap()[16..], 16).unwrap();
        assert_eq!(n(&b), n(&a) + 1);
    }

    #[tokio::test]
    async fn the_echo_fills_an_answers_slot_or_adds_one() {
        for slot in [true, false] {
            let mut h = HeaderMap::new();
            h.insert(&HEADER, HeaderValue::from_static("req-9"));
            let mut resp = http::Response::new(());
            if slot {
                resp.headers_mut()
                    .insert(&HEADER, HeaderValue::from_static(""));
            }
            let resp = answered(from_headers(&h), std::future::ready(resp)).await;
            let ids: Vec<_> = resp.headers().get_all(&HEADER).iter().collect();
            assert_eq!(ids, ["req-9"], "with a slot: {slot}");
        }
    }

    #[tokio::test]
    async fn the_context_is_the_tasks_and_is_passed_on() {
        assert!(current().is_none());
        let mut h = HeaderMap::new();
        h.insert(&HEADER, HeaderValue::from_static("req-1"));
        h.insert(&TRACEPARENT, HeaderValue::from_static("00-abc-def-01"));
        let ctx = from_headers(&h);
        let out = scope(ctx, async {
            tokio::task::yield_now().await;
            let mut sent = HeaderMap::new();
            pass_on(&mut sent);
            (current_id(), sent)
        })
        .await;
        assert_eq!(out.0.as_deref(), Some("req-1"));
        assert_eq!(out.1[&HEADER], "req-1");
        assert_eq!(out.1[&TRACEPARENT], "00-abc-def-01");
        assert!(current().is_none());
    }
}
