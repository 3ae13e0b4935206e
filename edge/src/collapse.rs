//! Long-poll collapsing: every reader waiting with the same key (see
//! `core::collapse_key`) shares one upstream long-poll.
//!
//! Modeled on a cache lock. The first reader of a key starts one *flight*:
//! an upstream request run as a task of its own, so the reader that started
//! it may leave without cancelling it for the rest. Every later reader of
//! the key joins the flight and waits for its answer. When the answer comes
//! the flight leaves the table (a reader arriving after that starts a new
//! one, since the answer it would get may have changed) and every waiter
//! gets a copy that shares the body's bytes.
//!
//! Bounds: at most `max_waiters` readers wait at once (one more answers
//! 503); a flight lasts at most the bound it was started with (the
//! long-poll's timeout plus a grace), then lands as timed out, so every
//! waiter answers 503 by then, none later than its own bound (a later
//! waiter joined a flight started earlier); when the flight fails or its
//! task dies, every waiter gets the failure at once (it is never
//! stranded); when the last waiter leaves before the answer, the flight is
//! cancelled and leaves the table; when the edge shuts down
//! ([`CollapseTable::close`]), every flight lands as closing and no new
//! one starts.
//!
//! What a waiter costs (decision 0020: a parked long-poll's whole cost is to stay
//! under 2 KiB): its [`Waiter`] (48 bytes, waited on in place by a
//! hand-written poll, not a future with a timer and a channel's wait of
//! its own: those made a parked long-poll's future 504 bytes larger), one
//! waker slot in its flight (16 bytes), and a table slot count. 10,000
//! waiters on one stream cost one upstream request and that much each.
//!
//! The same table collapses SSE readers' catch-up reads ([`Counted::Reads`]):
//! readers arriving together (a thousand browsers opening `offset=now` at
//! once) make one upstream read of the same range, not one each. Sharing
//! an answer among requests in flight at the same moment is exact: the
//! origin gave it within each of their lifetimes, and the read carries no
//! header of the reader's but its `Accept`, which is in the key.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use parking_lot::Mutex;
use shell::waker_set::{self, Slot, WakerSet};
use tokio::task::AbortHandle;

use crate::answer::Answer;
use crate::metrics::{Gauge, Metrics};
use crate::upstream::UpstreamError;

/// What a flight ends with, shared by every waiter: the answer and when it
/// arrived (a waiter's delivery lag counts from there), or why there is
/// none.
type Outcome = Result<(Arc<Answer>, std::time::Instant), WaitError>;

/// Why a waiter got no answer.
#[derive(Clone, Debug, thiserror::Error)]
pub enum WaitError {
    #[error("too many long-polls are waiting at this edge")]
    Full,
    #[error("the origin did not answer the shared long-poll in time")]
    TimedOut,
    #[error("the shared long-poll failed")]
    Upstream(#[source] Arc<UpstreamError>),
    /// The flight's task ended without an answer (it panicked).
    #[error("the shared long-poll ended without an answer")]
    Abandoned,
    #[error("the edge is shutting down")]
    Closing,
}

struct Flight {
    key: Arc<str>,
    state: Mutex<FlightState>,
    task: Mutex<Option<AbortHandle>>,
}

struct FlightState {
    /// Set once, by whichever comes first: the answer, the failure, the
    /// bound, the shutdown.
    outcome: Option<Outcome>,
    /// Waiters still waiting (changed under the table's lock).
    waiters: usize,
    /// The waker of each waiter that polled (emptied when it leaves; all
    /// taken and woken when the flight lands).
    wakers: WakerSet,
}

impl Flight {
    /// Sets the outcome unless one is set; wakes every waiter.
    fn settle(&self, outcome: Outcome) {
        let wakers = {
            let mut st = self.state.lock();
            if st.outcome.is_some() {
                return;
            }
            st.outcome = Some(outcome);
            st.wakers.take()
        };
        waker_set::wake_all(wakers);
    }

