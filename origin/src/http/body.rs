//! Request bodies, bounded twice: each body by `max_body` (413), and all
//! bodies in memory together by the ingress budget, of which one client
//! holds at most its share (503 with `Retry-After` when a request cannot get
//! room in time; see [`super::ingress`]). This is where the memory bound for
//! large and many concurrent bodies lives.
//!
//! A body takes its room in the budget frame by frame, as its bytes arrive,
//! not for what it declares: clients that send a large `Content-Length` and
//! then nothing (or a trickle) hold only what they sent, and a body silent
//! for `body_idle_timeout` (the shell's `IdleBody`) answers 408 and lets go
//! of it. Before, 40 such connections held the whole 256 MiB budget, and
//! every append of every account answered 503 for as long as they stayed.
//!
//! Its client's share is taken for the whole declared length at once, so a
//! client's bodies pass whole or wait whole instead of each holding part of
//! the share while waiting for the rest. A body that then pauses for
//! [`SHARE_STALL`] gives back the part of the share it has not sent, and
//! takes share as its bytes arrive from then on: a trickle holds only what
//! it sent, of the share too.
//!
//! A refused body is read to its end and dropped (up to a bound) before the
//! 413 goes out: a server that closes a connection with request bytes still
//! unread resets it, and a client that is still sending then sees a broken
//! pipe instead of the refusal (the "lingering close" of other servers).

use std::time::Duration;

use futures::FutureExt;

use super::error::ApiError;
use super::ingress::{ClientKey, Room};
use super::AppState;
use axum::body::Body;
use axum::extract::Request;
use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;

/// A request body and the room it holds in the ingress budget.
pub struct BoundedBody<'a> {
    pub bytes: Bytes,
    _room: Room<'a>,
}

pub async fn read_body(state: &AppState, req: Request) -> Result<BoundedBody<'_>, ApiError> {
    let limit = state.config.max_body;
    // The length hyper read from `Content-Length` (none for a chunked
    // body), without looking the header up again.
    let declared = http_body::Body::size_hint(req.body()).exact();
    if declared.is_some_and(|n| n > limit) {
        // A client that waits for `100 Continue` never sends this body.
        let waits = req
            .headers()
            .get(http::header::EXPECT)
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"100-continue"));
        if !waits {
            Box::pin(discard(req.into_body(), limit)).await;
        }
        return Err(ApiError::PayloadTooLarge { limit });
    }
    if declared == Some(0) {
        return Ok(BoundedBody {
            bytes: Bytes::new(),
            _room: Room::default(),
        });
    }
    let client = super::ingress::client_of(state, &req);
    // A body of known length takes its client's share for all of it at
    // once: bodies of one client then pass whole or wait whole, instead of
    // each holding part of the share and waiting for the others. The
    // budget is still taken as bytes arrive.
    let mut room = Room::default();
    if let Some(n) = declared {
        room.merge(Room::of_share(state.ingress.share_room(&client, n).await?));
    }
    let shared = declared.is_some();
    let mut body: Body = req.into_body();
    let bytes = match gather(state, &client, shared, &mut body, limit, &mut room).await {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            drop(room);
            Box::pin(discard(body, limit)).await;
            return Err(ApiError::PayloadTooLarge { limit });
        }
        Err(e) => return Err(e),
    };
    Ok(BoundedBody { bytes, _room: room })
}

type Next = Option<Result<http_body::Frame<Bytes>, axum::Error>>;

/// The body's next frame; a body silent for `body_idle_timeout` (the
/// shell's [`shell::IdleBody`]) answers 408.
async fn next_frame(body: &mut Body) -> Result<Next, ApiError> {
    seen(body.frame().await)
}

/// A frame as read: the idle error becomes 408.
fn seen(frame: Next) -> Result<Next, ApiError> {
    match frame {
        Some(Err(e)) => match shell::BodyIdle::find(&e) {
            Some(idle) => Err(ApiError::BodyTimeout(idle.0)),
            None => Ok(Some(Err(e))),
        },
        frame => Ok(frame),
    }
}

/// The body's bytes, or `None` past `limit`. A body that arrives in one
/// frame (most small appends) is kept as that frame, without a copy or a
/// list of frames; a longer one is gathered into one buffer.
/// (Trailers are read past and dropped: no operation uses them.)
async fn gather<'a>(
    state: &'a AppState,
    client: &ClientKey,
    shared: bool,
    body: &mut Body,
    limit: u64,
    held: &mut Room<'a>,
) -> Result<Option<Bytes>, ApiError> {
    let mut one: Option<Bytes> = None;
    let mut many = BytesMut::new();
    let mut shared = shared;
    loop {
        let frame = match body.frame().now_or_never() {
            Some(frame) => seen(frame)?,
            // Room taken ahead for bytes that do not come yet: after a
            // pause, only what was sent stays taken.
            None if shared => match tokio::time::timeout(SHARE_STALL, next_frame(body)).await {
                Ok(frame) => frame?,
                Err(_) => {
                    held.shrink_share(one.as_ref().map_or(many.len(), Bytes::len) as u64);
                    shared = false;
                    next_frame(body).await?
                }
            },
            None => next_frame(body).await?,
        };
        let Some(frame) = frame else {
            break;
        };
        let frame =
            frame.map_err(|e| ApiError::bad(format!("could not read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        let len = one.as_ref().map_or(many.len(), Bytes::len) + data.len();
        if len as u64 > limit {
            return Ok(None);
        }
        // Room for what arrived, before it is kept.
        let n = data.len() as u64;
        held.merge(match shared {
            true => state.ingress.memory(n).await?,
            false => state.ingress.reserve(client, n).await?,
        });
        match one.take() {
            None if many.is_empty() => one = Some(data),
            None => many.extend_from_slice(&data),
            Some(first) => {
                many.reserve(len);
                many.extend_from_slice(&first);
                many.extend_from_slice(&data);
            }
        }
        // A body of known length ends with its last byte: asking for the
        // end once more would cost another trip through the body's layers.
        if http_body::Body::is_end_stream(body) {
            break;
        }
    }
    Ok(Some(one.unwrap_or_else(|| many.freeze())))
}

/// A body that sends nothing for this long keeps only the share it used.
pub const SHARE_STALL: Duration = Duration::from_secs(1);

/// How long a refused body may take to arrive before the connection is
/// closed on it anyway.
pub const DISCARD_WITHIN: Duration = Duration::from_secs(5);

/// Reads what is left of a refused body and drops it, up to `2 × limit`
/// bytes and [`DISCARD_WITHIN`]; past either, hyper closes the connection.
async fn discard(mut body: Body, limit: u64) {
    let mut left = limit.saturating_mul(2);
    let drain = async {
        while let Some(Ok(frame)) = body.frame().await {
            let n = frame.data_ref().map_or(0, |d| d.len() as u64);
            left = left.saturating_sub(n);
            if left == 0 {
                return;
            }
        }
    };
    let _ = tokio::time::timeout(DISCARD_WITHIN, drain).await;
}
