//! The writer of one origin's log: one task that gathers the commits of
//! every partition it serves into one object per put (rule 1 of `tenure`).
//!
//! Appends wait in a queue; a put takes what waits (up to
//! `object_bytes`, after `commit_delay`), at the log's next number, with
//! up to `window` puts in flight. Puts are answered in number order, each
//! once it landed as the writer's own: the first that finds its number
//! taken (a fence) stops the log, and every append waiting or in flight,
//! of every partition, is refused. A release (rule 2) is put only when no
//! put is in flight, so every put holding the partition's frames was
//! acknowledged before it, and the partition's appends are refused from
//! then on.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::stream::FuturesOrdered;
use futures::StreamExt;
use object_store::ObjectStore;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::format::{LogId, LogObject, Section};
use super::read::settle_put;
use crate::region::object_wal::WalError;

/// The bounds of one origin's log writer.
#[derive(Clone, Debug)]
pub struct WriterConfig {
    /// Puts in flight at once.
    pub window: usize,
    /// Frame bytes one object carries at most; an append larger than this
    /// goes alone.
    pub object_bytes: usize,
    /// Appends waiting for a put; one more makes its caller wait.
    pub queue: usize,
    /// How long the oldest waiting append waits for others before its put
    /// starts (a put also starts at once when `object_bytes` wait).
    pub commit_delay: Duration,
}

impl WriterConfig {
    /// Its bounds made usable: at least one put in flight and one append
    /// waiting, a commit delay of at most a minute.
    pub fn checked(self) -> WriterConfig {
        WriterConfig {
            window: self.window.max(1),
            object_bytes: self.object_bytes.max(1),
            queue: self.queue.max(1),
            commit_delay: self.commit_delay.min(Duration::from_secs(60)),
        }
    }
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            window: 4,
            object_bytes: 8 << 20,
            queue: 16_384,
            commit_delay: Duration::from_millis(10),
        }
    }
}

type Reply = oneshot::Sender<Result<u64, WalError>>;

pub(super) enum Request {
    /// Frames to put, or a release: it waits for a put.
    Put(Item),
    /// The number from which the partition's frames may go (its tenure's
    /// first); refused while it is served.
    Reserve { partition: u32, reply: Reply },
    /// The partition's tenure is made: take its appends (refused once the
    /// log stopped: the claim then fails).
    Serve { partition: u32, reply: Reply },
}

/// One waiting item, in the order it came.
pub(super) enum Item {
    Frames {
        partition: u32,
        frames: Bytes,
        reply: Reply,
    },
    Release {
        partition: u32,
        reply: Reply,
    },
}

impl Item {
    pub(super) fn answer(self, answer: Result<u64, WalError>) {
        let (Item::Frames { reply, .. } | Item::Release { reply, .. }) = self;
        let _ = reply.send(answer);
    }
}

/// Shared with the handle: what the writer did.
#[derive(Default)]
pub(super) struct Counters {
    pub puts: AtomicU64,
    pub appends: AtomicU64,
    /// Every number of the log below it was answered as landed (puts are
    /// answered in number order).
    pub acknowledged: AtomicU64,
    /// The log stopped (a fence, or a put that did not settle): it serves
    /// nothing more, and this origin needs a new log to claim again.
    pub stopped: AtomicBool,
}

pub(super) struct Writer {
    pub store: Arc<dyn ObjectStore>,
    pub log: LogId,
    pub config: WriterConfig,
    pub stopping: Arc<AtomicBool>,
    pub counters: Arc<Counters>,
    /// Where puts are counted and timed (as a partition WAL's are).
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
}

/// A put's number, the appends it answers, the partitions it releases,
/// and whether it landed as the writer's own.
type Put = futures::future::BoxFuture<'static, (u64, Vec<Reply>, Vec<u32>, Result<bool, WalError>)>;

/// The writer's state between two events.
struct State {
    /// The number the next put takes.
    next: u64,
    serving: HashSet<u32>,
    /// Partitions whose release waits or is in flight: not claimed again
    /// before it lands (its walk would meet the missing release).
    releasing: HashSet<u32>,
    waiting: VecDeque<Item>,
    /// Frame bytes waiting (kept as items come and go, not summed).
    waiting_bytes: usize,
    /// When the oldest waiting item came (its commit delay runs from it).
    oldest: Option<Instant>,
    flight: FuturesOrdered<Put>,
    /// The number at which the log stopped, once it did.
    stopped: Option<u64>,
    /// The handle still sends requests.
    open: bool,
}

