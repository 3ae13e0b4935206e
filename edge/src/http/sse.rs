//! `GET {stream}?offset=…&live=sse` through the shared tail.
//!
//! A reader first catches up on its own with plain reads from its offset
//! (the first read also answers every refusal exactly as the origin would:
//! 404, 416, ...), then joins the stream's hub (`fanout`) and sends the
//! shared frames, reading any range it would otherwise miss
//! (`core::splice`): no gap, no duplicate. Control events are its own (its
//! cursor). Catch-up sends wait for the reader; live sends never do: a
//! reader whose queue of `sse_reader_queue` items is full, or that fell off
//! the end of the feed's ring, is disconnected and reconnects from its last
//! `streamNextOffset`. A reader is ended after `sse_session`, as the origin
//! does, and one silent for `sse_keepalive` is sent a keepalive comment
//! (`shared::sse::KEEPALIVE`) while it waits for the next frame, as the
//! origin does. Readers that need their own event sizes (`max_bytes`), name an
//! incarnation or carry a floor (`min_next_offset`) are passed through to
//! the origin.
//!
//! A reader on the light path (`shell::detached::Offered`) writes its
//! catch-up to its socket itself, then hands the socket to its hub's
//! writer (`fanout::writer`) and its task ends: a waiting reader is then an
//! entry of ~300 bytes, not a task, a queue and a connection's task.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::Body;
use axum::response::IntoResponse;
use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use shared::content_type::{is_json, is_media_type, is_text, sse_uses_base64, NDJSON};
use shared::headers as h;
use shared::offset::{Offset, ReadFrom};
use shared::params::{ReadParams, MAX_READ_BYTES};
use shared::sse::{control_event, Control, KEEPALIVE};
use shell::keepalive::Keepalive;
use shell::sse_body::TrySendError;
use shell::sse_out::SseOut;
use tokio::sync::broadcast::error::RecvError;

use super::error::EdgeError;
use super::forward::forward_live;
use super::Shared;
use crate::answer::Answer;
use crate::collapse::WaitError;
use crate::core::collapse_key::canonical_accept;
use crate::core::splice::{splice, Splice};
use crate::core::text_cut::cut_text;
use crate::fanout::{Framing, RingItem, Subscription};
use crate::metrics;

/// Headers of the first read that an SSE answer keeps.
const KEPT_HEADERS: [&str; 7] = [
    "stream-incarnation",
    "stream-read-origin",
    "vary",
    "x-content-type-options",
    "cross-origin-resource-policy",
    "access-control-allow-origin",
    "access-control-expose-headers",
];

