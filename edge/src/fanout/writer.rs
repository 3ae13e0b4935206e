//! A hub's writers: each frame of the ring written to every detached
//! reader's socket, with no task, queue or buffer per reader (decision 0020).
//!
//! A reader on the light path catches up in its own task, then joins
//! ([`attach`]) and its task ends. What it keeps is an [`Entry`]: its
//! detached connection (`shell::detached`), where it stands, its cursor,
//! when its session ends, when it last got bytes, the chunks its socket did
//! not take yet (references to shared frames), and a waker of its own. A
//! writer (one task per shard of at most `sse_shard_readers` readers) takes
//! each frame from the ring once, frames its `data` and `control` events as
//! chunks once, and writes them to every socket with one non-blocking
//! write. A socket that takes less keeps the rest as its queue and is
//! written again when tokio says it is writable, through the entry's waker
//! (which names the entry to its writer: no scan). Each entry's waker also
//! watches its client (a close ends the entry at once) and the drain.
//!
//! Once a second (or each half keepalive, if shorter) a writer ends the
//! sessions that are over (`sse_session`, the same as a reader with a task:
//! up to a tick late) and sends a keepalive comment to every reader silent
//! for `sse_keepalive`. A reader whose queue reaches `sse_reader_queue`
//! chunks is cut and reconnects from its last `streamNextOffset`, as one
//! with a task is.
//!
//! Where a reader joins: at the end of its catch-up, where its own
//! subscription to the ring began. Frames its writer had already taken by
//! then are taken from that subscription (then dropped), so no frame is
//! missed or sent twice (`core::splice` decides each). A reader whose own
//! subscription overran on its way in (the hand-over was slow, not its
//! socket) goes back to a task of its own before anything is written to
//! it, as the readers of a writer that fell behind do.

use std::collections::VecDeque;
use std::io::IoSlice;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use shared::offset::Offset;
use shared::sse::{control_event, Control, KEEPALIVE};
use shell::detached::{chunk, Detached};
use shell::wakes::EntryWake;
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};
use tokio::time::Instant;

use super::{Fanout, Frame, Hub, RingItem, Seat, Subscription};
use crate::core::splice::{splice, Splice};
use crate::metrics;

/// A reader that caught up, joining its hub's writer.
pub struct Joining {
    pub conn: Detached,
    /// Everything before it was sent.
    pub pos: u64,
    /// Its own cursor, if it gave one (its control events are then its
    /// own; the others share one per frame).
    pub cursor: Option<Box<str>>,
    pub ends_at: Instant,
    /// What it holds for its life (its place among `max_sse_readers`, the
    /// open-readers gauge).
    pub held: Box<dyn Send + Sync>,
}

/// A reader its writer lost (the writer fell behind its ring): it stands at
/// `joining.pos` of its hub's stream, and a task of its own reads from there
/// and joins again.
pub struct Behind {
    pub joining: Joining,
    pub path: String,
    pub accept: Option<&'static str>,
    pub incarnation: String,
    pub framing: super::Framing,
}

/// Hands a reader that caught up to a writer of its hub (one with room,
/// or a new one).
pub fn attach(fanout: &Arc<Fanout>, sub: Subscription, joining: Joining) {
    let hub = Arc::clone(&sub.seat.0);
    hub.shards
        .join(fanout.limits.sse_shard_readers, (sub, joining), |door| {
            let (ring, pos, ended) = hub.writer_ring();
            tokio::spawn(
                Shard {
                    fanout: Arc::clone(fanout),
                    hub: Arc::clone(&hub),
                    door,
                    ring,
                    pos,
                    ended,
                    now: Instant::now(),
                    entries: Vec::new(),
                    free: Vec::new(),
                }
                .run(),
            );
        });
}

/// A reader on its way to a writer.
pub type Join = (Subscription, Joining);

/// What a writer shares with its hub and its entries' wakers: its readers
/// and those on their way in, and its entries' wakes (`shell::shards`).
type Door = shell::shards::Door<Join>;

/// One detached reader.
struct Entry {
    conn: Detached,
    pos: u64,
    cursor: Option<Box<str>>,
    ends_at: Instant,
    last_write: Instant,
    /// Chunks its socket has not taken yet (the first maybe in part).
    owed: VecDeque<Bytes>,
    /// Its answer ends once `owed` is written.
    ending: bool,
    wake: Arc<EntryWake>,
    _seat: Seat,
    held: Box<dyn Send + Sync>,
}