impl Writer {
    pub(super) async fn run(self, mut requests: mpsc::Receiver<Request>) {
        let mut st = State::new();
        loop {
            self.start_puts(&mut st);
            if !st.open && st.waiting.is_empty() && st.flight.is_empty() {
                return;
            }
            let deadline = self.deadline(&st);
            tokio::select! {
                request = requests.recv(), if st.open && st.waiting.len() < self.config.queue => {
                    match request {
                        Some(request) => st.take(request),
                        None => st.open = false,
                    }
                }
                Some((number, replies, released, outcome)) = st.flight.next(), if !st.flight.is_empty() => {
                    st.settle(number, replies, released, outcome, &self.counters);
                }
                _ = sleep_until(deadline), if deadline.is_some() => {}
            }
        }
    }

    /// Starts the puts that are due, while the window has room.
    fn start_puts(&self, st: &mut State) {
        while st.stopped.is_none() && st.flight.len() < self.config.window {
            let due = st
                .oldest
                .is_some_and(|t| t.elapsed() >= self.config.commit_delay)
                || st.waiting_bytes >= self.config.object_bytes
                || !st.open;
            let idle = st.flight.is_empty();
            let Some((sections, replies)) = due
                .then(|| take_batch(&mut st.waiting, idle, self.config.object_bytes))
                .flatten()
            else {
                return;
            };
            let taken: usize = sections.iter().map(|s| s.frames.len()).sum();
            st.waiting_bytes = st.waiting_bytes.saturating_sub(taken);
            // What is left waited as long: due at once.
            if st.waiting.is_empty() {
                st.oldest = None;
            }
            st.flight.push_back(self.put(st.next, sections, replies));
            st.next += 1;
        }
    }

    /// When the oldest waiting item's delay ends, if a put could start
    /// then: not with the window full, nor with a release waiting for the
    /// puts in flight.
    fn deadline(&self, st: &State) -> Option<Instant> {
        let blocked = st.flight.len() >= self.config.window
            || (matches!(st.waiting.front(), Some(Item::Release { .. })) && !st.flight.is_empty());
        st.oldest
            .filter(|_| !blocked && st.stopped.is_none())
            .map(|t| t + self.config.commit_delay)
    }

    /// Puts one object at `number` and settles whose it is.
    fn put(&self, number: u64, sections: Vec<Section>, replies: Vec<Reply>) -> Put {
        let released: Vec<u32> = sections
            .iter()
            .filter(|s| s.releases)
            .map(|s| s.partition)
            .collect();
        let object = LogObject {
            fence: false,
            put_id: rand::random(),
            sections,
        };
        let (store, log, stopping, counters, metrics) = (
            Arc::clone(&self.store),
            self.log,
            Arc::clone(&self.stopping),
            Arc::clone(&self.counters),
            self.metrics.clone(),
        );
        let bytes: usize = object.sections.iter().map(|s| s.frames.len()).sum();
        let appends = replies.len().saturating_sub(released.len());
        counters
            .appends
            .fetch_add(appends as u64, Ordering::Relaxed);
        Box::pin(async move {
            let started = std::time::Instant::now();
            let outcome = settle_put(&*store, &log, number, &object, &stopping)
                .await
                .map(|found| found.put_id == object.put_id && !found.fence);
            counters.puts.fetch_add(1, Ordering::Relaxed);
            if let Some(m) = &metrics {
                m.object_wal_puts.fetch_add(1, Ordering::Relaxed);
                m.object_wal_bytes
                    .fetch_add(bytes as u64, Ordering::Relaxed);
                let name = match &outcome {
                    Ok(true) => "ok",
                    Ok(false) => "fenced",
                    Err(_) => "error",
                };
                m.timings.object_request("wal_put", name, started.elapsed());
            }
            (number, replies, released, outcome)
        })
    }
}

impl State {
    fn new() -> State {
        State {
            next: 0,
            serving: HashSet::new(),
            releasing: HashSet::new(),
            waiting: VecDeque::new(),
            waiting_bytes: 0,
            oldest: None,
            flight: FuturesOrdered::new(),
            stopped: None,
            open: true,
        }
    }