    /// Stops the flight's task, if it still runs.
    fn abort(&self) {
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
    }
}

/// What a table's waiters count in the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// Parked long-polls: the waiting and flight gauges, the collapse
    /// counter and the waiters-per-flight histogram.
    LongPolls,
    /// SSE readers' catch-up reads: only the reads that joined a flight.
    Reads,
}

impl Counted {
    /// Counts a waiter for as long as it waits (long-polls only).
    fn waiting(self, m: &Arc<Metrics>) -> Option<Gauge> {
        (self == Counted::LongPolls).then(|| m.waiter_guard())
    }

    /// Counts a flight for as long as it flies (long-polls only).
    fn flying(self, m: &Arc<Metrics>) -> Option<Gauge> {
        (self == Counted::LongPolls).then(|| m.flight_guard())
    }

    /// A waiter joined a flight someone else started.
    fn joined(self, m: &Metrics) {
        match self {
            Counted::LongPolls => m.collapsed(),
            Counted::Reads => m.sse_read_collapsed(),
        }
    }

    /// A flight landed with `waiters` on it (long-polls only).
    fn landed(self, m: &Metrics, waiters: usize) {
        if self == Counted::LongPolls {
            m.flight_landed(waiters);
        }
    }
}

pub struct CollapseTable {
    /// The flights in the air; `None` once the table is closed.
    flights: Mutex<Option<HashMap<Arc<str>, Arc<Flight>>>>,
    waiting: Mutex<usize>,
    max_waiters: usize,
    metrics: Arc<Metrics>,
    counted: Counted,
}

impl CollapseTable {
    pub fn new(max_waiters: usize, metrics: Arc<Metrics>) -> Arc<CollapseTable> {
        Self::counting(max_waiters, metrics, Counted::LongPolls)
    }

    pub fn counting(
        max_waiters: usize,
        metrics: Arc<Metrics>,
        counted: Counted,
    ) -> Arc<CollapseTable> {
        Arc::new(CollapseTable {
            flights: Mutex::new(Some(HashMap::new())),
            waiting: Mutex::new(0),
            max_waiters,
            metrics,
            counted,
        })
    }

    /// A place among the waiters for a long-poll that joins no flight (one
    /// only the origin can admit, forwarded as it came: `http::forward`),
    /// held until the [`Held`] is dropped; `Full` past `max_waiters`.
    pub fn hold(self: &Arc<Self>) -> Result<Held, WaitError> {
        let mut waiting = self.waiting.lock();
        if *waiting >= self.max_waiters {
            return Err(WaitError::Full);
        }
        *waiting += 1;
        Ok(Held {
            table: Arc::clone(self),
            _gauge: self.counted.waiting(&self.metrics),
        })
    }

    /// Flights in the table (for tests and metrics).
    pub fn flights(&self) -> usize {
        self.flights.lock().as_ref().map_or(0, HashMap::len)
    }