pub async fn sse(state: &Shared, req: Request<Body>, params: &ReadParams) -> Response<Body> {
    // A reader with a floor (decision 0025) is the origin's too: every
    // catch-up read of its would need the floor, and the shared hub's
    // reads carry none.
    // Every SSE reader holds a place among `max_sse_readers`, shared or
    // forwarded: a forwarded one holds an upstream connection as long.
    let Some(slot_of_readers) = reader_place(state) else {
        return EdgeError::Busy(TOO_MANY_READERS).into_response();
    };
    if params.max_bytes < MAX_READ_BYTES
        || params.floor.is_some()
        || req.headers().contains_key(h::STREAM_INCARNATION)
        || req.headers().contains_key(http::header::AUTHORIZATION)
    {
        // Its place is given back when its answer ends.
        return super::forward::holding(forward_live(state, req).await, slot_of_readers);
    }
    if state.fanout.full() {
        return EdgeError::Busy("the live feeds at this edge are full").into_response();
    }
    let path = req.uri().path().to_owned();
    let from = match params.offset {
        ReadFrom::Start => "-1".to_owned(),
        ReadFrom::Now => "now".to_owned(),
        ReadFrom::At(o) => o.to_string(),
    };
    // A JSON stream's events are shaped as the reader's `Accept` chooses.
    let accept = canonical_accept(req.headers());
    let first = match read(state, &path, &from, None, accept).await {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    if first.status != StatusCode::OK {
        return first.to_response();
    }
    let content_type = first.header(http::header::CONTENT_TYPE).unwrap_or("");
    let is_ndjson = is_media_type(content_type, NDJSON);
    // Only a JSON stream's events have a shape to choose: readers of any
    // other share one hub whatever they accept.
    let accept = accept.filter(|_| is_ndjson || is_json(content_type));
    let framing = Framing {
        base64: sse_uses_base64(content_type) && !is_ndjson,
        text: is_text(content_type) || is_ndjson,
    };
    let resp_headers = answer_headers(&first.headers, &framing);
    let pos = match params.offset {
        ReadFrom::Start => 0,
        ReadFrom::At(o) => o.bytes(),
        ReadFrom::Now => next_offset(&first).unwrap_or(0),
    };
    let (out, answer) = shell::sse_out::answer(&req, state.config.limits.sse_reader_queue);
    let held: Box<dyn Send + Sync> = Box::new((slot_of_readers, state.metrics.sse_guard()));
    let reader = Reader {
        state: state.clone(),
        path,
        accept,
        incarnation: first.header(h::STREAM_INCARNATION).unwrap_or("").to_owned(),
        framing,
        cursor: params.cursor.clone(),
        pos,
        announced: false,
        out,
        held: Some(held),
    };
    tokio::spawn(async move {
        let deadline = shell::clock::deadline(reader.state.config.limits.sse_session);
        let state = reader.state.clone();
        let _ = tokio::select! {
            r = reader.run(first, deadline) => r,
            _ = tokio::time::sleep_until(deadline) => Ok(()),
            _ = state.closed() => Ok(()),
        };
    });
    let mut resp = answer.response(Body::new, Body::empty());
    *resp.headers_mut() = resp_headers;
    resp
}

/// The headers of an SSE answer: what the origin's first read said of the
/// stream, and the event stream's own.
fn answer_headers(first: &HeaderMap, framing: &Framing) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for name in KEPT_HEADERS {
        if let Some(v) = first.get(name) {
            headers.insert(name, v.clone());
        }
    }
    headers.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    headers.insert(
        http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    if let Some(ct) = first.get(http::header::CONTENT_TYPE) {
        headers.insert(h::STREAM_DATA_CONTENT_TYPE, ct.clone());
    }
    if framing.base64 {
        headers.insert(
            h::STREAM_SSE_DATA_ENCODING,
            HeaderValue::from_static("base64"),
        );
    }
    headers
}

/// A reader its hub's writer lost (`fanout::Behind`: the writer fell behind
/// its feed) catches up in a task of its own, within its session, and joins
/// the hub's writers again.
pub fn rejoin(state: Shared, behind: crate::fanout::Behind) {
    let j = behind.joining;
    let reader = Reader {
        state,
        path: behind.path,
        accept: behind.accept,
        incarnation: behind.incarnation,
        framing: behind.framing,
        cursor: j.cursor.map(String::from),
        pos: j.pos,
        announced: true,
        out: SseOut::Socket(j.conn),
        held: Some(j.held),
    };
    let ends_at = j.ends_at;
    tokio::spawn(async move {
        let state = reader.state.clone();
        let _ = tokio::select! {
            r = reader.rejoin(ends_at) => r,
            _ = tokio::time::sleep_until(ends_at) => Ok(()),
            _ = state.closed() => Ok(()),
        };
    });
}

/// The refusal past `max_sse_readers`.
pub(super) const TOO_MANY_READERS: &str = "too many SSE readers at this edge";

/// A place among `max_sse_readers`, or none left.
pub(super) fn reader_place(state: &Shared) -> Option<ReaderSlot> {
    let readers = &state.sse_readers;
    if readers.fetch_add(1, Ordering::SeqCst) >= state.config.limits.max_sse_readers {
        readers.fetch_sub(1, Ordering::SeqCst);
        return None;
    }
    Some(ReaderSlot(state.clone()))
}

/// Frees a place among `max_sse_readers` when the reader ends.
pub(super) struct ReaderSlot(Shared);

impl Drop for ReaderSlot {
    fn drop(&mut self) {
        self.0.sse_readers.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A plain read upstream, for one reader's catch-up, shared with the
/// readers asking for the same range at the same moment (`collapse`,
/// [`crate::collapse::Counted::Reads`]).
async fn read(
    state: &Shared,
    path: &str,
    from: &str,
    max: Option<u64>,
    accept: Option<&'static str>,
) -> Result<Arc<Answer>, EdgeError> {
    let max = max
        .unwrap_or(state.config.limits.sse_frame_bytes)
        .min(state.config.limits.sse_frame_bytes);
    let pq = format!("{path}?offset={from}&max_bytes={max}");
    let key = format!("{pq}\n{}", accept.unwrap_or(""));
    let upstream = state.upstream.clone();
    // A reader's session bounds its every wait.
    let mut waiter =
        state
            .sse_reads
            .join(key, state.config.limits.sse_session, move || async move {
                let mut headers = HeaderMap::new();
                if let Some(accept) = accept {
                    headers.insert(http::header::ACCEPT, HeaderValue::from_static(accept));
                }
                upstream.get(&pq, headers, metrics::Upstream::SseRead).await
            })?;
    waiter.wait().await.map(|(answer, _)| answer).map_err(|e| {
        // Never full: each reader holds a place among `max_sse_readers`
        // and waits for one read at a time.
        if matches!(e, WaitError::Full) {
            return EdgeError::Busy("too many SSE readers at this edge");
        }
        tracing::warn!(error = %e, "an SSE reader's read from the origin failed");
        EdgeError::Busy(match e {
            WaitError::Upstream(_) => "the origin cannot be reached",
            _ => "the origin did not answer the read",
        })
    })
}

fn next_offset(a: &Answer) -> Option<u64> {
    a.header(h::STREAM_NEXT_OFFSET)
        .and_then(Offset::parse)
        .map(Offset::bytes)
}

/// Why a reader's session ends early.
enum End {
    /// The reader is gone, slow, or the stream ended: just stop.
    Stop,
}

struct Reader {
    state: Shared,
    path: String,
    /// The `Accept` of its upstream reads (the shape of a JSON stream).
    accept: Option<&'static str>,
    incarnation: String,
    framing: Framing,
    cursor: Option<String>,
    /// Everything before this offset was sent.
    pos: u64,
    /// A control event went out (a reader at the end gets one at once).
    announced: bool,
    out: SseOut,
    /// Its place among `max_sse_readers` and in the open readers' gauge.
    held: Option<Box<dyn Send + Sync>>,
}

impl Reader {
    async fn run(mut self, first: Arc<Answer>, ends_at: tokio::time::Instant) -> Result<(), End> {
        // (Fails when the client left, or the edge drains, before the head.)
        self.out.ready().await.map_err(|_| End::Stop)?;
        // The catch-up and every fill run boxed: their reads' futures are
        // large, and a waiting reader's own future should not carry them.
        let Some(sub) = Box::pin(self.catch_up(first)).await? else {
            return Ok(());
        };
        if let SseOut::Socket(_) = self.out {
            self.detach(sub, ends_at);
            return Ok(());
        }
        self.follow(sub).await
    }

    /// Hands the reader (caught up to where `sub` begins) to its hub's
    /// writers; its task ends.
    fn detach(&mut self, sub: Subscription, ends_at: tokio::time::Instant) {
        let SseOut::Socket(conn) = std::mem::replace(&mut self.out, SseOut::Gone) else {
            return;
        };
        let Some(held) = self.held.take() else {
            return;
        };
        let joining = crate::fanout::Joining {
            conn,
            pos: self.pos,
            cursor: self.cursor.take().map(String::into_boxed_str),
            ends_at,
            held,
        };
        crate::fanout::attach(&self.state.fanout, sub, joining);
    }

    /// Its place on its stream's hub (one starts where it stands, if none
    /// runs).
    fn subscribe(&self) -> Subscription {
        self.state.fanout.subscribe(
            &self.path,
            self.accept,
            &self.incarnation,
            self.framing,
            self.pos,
        )
    }

    /// A reader its writer lost: reads from where it stands up to where a
    /// new subscription to its hub begins, and joins again.
    async fn rejoin(mut self, ends_at: tokio::time::Instant) -> Result<(), End> {
        let sub = self.subscribe();
        // In pieces of `sse_refill_bytes`: a lost reader may be one whose
        // socket does not drain, and it holds one piece while it waits.
        let piece = self.state.config.limits.sse_refill_bytes;
        if Box::pin(self.fill(sub.pos, piece)).await? {
            return Ok(());
        }
        self.detach(sub, ends_at);
        Ok(())
    }

    /// The live part of a reader with a task: frames from the feed into
    /// its queue.
    async fn follow(&mut self, mut sub: Subscription) -> Result<(), End> {
        // The first read's events were the tail's last write.
        let mut keepalive = Keepalive::new(self.state.config.limits.sse_keepalive);
        loop {
            let item = tokio::select! {
                item = sub.ring.recv() => item,
                _ = self.out.closed() => return Err(End::Stop),
                _ = keepalive.due() => {
                    keepalive.wrote();
                    self.out.keep_alive(KEEPALIVE).await.map_err(|_| End::Stop)?;
                    continue;
                }
            };
            match item {
                Ok(RingItem::Data(frame)) => match splice(self.pos, frame.start, frame.end) {
                    Splice::Skip => {}
                    Splice::Send => {
                        if frame.end > frame.start {
                            self.offer(frame.event.clone())?;
                            self.state
                                .metrics
                                .delivered(crate::metrics::SSE, frame.arrived.elapsed());
                        }
                        self.pos = frame.end;
                        let control = match self.cursor {
                            None => frame
                                .control
                                .get_or_init(|| self.control(frame.up_to_date, frame.closed))
                                .clone(),
                            Some(_) => self.control(frame.up_to_date, frame.closed),
                        };
                        self.announced = true;
                        self.offer(control)?;
                        keepalive.wrote();
                        if frame.closed {
                            return Ok(());
                        }
                    }
                    Splice::Fill { to, .. } => {
                        if Box::pin(self.fill(to, u64::MAX)).await? {
                            return Ok(());
                        }
                        keepalive.wrote();
                        if frame.closed {
                            let control = self.control(true, true);
                            self.offer(control)?;
                            return Ok(());
                        }
                    }
                },
                Ok(RingItem::Gone(event)) => {
                    let _ = self.send(event).await;
                    return Ok(());
                }
                Ok(RingItem::Reset) | Err(RecvError::Closed) => return Ok(()),
                Err(RecvError::Lagged(_)) => {
                    self.state.metrics.sse_dropped_slow();
                    return Err(End::Stop);
                }
            }
        }
    }

    /// Catches up on its own until a read reaches the end, then joins the
    /// shared feed and reads up to where its frames begin; `None` once the
    /// stream closed on the way. The answers go before the reader waits:
    /// their headers hold on to the upstream connection's read buffer.
    async fn catch_up(&mut self, first: Arc<Answer>) -> Result<Option<Subscription>, End> {
        let mut answer = first;
        loop {
            let (up_to_date, closed) = self.send_read(&answer).await?;
            if closed {
                return Ok(None);
            }
            if up_to_date {
                break;
            }
            answer = self.read_at(None).await?;
        }
        drop(answer);
        let sub = self.subscribe();
        if self.fill(sub.pos, u64::MAX).await? {
            return Ok(None);
        }
        Ok(Some(sub))
    }

    /// Reads and sends up to `to`; whether the stream closed on the way.
    /// (At most `piece` bytes a read, and `sse_frame_bytes`.)
    async fn fill(&mut self, to: u64, piece: u64) -> Result<bool, End> {
        while self.pos < to {
            let a = self.read_at(Some((to - self.pos).min(piece))).await?;
            if self.send_read(&a).await?.1 {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Reads from `pos`, at most `max` bytes; a refusal ends the reader
    /// (a deleted stream with an `error` event, as the origin does).
    async fn read_at(&mut self, max: Option<u64>) -> Result<Arc<Answer>, End> {
        let from = Offset(self.pos).to_string();
        let a = read(&self.state, &self.path, &from, max, self.accept)
            .await
            .map_err(|_| End::Stop)?;
        if a.status == StatusCode::NOT_FOUND {
            let _ = self.send(Bytes::from(shared::sse::deleted_event())).await;
            return Err(End::Stop);
        }
        if a.status != StatusCode::OK || a.header(h::STREAM_INCARNATION) != Some(&self.incarnation)
        {
            return Err(End::Stop);
        }
        Ok(a)
    }

    /// Sends one read answer as a data event and its control event (or, at
    /// the end with nothing sent yet, the control event alone). Returns
    /// whether it reached the end, and whether the stream is closed there.
    async fn send_read(&mut self, a: &Answer) -> Result<(bool, bool), End> {
        let next = next_offset(a).ok_or(End::Stop)?;
        let mut up_to_date = a.header(h::STREAM_UP_TO_DATE) == Some("true");
        let mut closed = a.header(h::STREAM_CLOSED) == Some("true");
        let (body, end) = if self.framing.text {
            cut_text(a.body.clone(), next)
        } else {
            (a.body.clone(), next)
        };
        if end != next {
            up_to_date = false;
            closed = false;
        }
        // The data event and its control event go out in one write, as the
        // origin sends them: a client reading up to the first complete
        // event never sees one without the other.
        let mut out = Vec::new();
        if end > self.pos {
            out = shared::sse::data_event(&body, self.framing.base64);
            self.state.metrics.served(body.len());
            self.pos = end;
        } else if self.announced && !closed {
            return Ok((up_to_date, closed));
        }
        out.extend_from_slice(&self.control(up_to_date, closed));
        self.announced = true;
        self.send(Bytes::from(out)).await?;
        Ok((up_to_date, closed))
    }

    fn control(&self, up_to_date: bool, closed: bool) -> Bytes {
        Bytes::from(control_event(&Control {
            stream_next_offset: Offset(self.pos).to_string(),
            stream_cursor: (!closed).then(|| cursor(&self.state.wall, self.cursor.as_deref())),
            up_to_date,
            stream_closed: closed,
        }))
    }

    /// A catch-up send: waits for the reader.
    async fn send(&mut self, bytes: Bytes) -> Result<(), End> {
        self.out.send(bytes).await.map_err(|_| End::Stop)
    }

    /// A live send: never waits; a full queue disconnects the reader.
    fn offer(&self, bytes: Bytes) -> Result<(), End> {
        let SseOut::Queue(out) = &self.out else {
            return Err(End::Stop);
        };
        match out.try_send(bytes) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full) => {
                self.state.metrics.sse_dropped_slow();
                Err(End::Stop)
            }
            Err(TrySendError::Closed) => Err(End::Stop),
        }
    }
}

/// The cursor of a control event (see `shared::cursor`), from the wall clock.
pub(crate) fn cursor(wall: &shell::clock::WallClock, client: Option<&str>) -> String {
    let now = wall.now_secs();
    let jitter = 1 + rand::random::<u64>() % shared::cursor::CURSOR_MAX_JITTER_SECS;
    shared::cursor::next_cursor(now, client, jitter).to_string()
}