    /// Takes one request from the handle.
    fn take(&mut self, request: Request) {
        match request {
            Request::Put(item) => {
                if let Some(number) = self.stopped {
                    return item.answer(Err(WalError::LogFenced { number }));
                }
                // Frames of a served partition wait; a release ends its
                // service now, and its later frames are refused.
                let served = match &item {
                    Item::Frames {
                        partition, frames, ..
                    } => {
                        let served = self.serving.contains(partition);
                        if served {
                            self.waiting_bytes = self.waiting_bytes.saturating_add(frames.len());
                        }
                        served.then_some(()).ok_or(*partition)
                    }
                    Item::Release { partition, .. } => {
                        let served = self.serving.remove(partition);
                        if served {
                            self.releasing.insert(*partition);
                        }
                        served.then_some(()).ok_or(*partition)
                    }
                };
                match served {
                    Ok(()) => {
                        self.oldest.get_or_insert_with(Instant::now);
                        self.waiting.push_back(item);
                    }
                    Err(partition) => item.answer(Err(WalError::NotServing { partition })),
                }
            }
            Request::Reserve { partition, reply } => {
                let answer = if let Some(number) = self.stopped {
                    Err(WalError::LogFenced { number })
                } else if self.serving.contains(&partition) || self.releasing.contains(&partition) {
                    Err(WalError::NotServing { partition })
                } else {
                    Ok(self.next)
                };
                let _ = reply.send(answer);
            }
            Request::Serve { partition, reply } => {
                let answer = match self.stopped {
                    Some(number) => Err(WalError::LogFenced { number }),
                    None => {
                        self.serving.insert(partition);
                        Ok(self.next)
                    }
                };
                let _ = reply.send(answer);
            }
        }
    }