    /// Joins the flight of `key`, starting it with `fetch` when there is
    /// none; a flight started here lasts at most `bound`. `fetch` runs only
    /// for the reader that starts the flight.
    pub fn join<F>(
        self: &Arc<Self>,
        key: String,
        bound: Duration,
        fetch: impl FnOnce() -> F,
    ) -> Result<Waiter, WaitError>
    where
        F: Future<Output = Result<Answer, UpstreamError>> + Send + 'static,
    {
        {
            let mut waiting = self.waiting.lock();
            if *waiting >= self.max_waiters {
                return Err(WaitError::Full);
            }
            *waiting += 1;
        }
        let gauge = self.counted.waiting(&self.metrics);
        let mut guard = self.flights.lock();
        let Some(flights) = guard.as_mut() else {
            drop(guard);
            *self.waiting.lock() -= 1;
            return Err(WaitError::Closing);
        };
        if let Some(flight) = flights.get(key.as_str()) {
            flight.state.lock().waiters += 1;
            self.counted.joined(&self.metrics);
            return Ok(Waiter {
                table: Arc::clone(self),
                flight: Arc::clone(flight),
                slot: Slot::default(),
                _gauge: gauge,
            });
        }
        let key: Arc<str> = key.into();
        let flight = Arc::new(Flight {
            key: Arc::clone(&key),
            state: Mutex::new(FlightState {
                outcome: None,
                waiters: 1,
                wakers: WakerSet::default(),
            }),
            task: Mutex::new(None),
        });
        flights.insert(key, Arc::clone(&flight));
        let fut = fetch();
        // The upstream request is made for the waiter that started it: it
        // carries that request's id.
        let ctx = shell::request_id::current();
        let landing = Landing {
            table: Arc::clone(self),
            flight: Arc::clone(&flight),
            landed: false,
            _counted: self.counted.flying(&self.metrics),
        };
        let task = tokio::spawn(async move {
            let fut = tokio::time::timeout(bound, fut);
            let answered = match ctx {
                Some(ctx) => shell::request_id::scope(ctx, fut).await,
                None => fut.await,
            };
            let outcome = match answered {
                Ok(Ok(a)) => Ok((Arc::new(a), std::time::Instant::now())),
                Ok(Err(e)) => Err(WaitError::Upstream(Arc::new(e))),
                Err(_) => Err(WaitError::TimedOut),
            };
            landing.land(outcome);
        });
        *flight.task.lock() = Some(task.abort_handle());
        drop(guard);
        Ok(Waiter {
            table: Arc::clone(self),
            flight,
            slot: Slot::default(),
            _gauge: gauge,
        })
    }

    /// The edge shuts down: every flight lands as closing (its waiters
    /// answer at once), and no reader joins one from now on.
    pub fn close(&self) {
        let Some(flights) = self.flights.lock().take() else {
            return;
        };
        for flight in flights.into_values() {
            flight.settle(Err(WaitError::Closing));
            flight.abort();
        }
    }

    /// A waiter left: the last one to leave before the answer cancels the
    /// flight (under the table's lock, so no reader joins it meanwhile).
    fn leave(&self, flight: &Arc<Flight>, slot: &mut Slot) {
        *self.waiting.lock() -= 1;
        let mut flights = self.flights.lock();
        let mut st = flight.state.lock();
        st.waiters -= 1;
        st.wakers.remove(slot);
        if st.waiters == 0 && st.outcome.is_none() {
            remove(&mut flights, flight);
            drop(st);
            drop(flights);
            flight.abort();
        }
    }
}

fn remove(flights: &mut Option<HashMap<Arc<str>, Arc<Flight>>>, flight: &Arc<Flight>) {
    let Some(flights) = flights else {
        return;
    };
    if flights
        .get(&flight.key)
        .is_some_and(|f| Arc::ptr_eq(f, flight))
    {
        flights.remove(&flight.key);
    }
}

/// Owned by a flight's task: lands the outcome, or, when the task dies
/// without one, tells every waiter so.
struct Landing {
    table: Arc<CollapseTable>,
    flight: Arc<Flight>,
    landed: bool,
    _counted: Option<Gauge>,
}

impl Landing {
    /// Takes the flight out of the table (a later reader starts a new one),
    /// then tells every waiter.
    fn land(mut self, outcome: Outcome) {
        self.landed = true;
        remove(&mut self.table.flights.lock(), &self.flight);
        let waiters = self.flight.state.lock().waiters;
        self.table.counted.landed(&self.table.metrics, waiters);
        self.flight.settle(outcome);
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        if !self.landed {
            remove(&mut self.table.flights.lock(), &self.flight);
            self.flight.settle(Err(WaitError::Abandoned));
        }
    }
}

/// One reader waiting for a flight's answer.
pub struct Waiter {
    table: Arc<CollapseTable>,
    flight: Arc<Flight>,
    /// Its place among the flight's wakers.
    slot: Slot,
    _gauge: Option<Gauge>,
}

