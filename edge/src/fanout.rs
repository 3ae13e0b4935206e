//! SSE fan-out: one upstream read per stream, however many readers.
//!
//! A stream's [`Hub`] follows the origin with a chain of long-polls, each
//! from the end of the last answer (with its cursor), and publishes every
//! answer as one [`Frame`]: a range `[start, end)` of the stream with its
//! `data` event framed once for all readers. Frames are contiguous, and the
//! hub's position moves under the same lock a reader subscribes under, so a
//! reader knows exactly where the frames it will receive begin
//! (`core::splice` does the rest).
//!
//! Readers on the light path are written to by the hub itself once they
//! caught up ([`writer`]): their connections are detached from any task,
//! and one task per shard of `sse_shard_readers` readers writes each frame
//! to every socket. Other readers (HTTP/2, or with the light path off)
//! each have a task that takes the frames from the ring.
//!
//! Bounds: a hub's ring holds `sse_ring` frames (each at most
//! `sse_frame_bytes`, one oversized JSON message excepted); a reader that
//! falls further behind is disconnected. All rings' frames together hold at
//! most `sse_ring_bytes`: each frame holds its room until the ring drops it,
//! and a ring whose next frame finds no room ends (its readers reconnect). A hub ends when its last reader
//! leaves, when the stream closes or is deleted, when the origin fails or
//! answers for another incarnation; its readers then end too and reconnect
//! from their last `streamNextOffset`, so no reader ever gets bytes of a new
//! incarnation on an old connection.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, StatusCode};
use parking_lot::Mutex;
use shared::headers as h;
use shared::offset::Offset;
use tokio::sync::{broadcast, watch, Notify, OwnedSemaphorePermit, Semaphore};

use crate::answer::Answer;
use crate::config::Limits;
use crate::core::text_cut::cut_text;
use crate::metrics::{self, Metrics};
use crate::upstream::Upstream;

mod writer;

pub use writer::{attach, Behind, Joining};

/// One answer of the shared tail.
#[derive(Debug)]
pub struct Frame {
    pub start: u64,
    pub end: u64,
    /// The `data` event, framed once for every reader; empty for the
    /// marker that a stream closed at `start == end`.
    pub event: Bytes,
    pub up_to_date: bool,
    pub closed: bool,
    /// When its answer arrived from the origin (delivery lag counts from
    /// here).
    pub arrived: std::time::Instant,
    /// The `control` event that follows it for every reader that gave no
    /// cursor of its own (most readers): made by the first such reader,
    /// then shared, so a frame costs each reader two queued references,
    /// no formatting. (Its ~150 bytes are outside `sse_ring_bytes`: at
    /// most one per frame of the ring.)
    pub control: std::sync::OnceLock<Bytes>,
    /// The `data` event framed as a chunk, for the hub's writers: made by
    /// the first, shared by every writer of the hub (also outside
    /// `sse_ring_bytes`, like `control`).
    pub data_chunk: std::sync::OnceLock<Bytes>,
    /// Its room in `sse_ring_bytes`, given back when the ring drops it.
    _room: Option<OwnedSemaphorePermit>,
}

/// What the ring carries.
#[derive(Clone, Debug)]
pub enum RingItem {
    Data(Arc<Frame>),
    /// The stream was deleted, or a rollback replaced the incarnation the
    /// tail followed: readers send this `error` event and end.
    Gone(Bytes),
    /// The tail ended for another reason: readers end and reconnect.
    Reset,
}

/// How a stream's bytes become event data; the same for all its readers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Framing {
    pub base64: bool,
    /// Events end on whole UTF-8 characters.
    pub text: bool,
}

struct HubState {
    pos: u64,
    ended: bool,
    readers: usize,
}

pub struct Hub {
    path: String,
    /// The `Accept` of its upstream requests (the shape of a JSON stream).
    accept: Option<&'static str>,
    incarnation: String,
    framing: Framing,
    state: Mutex<HubState>,
    ring: broadcast::Sender<RingItem>,
    idle: Notify,
    /// The writers of its detached readers ([`writer`]).
    shards: shell::shards::Shards<writer::Join>,
}

/// A reader on a hub: its ring, and its seat.
pub struct Subscription {
    pub ring: broadcast::Receiver<RingItem>,
    /// Where the first frame this reader receives starts.
    pub pos: u64,
    pub seat: Seat,
}

/// A reader's place on a hub; leaving it lets an idle hub end.
pub struct Seat(Arc<Hub>);

impl Drop for Seat {
    fn drop(&mut self) {
        let mut st = self.0.state.lock();
        st.readers -= 1;
        if st.readers == 0 {
            self.0.idle.notify_one();
        }
    }
}