/// How a joining reader's own subscription stood once it was read out.
#[derive(Clone, PartialEq, Eq)]
enum Joined {
    /// Its next frames come from this writer's ring.
    Following,
    /// Its stream was deleted (or rolled back): this `error` event ends it.
    Gone(Bytes),
    /// Its hub's tail ended.
    Ended,
    /// Frames were lost from it before it joined.
    Overran,
}

/// Why an entry ends.
#[derive(Clone, Copy, PartialEq, Eq)]
enum End {
    /// Its answer is whole: the last chunk, then close.
    Finish,
    /// Its socket failed or stopped taking bytes: close as it is.
    Cut,
}

struct Shard {
    fanout: Arc<Fanout>,
    hub: Arc<Hub>,
    door: Arc<Door>,
    ring: broadcast::Receiver<RingItem>,
    /// Where its next frame starts.
    pos: u64,
    /// Its hub published its last frame (the stream closed).
    ended: bool,
    /// The time of this wake (one look at the clock for all its writes).
    now: Instant,
    entries: Vec<Option<Entry>>,
    free: Vec<usize>,
}

impl Shard {
    async fn run(mut self) {
        // Should this task end any other way (a panic), its door leaves the
        // hub all the same: no reader joins a writer that is gone.
        let _leaving = self.hub.shards.leaving(&self.door);
        let limits = &self.fanout.limits;
        let period = match limits.sse_keepalive / 2 {
            d if d.is_zero() => Duration::from_secs(1),
            d => d.min(Duration::from_secs(1)),
        };
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut closing = self.fanout.closing.clone();
        let keepalive = chunk(KEEPALIVE);
        loop {
            let more = tokio::select! {
                _ = closing.wait_for(|c| *c) => false,
                item = self.ring.recv() => self.publish_all(item),
                _ = self.door.woken().notified() => {
                    self.join();
                    self.serve_woken();
                    true
                }
                _ = tick.tick() => {
                    self.sweep(&keepalive);
                    true
                }
            };
            if !more {
                break;
            }
            if self.hub.shards.retire(&self.door) {
                return;
            }
        }
        // The ring ended (or the edge stops): so do its readers, and this
        // writer, once no reader can join it any more.
        self.hub.shards.close(&self.door);
        self.join();
        for id in 0..self.entries.len() {
            self.end(id, End::Finish);
        }
    }

    /// Takes in the readers that joined: each gets what this writer took
    /// from the ring before it came (from its own subscription), then
    /// follows this writer's frames.
    fn join(&mut self) {
        self.now = Instant::now();
        for (mut sub, j) in self.door.take_joins() {
            let id = self.free.pop().unwrap_or_else(|| {
                self.entries.push(None);
                self.entries.len() - 1
            });
            let wake = self.door.woken().wake_of(id);
            self.entries[id] = Some(Entry {
                conn: j.conn,
                pos: j.pos,
                cursor: j.cursor,
                ends_at: j.ends_at,
                last_write: self.now,
                owed: VecDeque::new(),
                ending: false,
                wake,
                _seat: sub.seat,
                held: j.held,
            });
            // What this writer took before the reader came, and how its own
            // subscription stands; nothing is written until both are known.
            let mut before = Vec::new();
            let then = loop {
                match sub.ring.try_recv() {
                    // Taken by this writer before the reader came (a close
                    // marker, empty, once this writer saw its hub end).
                    Ok(RingItem::Data(frame))
                        if (frame.start < frame.end && frame.end <= self.pos)
                            || (frame.start == frame.end && self.ended) =>
                    {
                        before.push(frame);
                    }
                    // This writer's own ring brings it.
                    Ok(RingItem::Data(_)) => {}
                    Ok(RingItem::Gone(event)) => break Joined::Gone(event),
                    Ok(RingItem::Reset) | Err(TryRecvError::Closed) => break Joined::Ended,
                    Err(TryRecvError::Lagged(_)) => break Joined::Overran,
                    Err(TryRecvError::Empty) => break Joined::Following,
                }
            };
            // Its own subscription overran while it was on its way in (the
            // hand-over was slow, not its socket): with nothing written
            // yet, it catches up in a task of its own and joins again.
            if then == Joined::Overran {
                self.fanout.metrics.sse_join_overran();
                self.hand_back(id);
                continue;
            }
            for frame in before {
                self.send_one(id, &frame);
            }
            match then {
                Joined::Gone(event) => self.gone(id, &event),
                Joined::Ended => self.end(id, End::Finish),
                Joined::Overran | Joined::Following => {}
            }
            // Its waker watches the client and the drain from now on.
            self.poll_entry(id);
        }
    }