impl Waiter {
    /// The shared answer and when it arrived, once the flight lands.
    pub fn poll_wait(
        &mut self,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(Arc<Answer>, std::time::Instant), WaitError>> {
        let mut st = self.flight.state.lock();
        let st = &mut *st;
        let Some(outcome) = &st.outcome else {
            st.wakers.register(&mut self.slot, cx.waker());
            return Poll::Pending;
        };
        Poll::Ready(outcome.clone())
    }

    /// Waits for the shared answer (borrowed: a waiter moved in would be
    /// copied into the waiting future; it leaves its flight when dropped).
    pub async fn wait(&mut self) -> Result<(Arc<Answer>, std::time::Instant), WaitError> {
        std::future::poll_fn(|cx| self.poll_wait(cx)).await
    }
}

/// A waiter's place without a flight ([`CollapseTable::hold`]).
pub struct Held {
    table: Arc<CollapseTable>,
    _gauge: Option<Gauge>,
}

impl Drop for Held {
    fn drop(&mut self) {
        *self.table.waiting.lock() -= 1;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.table.leave(&self.flight, &mut self.slot);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http::{HeaderMap, StatusCode};
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn answer(body: &'static str) -> Answer {
        Answer {
            status: StatusCode::OK,
            headers: HeaderMap::new(),
            body: Bytes::from_static(body.as_bytes()),
        }
    }

    fn never() -> std::future::Pending<Result<Answer, UpstreamError>> {
        std::future::pending()
    }

    const BOUND: Duration = Duration::from_secs(60);

    fn table(max: usize) -> Arc<CollapseTable> {
        CollapseTable::new(max, Arc::new(Metrics::default()))
    }

    #[tokio::test]
    async fn one_fetch_for_many_waiters() {
        let t = table(100);
        let fetches = Arc::new(AtomicUsize::new(0));
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let mut released = Some(released);
        let mut waiters = Vec::new();
        for _ in 0..50 {
            let fetches = fetches.clone();
            let gate = released.take();
            waiters.push(
                t.join("k".into(), BOUND, move || async move {
                    fetches.fetch_add(1, Ordering::SeqCst);
                    if let Some(g) = gate {
                        let _ = g.await;
                    }
                    Ok(answer("x"))
                })
                .unwrap(),
            );
        }
        assert_eq!(t.flights(), 1);
        release.send(()).unwrap();
        for mut w in waiters {
            let (a, _) = w.wait().await.unwrap();
            assert_eq!(&a.body[..], b"x");
        }
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        assert_eq!(t.flights(), 0);
        assert_eq!(*t.waiting.lock(), 0);
    }

    #[tokio::test]
    async fn reads_collapse_alike_and_count_apart_from_long_polls() {
        let metrics = Arc::new(Metrics::default());
        let t = CollapseTable::counting(100, Arc::clone(&metrics), Counted::Reads);
        let (release, released) = tokio::sync::oneshot::channel::<()>();
        let first = t
            .join("r".into(), BOUND, move || async move {
                let _ = released.await;
                Ok(answer("now"))
            })
            .unwrap();
        let joined: Vec<_> = (0..9)
            .map(|_| {
                t.join("r".into(), BOUND, || async {
                    unreachable!("joined, not started")
                })
                .unwrap()
            })
            .collect();
        assert_eq!(t.flights(), 1);
        release.send(()).unwrap();
        for mut w in std::iter::once(first).chain(joined) {
            let (a, _) = w.wait().await.unwrap();
            assert_eq!(&a.body[..], b"now");
        }
        // Nine joined; no long-poll was counted.
        assert_eq!(metrics.collapsed_counts(), (0, 9));
        let mut e = shell::metrics::Exposition::default();
        metrics.expose(
            crate::metrics::Sampled {
                cache_weighted_bytes: 0,
                cache_entries: 0,
                feed_live: true,
            },
            &mut e,
        );
        let text = e.render();
        for series in [
            "ds_edge_long_polls_waiting 0",
            "ds_edge_long_poll_flights 0",
        ] {
            assert!(text.contains(series), "{series} in\n{text}");
        }
        // A flight that landed is gone: the next reader starts anew.
        assert_eq!(t.flights(), 0);
    }

    #[tokio::test]
    async fn last_waiter_leaving_cancels_the_flight() {
        let t = table(100);
        let a = t
            .join("k".into(), BOUND, || {
                std::future::pending::<Result<Answer, UpstreamError>>()
            })
            .unwrap();
        let b = t
            .join("k".into(), BOUND, || async {
                unreachable!("joined, not started")
            })
            .unwrap();
        drop(a);
        assert_eq!(t.flights(), 1, "one waiter is left");
        drop(b);
        assert_eq!(t.flights(), 0);
        assert_eq!(*t.waiting.lock(), 0);
    }

    #[tokio::test]
    async fn waiters_are_bounded() {
        let t = table(2);
        let _a = t
            .join("a".into(), BOUND, || {
                std::future::pending::<Result<Answer, UpstreamError>>()
            })
            .unwrap();
        let _b = t
            .join("b".into(), BOUND, || {
                std::future::pending::<Result<Answer, UpstreamError>>()
            })
            .unwrap();
        assert!(matches!(
            t.join("c".into(), BOUND, never),
            Err(WaitError::Full)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_is_never_stranded() {
        let t = table(10);
        // The fetch panics: every waiter learns at once.
        let mut w = t
            .join("p".into(), BOUND, || async { panic!("fetch died") })
            .unwrap();
        assert!(matches!(w.wait().await, Err(WaitError::Abandoned)));
        // The origin never answers: the bound ends the wait.
        let mut w = t
            .join("q".into(), Duration::from_secs(3), || {
                std::future::pending::<Result<Answer, UpstreamError>>()
            })
            .unwrap();
        assert!(matches!(w.wait().await, Err(WaitError::TimedOut)));
        drop(w);
        assert_eq!(t.flights(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_flight_bounds_every_waiter_by_its_start() {
        let t = table(10);
        let mut first = t
            .join("b".into(), Duration::from_secs(3), || {
                std::future::pending::<Result<Answer, UpstreamError>>()
            })
            .unwrap();
        tokio::time::sleep(Duration::from_secs(2)).await;
        // Joined later with a longer bound of its own: the flight's ends
        // its wait too, a second later.
        let mut later = t
            .join("b".into(), Duration::from_secs(30), || async {
                unreachable!("joined, not started")
            })
            .unwrap();
        let started = tokio::time::Instant::now();
        assert!(matches!(later.wait().await, Err(WaitError::TimedOut)));
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        assert!(matches!(first.wait().await, Err(WaitError::TimedOut)));
        drop((first, later));
        assert_eq!(t.flights(), 0);
        assert_eq!(*t.waiting.lock(), 0);
    }

    #[tokio::test]
    async fn closing_answers_every_waiter_and_refuses_new_ones() {
        let t = table(10);
        let mut waiters: Vec<Waiter> = (0..3)
            .map(|_| {
                t.join("c".into(), BOUND, || {
                    std::future::pending::<Result<Answer, UpstreamError>>()
                })
                .unwrap()
            })
            .collect();
        // One has polled (its waker is in the flight), two have not.
        {
            let mut polled = std::pin::pin!(waiters[0].wait());
            assert!(futures::poll!(polled.as_mut()).is_pending());
            t.close();
            assert!(matches!(polled.await, Err(WaitError::Closing)));
        }
        for w in &mut waiters[1..] {
            assert!(matches!(w.wait().await, Err(WaitError::Closing)));
        }
        assert!(matches!(
            t.join("d".into(), BOUND, never),
            Err(WaitError::Closing)
        ));
        drop(waiters);
        assert_eq!(t.flights(), 0);
        assert_eq!(*t.waiting.lock(), 0);
    }
}