impl Hub {
    fn try_subscribe(self: &Arc<Self>, incarnation: &str) -> Option<Subscription> {
        let mut st = self.state.lock();
        if st.ended || self.incarnation != incarnation {
            return None;
        }
        st.readers += 1;
        Some(Subscription {
            ring: self.ring.subscribe(),
            pos: st.pos,
            seat: Seat(Arc::clone(self)),
        })
    }

    /// A ring for a writer, and where its first frame starts (no seat: a
    /// writer lives as long as its readers, who hold theirs).
    /// Whether it ended, too.
    fn writer_ring(&self) -> (broadcast::Receiver<RingItem>, u64, bool) {
        let st = self.state.lock();
        (self.ring.subscribe(), st.pos, st.ended)
    }

    fn publish(&self, item: RingItem, pos: Option<u64>, last: bool) {
        let mut st = self.state.lock();
        if let Some(p) = pos {
            st.pos = p;
        }
        st.ended |= last;
        let _ = self.ring.send(item);
    }

    /// Ends the hub if no reader is left, in one step with the check, so no
    /// reader can join a hub that is about to end.
    fn end_if_idle(&self) -> bool {
        let mut st = self.state.lock();
        st.ended |= st.readers == 0;
        st.ended
    }
}

/// Hubs are per stream and per shape of its events.
type HubKey = (String, Option<&'static str>);

pub struct Fanout {
    hubs: Mutex<HashMap<HubKey, Arc<Hub>>>,
    /// Control events' cursors come from it.
    wall: shell::clock::WallClock,
    /// Bytes of frames held by all rings (`Limits::sse_ring_bytes`).
    ring_bytes: Arc<Semaphore>,
    upstream: Upstream,
    metrics: Arc<Metrics>,
    limits: Limits,
    closing: watch::Receiver<bool>,
    /// Where a writer that fell behind its ring sends its readers: a task
    /// of its own reads what they missed and joins them again
    /// (`http::sse::rejoin`, set once the edge's state exists).
    rejoin: std::sync::OnceLock<Box<dyn Fn(writer::Behind) + Send + Sync>>,
}

impl Fanout {
    /// Sets where readers a writer lost go (see [`Fanout::rejoin`]'s field).
    pub fn on_behind(&self, rejoin: impl Fn(writer::Behind) + Send + Sync + 'static) {
        let _ = self.rejoin.set(Box::new(rejoin));
    }

    pub fn new(
        upstream: Upstream,
        metrics: Arc<Metrics>,
        limits: Limits,
        closing: watch::Receiver<bool>,
        wall: shell::clock::WallClock,
    ) -> Arc<Fanout> {
        Arc::new(Fanout {
            hubs: Mutex::new(HashMap::new()),
            wall,
            ring_bytes: Arc::new(Semaphore::new(
                usize::try_from(limits.sse_ring_bytes)
                    .unwrap_or(usize::MAX)
                    .min(Semaphore::MAX_PERMITS),
            )),
            upstream,
            metrics,
            limits,
            closing,
            rejoin: std::sync::OnceLock::new(),
        })
    }

    /// Hubs running (one upstream tail each).
    pub fn hubs(&self) -> usize {
        self.hubs.lock().len()
    }

    /// Whether the rings have less room left than one frame may take: new
    /// readers are then refused until rings end and give room back.
    pub fn full(&self) -> bool {
        (self.ring_bytes.available_permits() as u64) < self.limits.sse_frame_bytes
    }

    /// Joins the hub of the stream's events as `accept` shapes them,
    /// starting one at `pos` when there is none (or only one of another
    /// incarnation, or one that ended).
    pub fn subscribe(
        self: &Arc<Self>,
        path: &str,
        accept: Option<&'static str>,
        incarnation: &str,
        framing: Framing,
        pos: u64,
    ) -> Subscription {
        let key = (path.to_owned(), accept);
        let mut hubs = self.hubs.lock();
        if let Some(sub) = hubs.get(&key).and_then(|h| h.try_subscribe(incarnation)) {
            return sub;
        }
        let hub = Arc::new(Hub {
            path: path.to_owned(),
            accept,
            incarnation: incarnation.to_owned(),
            framing,
            state: Mutex::new(HubState {
                pos,
                ended: false,
                readers: 0,
            }),
            ring: broadcast::channel(self.limits.sse_ring).0,
            idle: Notify::new(),
            shards: Default::default(),
        });
        hubs.insert(key, Arc::clone(&hub));
        let sub = hub
            .try_subscribe(incarnation)
            .expect("a new hub takes readers");
        tokio::spawn(Arc::clone(self).follow(Arc::clone(&hub)));
        sub
    }

    /// The hub's upstream tail: long-poll after long-poll until it ends.
    async fn follow(self: Arc<Self>, hub: Arc<Hub>) {
        let _tail = self.metrics.upstream_live_read_guard();
        let mut closing = self.closing.clone();
        let mut cursor: Option<String> = None;
        let (item, last_pos) = loop {
            if hub.end_if_idle() {
                break (RingItem::Reset, None);
            }
            let pos = hub.state.lock().pos;
            let mut pq = format!(
                "{}?offset={}&live=long-poll&timeout_ms={}&max_bytes={}",
                hub.path,
                Offset(pos),
                self.limits.upstream_poll_ms,
                self.limits.sse_frame_bytes
            );
            if let Some(c) = &cursor {
                pq.push_str("&cursor=");
                pq.push_str(c);
            }
            let mut headers = HeaderMap::new();
            if let Some(accept) = hub.accept {
                headers.insert(http::header::ACCEPT, HeaderValue::from_static(accept));
            }
            let answer = tokio::select! {
                a = self.upstream.get(&pq, headers, metrics::Upstream::Tail) => a,
                _ = hub.idle.notified() => continue,
                _ = closing.wait_for(|c| *c) => break (RingItem::Reset, None),
            };
            let answer = match answer {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(stream = %hub.path, error = %e, "upstream tail failed");
                    break (RingItem::Reset, None);
                }
            };
            match self.step(&hub, pos, &answer) {
                Step::Frame(frame) => {
                    let (end, closed) = (frame.end, frame.closed);
                    if closed {
                        break (RingItem::Data(frame), Some(end));
                    }
                    hub.publish(RingItem::Data(frame), Some(end), false);
                }
                Step::Wait => {}
                Step::End(item) => break (item, None),
            }
            if let Some(c) = answer.header(h::STREAM_CURSOR) {
                cursor = Some(c.to_owned());
            }
        };
        hub.publish(item, last_pos, true);
        let key = (hub.path.clone(), hub.accept);
        let mut hubs = self.hubs.lock();
        if hubs.get(&key).is_some_and(|h| Arc::ptr_eq(h, &hub)) {
            hubs.remove(&key);
        }
    }

    /// What one upstream answer means for the ring.
    fn step(&self, hub: &Hub, pos: u64, answer: &Answer) -> Step {
        if answer.status == StatusCode::NOT_FOUND {
            return Step::End(RingItem::Gone(shared::sse::deleted_event().into()));
        }
        // A rollback replaced the incarnation followed (the origin's
        // long-poll on it answers 412 naming it as the previous one).
        if answer.status == StatusCode::PRECONDITION_FAILED
            && answer.header(h::STREAM_PREVIOUS_INCARNATION) == Some(hub.incarnation.as_str())
        {
            return Step::End(RingItem::Gone(shared::sse::rolled_back_event().into()));
        }
        if answer.header(h::STREAM_INCARNATION) != Some(hub.incarnation.as_str()) {
            return Step::End(RingItem::Reset);
        }
        let next = answer
            .header(h::STREAM_NEXT_OFFSET)
            .and_then(Offset::parse)
            .map(Offset::bytes);
        let closed = answer.header(h::STREAM_CLOSED) == Some("true");
        let up_to_date = answer.header(h::STREAM_UP_TO_DATE) == Some("true");
        match (answer.status, next) {
            (StatusCode::OK, Some(next)) if next > pos => {
                let (body, end) = if hub.framing.text {
                    cut_text(answer.body.clone(), next)
                } else {
                    (answer.body.clone(), next)
                };
                let whole = end == next;
                let event = Bytes::from(shared::sse::data_event(&body, hub.framing.base64));
                let room = u32::try_from(event.len())
                    .ok()
                    .and_then(|n| Arc::clone(&self.ring_bytes).try_acquire_many_owned(n).ok());
                let Some(room) = room else {
                    self.metrics.sse_ring_over_budget();
                    tracing::warn!(stream = %hub.path, "the shared rings are full; ending this one");
                    return Step::End(RingItem::Reset);
                };
                Step::Frame(Arc::new(Frame {
                    start: pos,
                    end,
                    event,
                    up_to_date: up_to_date && whole,
                    closed: closed && whole,
                    arrived: std::time::Instant::now(),
                    control: std::sync::OnceLock::new(),
                    data_chunk: std::sync::OnceLock::new(),
                    _room: Some(room),
                }))
            }
            (StatusCode::NO_CONTENT, Some(next)) if closed && next == pos => {
                Step::Frame(Arc::new(Frame {
                    start: pos,
                    end: pos,
                    event: Bytes::new(),
                    up_to_date: true,
                    closed: true,
                    arrived: std::time::Instant::now(),
                    control: std::sync::OnceLock::new(),
                    data_chunk: std::sync::OnceLock::new(),
                    _room: None,
                }))
            }
            (StatusCode::NO_CONTENT, Some(next)) if next == pos => Step::Wait,
            _ => {
                tracing::warn!(stream = %hub.path, status = %answer.status, "unexpected tail answer");
                Step::End(RingItem::Reset)
            }
        }
    }
}

enum Step {
    Frame(Arc<Frame>),
    Wait,
    End(RingItem),
}