    /// `item` and every other item the ring has now: taken at once, so
    /// the ring's ring moves on whenever this task runs (the writes of one
    /// frame to slow readers only queue), and never overruns this writer
    /// while it serves its readers' sockets. False once the ring ended.
    fn publish_all(&mut self, item: Result<RingItem, RecvError>) -> bool {
        self.now = Instant::now();
        let mut more = self.publish(item);
        while more {
            let next = match self.ring.try_recv() {
                Ok(item) => Ok(item),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Lagged(n)) => Err(RecvError::Lagged(n)),
                Err(TryRecvError::Closed) => Err(RecvError::Closed),
            };
            more = self.publish(next);
        }
        more
    }

    /// One item of the ring; false once the ring ended.
    fn publish(&mut self, item: Result<RingItem, RecvError>) -> bool {
        match item {
            Ok(RingItem::Data(frame)) => {
                let data = frame.data_chunk.get_or_init(|| chunk(&frame.event)).clone();
                let shared = chunk(
                    frame
                        .control
                        .get_or_init(|| self.control(frame.end, &frame, None)),
                );
                for id in 0..self.entries.len() {
                    self.send(id, &frame, &data, &shared);
                }
                self.pos = frame.end;
                self.ended |= frame.closed;
                true
            }
            Ok(RingItem::Gone(event)) => {
                for id in 0..self.entries.len() {
                    self.gone(id, &event);
                }
                false
            }
            Ok(RingItem::Reset) | Err(RecvError::Closed) => false,
            // This writer fell behind the ring (it was not run for as long
            // as the ring lasts): its readers are not slow, it is. Each goes
            // back to a task of its own, which reads what it missed and
            // joins again; a reader with bytes still queued is cut (its
            // socket, not only this writer, is behind).
            Err(RecvError::Lagged(n)) => {
                tracing::warn!(stream = %self.hub.path, frames = n, "an SSE writer fell behind its ring; its readers catch up on their own");
                self.fanout.metrics.sse_writer_behind();
                // Out of the hub's writers first: a reader handed back
                // joins another (or a new one), never this one.
                self.hub.shards.close(&self.door);
                for id in 0..self.entries.len() {
                    self.hand_back(id);
                }
                false
            }
        }
    }

    /// A frame for one reader, its chunks framed here (a reader joining
    /// late).
    fn send_one(&mut self, id: usize, frame: &Frame) {
        let data = frame.data_chunk.get_or_init(|| chunk(&frame.event)).clone();
        let shared = chunk(
            frame
                .control
                .get_or_init(|| self.control(frame.end, frame, None)),
        );
        self.send(id, frame, &data, &shared);
    }

    fn send(&mut self, id: usize, frame: &Frame, data: &Bytes, shared: &Bytes) {
        let Some(e) = &self.entries[id] else { return };
        if e.ending {
            return;
        }
        match splice(e.pos, frame.start, frame.end) {
            Splice::Skip => return,
            Splice::Send => {}
            // A gap: it reconnects from where it stands.
            Splice::Fill { .. } => return self.end(id, End::Finish),
        }
        let control = match &e.cursor {
            None => shared.clone(),
            Some(c) => chunk(&self.control(frame.end, frame, Some(c))),
        };
        if frame.end > frame.start {
            self.fanout
                .metrics
                .delivered(metrics::SSE, frame.arrived.elapsed());
        }
        let Some(e) = &mut self.entries[id] else {
            return;
        };
        e.pos = frame.end;
        e.ending = frame.closed;
        self.offer(id, [data.clone(), control]);
    }

    fn control(&self, end: u64, frame: &Frame, cursor: Option<&str>) -> Bytes {
        Bytes::from(control_event(&Control {
            stream_next_offset: Offset(end).to_string(),
            stream_cursor: (!frame.closed)
                .then(|| crate::http::sse::cursor(&self.fanout.wall, cursor)),
            up_to_date: frame.up_to_date,
            stream_closed: frame.closed,
        }))
    }

    /// The stream was deleted or rolled back: its `error` event, then the end.
    fn gone(&mut self, id: usize, event: &[u8]) {
        if self.entries[id].is_none() {
            return;
        }
        let event = chunk(event);
        if let Some(e) = &mut self.entries[id] {
            e.ending = true;
        }
        self.offer(id, [event, Bytes::new()]);
    }

    /// Writes `chunks` now, or queues what the socket does not take.
    fn offer(&mut self, id: usize, chunks: [Bytes; 2]) {
        let limit = self.fanout.limits.sse_reader_queue.max(2);
        let Some(e) = &mut self.entries[id] else {
            return;
        };
        e.last_write = self.now;
        if !e.owed.is_empty() {
            if e.owed.len() + chunks.len() > limit {
                self.fanout.metrics.sse_dropped_slow();
                return self.end(id, End::Cut);
            }
            e.owed.extend(chunks.into_iter().filter(|c| !c.is_empty()));
            return;
        }
        let slices = [IoSlice::new(&chunks[0]), IoSlice::new(&chunks[1])];
        let mut taken = match e.conn.try_write(&slices) {
            Ok(n) => n,
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(_) => return self.end(id, End::Cut),
        };
        for c in chunks {
            if taken >= c.len() {
                taken -= c.len();
            } else {
                e.owed.push_back(c.slice(taken..));
                taken = 0;
            }
        }
        if !e.owed.is_empty() || e.ending {
            self.poll_entry(id);
        }
    }

    /// Serves the entries whose waker fired.
    fn serve_woken(&mut self) {
        for id in self.door.woken().take() {
            if let Some(Some(e)) = self.entries.get(id) {
                e.wake.rearm();
                self.poll_entry(id);
            }
        }
    }

    /// Writes what the entry owes as far as its socket takes it, ends it
    /// when its answer is whole or its client left, and registers its
    /// waker for what it waits for.
    fn poll_entry(&mut self, id: usize) {
        let Some(e) = &mut self.entries[id] else {
            return;
        };
        let waker = e.wake.waker();
        let mut cx = Context::from_waker(&waker);
        if e.conn.ended(&mut cx) {
            let end = if e.owed.is_empty() {
                End::Finish
            } else {
                End::Cut
            };
            return self.end(id, end);
        }
        while !e.owed.is_empty() {
            match e.conn.poll_writable(&mut cx) {
                Poll::Pending => return,
                Poll::Ready(Err(_)) => return self.end(id, End::Cut),
                Poll::Ready(Ok(())) => {}
            }
            let slices: Vec<IoSlice<'_>> =
                e.owed.iter().take(16).map(|b| IoSlice::new(b)).collect();
            let mut taken = match e.conn.try_write(&slices) {
                Ok(n) => n,
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => return self.end(id, End::Cut),
            };
            while taken > 0 {
                let front = e.owed.front_mut().expect("written bytes were owed");
                if taken >= front.len() {
                    taken -= front.len();
                    e.owed.pop_front();
                } else {
                    let _ = front.split_to(taken);
                    taken = 0;
                }
            }
        }
        if e.ending {
            self.end(id, End::Finish);
        }
    }

    /// Ends sessions that are over; sends keepalives to silent readers.
    fn sweep(&mut self, keepalive: &Bytes) {
        self.now = Instant::now();
        let now = self.now;
        let every = self.fanout.limits.sse_keepalive;
        for id in 0..self.entries.len() {
            let Some(e) = &self.entries[id] else { continue };
            if now >= e.ends_at {
                let end = if e.owed.is_empty() {
                    End::Finish
                } else {
                    End::Cut
                };
                self.end(id, end);
            } else if !every.is_zero()
                && e.owed.is_empty()
                && now.saturating_duration_since(e.last_write) >= every
            {
                self.offer(id, [keepalive.clone(), Bytes::new()]);
            }
        }
    }

    /// Gives a reader with nothing queued back to a task of its own
    /// ([`Behind`]); cuts one with bytes queued.
    fn hand_back(&mut self, id: usize) {
        let queued = match &self.entries[id] {
            None => return,
            Some(e) => !e.owed.is_empty() || e.ending,
        };
        let rejoin = self.fanout.rejoin.get();
        if queued || rejoin.is_none() {
            self.fanout.metrics.sse_dropped_slow();
            return self.end(id, End::Cut);
        }
        let Some(e) = self.entries[id].take() else {
            return;
        };
        self.free.push(id);
        self.door.left();
        let behind = Behind {
            joining: Joining {
                conn: e.conn,
                pos: e.pos,
                cursor: e.cursor,
                ends_at: e.ends_at,
                held: e.held,
            },
            path: self.hub.path.clone(),
            accept: self.hub.accept,
            incarnation: self.hub.incarnation.clone(),
            framing: self.hub.framing,
        };
        if let Some(rejoin) = rejoin {
            rejoin(behind);
        }
    }

    fn end(&mut self, id: usize, end: End) {
        let Some(e) = self.entries.get_mut(id).and_then(Option::take) else {
            return;
        };
        self.free.push(id);
        self.door.left();
        match end {
            End::Finish if e.owed.is_empty() => e.conn.finish(),
            _ => e.conn.cut(),
        }
    }
}