    /// Answers the put at `number`, the next in number order: its appends
    /// are acknowledged if it landed as the writer's own and the log has
    /// not stopped; otherwise the log stops here, and every append waiting
    /// is refused with it.
    fn settle(
        &mut self,
        number: u64,
        replies: Vec<Reply>,
        released: Vec<u32>,
        outcome: Result<bool, WalError>,
        counters: &Counters,
    ) {
        let answer = match (self.stopped, outcome) {
            (Some(at), _) => Err(at),
            (None, Ok(true)) => {
                counters
                    .acknowledged
                    .fetch_max(number + 1, Ordering::Release);
                Ok(number)
            }
            (None, Ok(false)) => {
                tracing::warn!(
                    number,
                    "this origin's log met a fence: another origin took over; stopping it"
                );
                Err(number)
            }
            (None, Err(e)) => {
                tracing::warn!(number, error = %e, "a put of this origin's log did not settle; stopping it");
                Err(number)
            }
        };
        if let Err(at) = answer {
            counters.stopped.store(true, Ordering::Release);
            self.stopped = Some(at);
            self.serving.clear();
            for item in self.waiting.drain(..) {
                item.answer(Err(WalError::LogFenced { number: at }));
            }
            self.waiting_bytes = 0;
            self.oldest = None;
        }
        for p in released {
            self.releasing.remove(&p);
        }
        for reply in replies {
            let _ = reply.send(answer.map_err(|at| WalError::LogFenced { number: at }));
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    if let Some(at) = deadline {
        tokio::time::sleep_until(at).await;
    }
}

/// The next object's sections and the appends it answers: from the front,
/// frames up to `limit` bytes (at least one append). A release is taken
/// only first and only with nothing in flight (`idle`), and never in an
/// object that holds frames of its partition before it: the object ends
/// the tenure, so frames in it would not count.
fn take_batch(
    waiting: &mut VecDeque<Item>,
    idle: bool,
    limit: usize,
) -> Option<(Vec<Section>, Vec<Reply>)> {
    let mut sections: Vec<(u32, bool, BytesMut)> = Vec::new();
    let mut replies = Vec::new();
    let mut bytes = 0usize;
    while let Some(item) = waiting.front() {
        match item {
            Item::Release { .. } if !(idle && replies.is_empty()) => break,
            Item::Release { .. } => {}
            Item::Frames {
                partition, frames, ..
            } => {
                if !replies.is_empty() && bytes.saturating_add(frames.len()) > limit {
                    break;
                }
                let released_here = sections.iter().any(|s| s.0 == *partition && s.1);
                if released_here {
                    break;
                }
                bytes = bytes.saturating_add(frames.len());
            }
        }
        match waiting.pop_front().expect("looked at") {
            Item::Release { partition, reply } => {
                sections.push((partition, true, BytesMut::new()));
                replies.push(reply);
            }
            Item::Frames {
                partition,
                frames,
                reply,
            } => {
                match sections.iter_mut().find(|s| s.0 == partition && !s.1) {
                    Some(s) => s.2.extend_from_slice(&frames),
                    None => sections.push((partition, false, BytesMut::from(&frames[..]))),
                }
                replies.push(reply);
            }
        }
    }
    (!replies.is_empty()).then(|| {
        let sections = sections
            .into_iter()
            .map(|(partition, releases, frames)| Section {
                partition,
                releases,
                frames: frames.freeze(),
            })
            .collect();
        (sections, replies)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waiting frames (their answer is not looked at).
    fn frames(partition: u32, bytes: &'static [u8]) -> Item {
        Item::Frames {
            partition,
            frames: Bytes::from_static(bytes),
            reply: oneshot::channel().0,
        }
    }

    fn release(partition: u32) -> Item {
        Item::Release {
            partition,
            reply: oneshot::channel().0,
        }
    }

    /// Once the log stopped, a claim's `Serve` and a release are refused
    /// (neither waits for a put that will never start), and nothing waits.
    #[test]
    fn a_stopped_log_serves_and_releases_nothing() {
        let mut st = State::new();
        let (reply, mut served) = oneshot::channel();
        st.take(Request::Serve {
            partition: 1,
            reply,
        });
        assert!(matches!(served.try_recv(), Ok(Ok(0))));
        st.settle(0, Vec::new(), Vec::new(), Ok(false), &Counters::default());
        let (reply, mut served) = oneshot::channel();
        st.take(Request::Serve {
            partition: 2,
            reply,
        });
        assert!(matches!(
            served.try_recv(),
            Ok(Err(WalError::LogFenced { number: 0 }))
        ));
        let (reply, mut released) = oneshot::channel();
        st.take(Request::Put(Item::Release {
            partition: 1,
            reply,
        }));
        assert!(matches!(
            released.try_recv(),
            Ok(Err(WalError::LogFenced { .. }))
        ));
        assert!(st.waiting.is_empty() && st.waiting_bytes == 0);
    }

    #[test]
    fn bounds_that_would_stall_or_overflow_are_made_usable() {
        let c = WriterConfig {
            window: 0,
            object_bytes: 0,
            queue: 0,
            commit_delay: Duration::MAX,
        }
        .checked();
        assert_eq!((c.window, c.object_bytes, c.queue), (1, 1, 1));
        assert_eq!(c.commit_delay, Duration::from_secs(60));
    }

    #[test]
    fn a_batch_merges_a_partitions_frames_in_order_up_to_the_limit() {
        let mut waiting: VecDeque<Item> = [
            frames(1, b"a"),
            frames(2, b"b"),
            frames(1, b"c"),
            frames(3, b"dddd"),
        ]
        .into_iter()
        .collect();
        let (sections, replies) = take_batch(&mut waiting, false, 3).unwrap();
        assert_eq!(replies.len(), 3);
        assert_eq!(sections.len(), 2);
        assert_eq!(&sections[0].frames[..], b"ac");
        assert_eq!(&sections[1].frames[..], b"b");
        // One append larger than the limit goes alone.
        let (sections, _) = take_batch(&mut waiting, false, 3).unwrap();
        assert_eq!(&sections[0].frames[..], b"dddd");
        assert!(take_batch(&mut waiting, false, 3).is_none());
    }

    #[test]
    fn a_release_goes_first_with_nothing_in_flight_and_ends_its_object_for_its_partition() {
        let mut waiting: VecDeque<Item> = [
            frames(1, b"a"),
            release(1),
            frames(2, b"b"),
            frames(1, b"c"),
        ]
        .into_iter()
        .collect();
        // The frames before the release go on their own.
        let (sections, _) = take_batch(&mut waiting, true, 100).unwrap();
        assert_eq!(sections.len(), 1);
        // With a put in flight, the release waits.
        assert!(take_batch(&mut waiting, false, 100).is_none());
        let (sections, replies) = take_batch(&mut waiting, true, 100).unwrap();
        assert_eq!(replies.len(), 2, "the release and partition 2's frames");
        assert!(sections[0].releases && sections[0].partition == 1);
        assert_eq!(sections[1].partition, 2);
        // Partition 1's later frames are not in the releasing object.
        assert_eq!(waiting.len(), 1);
    }
}
