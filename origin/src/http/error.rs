//! Every refusal the HTTP layer gives, mapped to a status, headers and the
//! JSON error body in this one place. Internal causes are logged, never shown.

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode};
use axum::response::IntoResponse;
use shared::error::{ErrorBody, ErrorCode};
use shared::headers as h;
use shared::offset::Offset;

use crate::core::fork::ForkRefusal;
use crate::core::producer::ProducerRefusal;
use crate::core::restore::RestoreRefusal;
use crate::core::snapshot::{RetainRefusal, SnapshotRefusal};
use crate::core::staging::StagingRefusal;
use crate::core::stream::AppendRefusal;
use crate::store::{End, StoreError};

#[derive(Debug)]
pub enum ApiError {
    /// A malformed request, with the code and what was wrong.
    Invalid(ErrorCode, String),
    NotFound,
    Store(StoreError),
    PayloadTooLarge {
        limit: u64,
    },
    /// The read offset is past the stream's end.
    OffsetBeyondTail {
        tail: u64,
    },
    /// The read's `min_next_offset` is past the stream's end, at the
    /// owner: the write it names is not in this stream (decision 0025).
    FloorBeyondEnd {
        end: u64,
    },
    /// The read offset is before the stream's retention.
    Gone {
        retained: u64,
    },
    /// The server cannot take the request for a moment.
    Busy(&'static str),
    /// A snapshot part the staging bounds refuse.
    Staging(StagingRefusal),
    /// The request's body sent nothing for this long (408).
    BodyTimeout(std::time::Duration),
    /// Access control refused the request.
    Denied(shared::auth::Denied),
    /// The account is over a limit: retry after this many seconds.
    RateLimited(u64),
    /// A refusal already rendered (with headers of its own).
    Ready(Box<Response<Body>>),
    Internal(String),
}

impl ApiError {
    pub fn bad(msg: impl Into<String>) -> Self {
        ApiError::Invalid(ErrorCode::BadRequest, msg.into())
    }
}

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::NotFound => ApiError::NotFound,
            other => ApiError::Store(other),
        }
    }
}

/// A subscription operation's refusal (protocol §6–7): codes as the
/// reference server names them.
impl From<crate::subscriptions::Error> for ApiError {
    fn from(e: crate::subscriptions::Error) -> Self {
        use crate::subscriptions::Error as E;
        let code = match &e {
            E::Store(_) => {
                let E::Store(store) = e else { unreachable!() };
                return ApiError::from(store);
            }
            E::Journal(why) => {
                tracing::warn!(error = %why, "a subscription change could not be made durable");
                return ApiError::Busy("the subscription could not be changed now; retry shortly");
            }
            E::Busy(why) => return ApiError::Busy(why),
            E::AlreadyClaimed { holder, generation } => {
                let body = serde_json::json!({"error": {
                    "code": ErrorCode::AlreadyClaimed.as_str(),
                    "message": "another worker holds the subscription's lease",
                    "current_holder": holder,
                    "generation": generation,
                }});
                let mut r = error_response(ErrorCode::AlreadyClaimed, "");
                *r.body_mut() = Body::from(body.to_string());
                return ApiError::Ready(Box::new(r));
            }
            E::Invalid(_) => ErrorCode::BadRequest,
            E::UrlRejected(_) => ErrorCode::WebhookUrlRejected,
            E::NotFound | E::Unserved => ErrorCode::SubscriptionNotFound,
            E::Exists => ErrorCode::SubscriptionExists,
            E::Limit(_) => ErrorCode::SubscriptionLimit,
            E::TokenInvalid => ErrorCode::TokenInvalid,
            E::TokenExpired => ErrorCode::TokenExpired,
            E::Fenced => ErrorCode::Fenced,
            E::NoPendingWork => ErrorCode::NoPendingWork,
            E::BadAck(_) => ErrorCode::InvalidOffset,
        };
        ApiError::Invalid(code, e.to_string())
    }
}

impl From<crate::store::ReadError> for ApiError {
    fn from(e: crate::store::ReadError) -> Self {
        match e {
            crate::store::ReadError::Io(e) => e.into(),
            crate::store::ReadError::ChunkCache(e) => {
                tracing::warn!(error = %e, "a read needs a chunk object storage cannot give now");
                ApiError::Busy("a sealed chunk cannot be read from object storage right now")
            }
        }
    }
}

/// No descriptor free (every one held by connections, say) passes once
/// some close: `503` + `Retry-After`, never a 500; the server goes on with
/// what needs none (`tests/fd_exhaustion.rs`).
impl From<std::io::Error> for ApiError {
    fn from(e: std::io::Error) -> Self {
        if crate::store::is_out_of_descriptors(&e) {
            tracing::warn!(error = %e, "no file descriptor free for a request");
            return ApiError::Busy("the server has no file descriptor free; retry shortly");
        }
        ApiError::Internal(e.to_string())
    }
}

use super::reading::set;

fn tail_headers(resp: &mut Response<Body>, tail: &End) {
    set(resp, h::STREAM_NEXT_OFFSET, Offset(tail.next));
    if tail.closed {
        set(resp, h::STREAM_CLOSED, "true");
    }
}

pub fn error_response(code: ErrorCode, message: impl Into<String>) -> Response<Body> {
    let body = ErrorBody::new(code, message)
        .with_request_id(shell::request_id::current_id())
        .to_json();
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = StatusCode::from_u16(code.status()).expect("valid status");
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp.headers_mut()
        .insert("cache-control", HeaderValue::from_static("no-store"));
    resp
}

impl axum::response::IntoResponse for ApiError {
    fn into_response(self) -> Response<Body> {
        match self {
            ApiError::Invalid(code, msg) => error_response(code, msg),
            ApiError::NotFound => error_response(ErrorCode::NotFound, "the stream does not exist"),
            ApiError::PayloadTooLarge { limit } => error_response(
                ErrorCode::PayloadTooLarge,
                format!("the body is over the limit of {limit} bytes"),
            ),
            ApiError::OffsetBeyondTail { tail } => {
                let mut r = error_response(
                    ErrorCode::RangeNotSatisfiable,
                    "the offset is past the end of the stream",
                );
                set(&mut r, h::STREAM_NEXT_OFFSET, Offset(tail));
                r
            }
            ApiError::FloorBeyondEnd { end } => {
                let mut r = error_response(
                    ErrorCode::RangeNotSatisfiable,
                    format!(
                        "min_next_offset is past the end of the stream ({}): the write it names is not in this stream",
                        Offset(end)
                    ),
                );
                set(&mut r, h::STREAM_NEXT_OFFSET, Offset(end));
                r
            }
            ApiError::Gone { retained } => {
                let mut r = error_response(
                    ErrorCode::Gone,
                    format!(
                        "the offset is before the stream's retention; read from {}",
                        Offset(retained)
                    ),
                );
                set(&mut r, h::STREAM_RETAINED_OFFSET, Offset(retained));
                set(&mut r, h::STREAM_NEXT_OFFSET, Offset(retained));
                r
            }
            ApiError::Busy(why) => {
                let mut r = error_response(ErrorCode::Unavailable, why);
                set(&mut r, "retry-after", 1);
                r
            }
            ApiError::BodyTimeout(idle) => {
                let mut r = error_response(
                    ErrorCode::RequestTimeout,
                    format!("the request body sent nothing for {} s", idle.as_secs_f64()),
                );
                // What is left of the body is not read: the connection goes.
                set(&mut r, "connection", "close");
                r
            }
            ApiError::Internal(cause) => {
                tracing::error!(%cause, "internal error");
                error_response(ErrorCode::Internal, "internal error")
            }
            ApiError::Store(e) => store_error(e),
            ApiError::Staging(refusal) => staging_refusal(refusal),
            ApiError::Ready(r) => *r,
            ApiError::Denied(d) => denied(d),
            ApiError::RateLimited(secs) => {
                let mut r =
                    error_response(ErrorCode::RateLimited, shared::auth::RATE_LIMITED_MESSAGE);
                set(&mut r, "retry-after", secs);
                r
            }
        }
    }
}

impl From<crate::auth::Refusal> for ApiError {
    fn from(r: crate::auth::Refusal) -> Self {
        match r {
            crate::auth::Refusal::Denied(d) => ApiError::Denied(d),
            crate::auth::Refusal::RateLimited(after) => ApiError::RateLimited(after.0),
        }
    }
}

fn denied(d: shared::auth::Denied) -> Response<Body> {
    let (code, message) = d.answer();
    let mut r = error_response(code, message);
    if code.status() == 401 {
        set(&mut r, "www-authenticate", "Bearer");
    }
    r
}

/// The one mapping of the store's errors to answers: one arm per error,
/// long by design.
fn store_error(e: StoreError) -> Response<Body> {
    match e {
        StoreError::NotFound => error_response(ErrorCode::NotFound, "the stream does not exist"),
        StoreError::IncarnationMismatch { current, restored } => {
            let mut r = error_response(
                ErrorCode::PreconditionFailed,
                match restored {
                    Some(_) => "the stream was rolled back since: it keeps the previous incarnation's bytes below Stream-Inherited-Offset",
                    None => "the stream was deleted and created again since",
                },
            );
            set(&mut r, h::STREAM_INCARNATION, current);
            if let Some((previous, at)) = restored.map(|b| *b) {
                set(&mut r, h::STREAM_PREVIOUS_INCARNATION, previous);
                set(&mut r, h::STREAM_INHERITED_OFFSET, Offset(at));
            }
            r
        }
        StoreError::ConfigMismatch => error_response(
            ErrorCode::StreamExists,
            "the stream exists with a different content type, expiry or closed state",
        ),
        StoreError::ShuttingDown => {
            let mut r = error_response(ErrorCode::Unavailable, "the server is shutting down");
            set(&mut r, "retry-after", 1);
            r
        }
        StoreError::SealingBehind => {
            let mut r = error_response(
                ErrorCode::Unavailable,
                "object storage is behind; appends resume once sealing catches up",
            );
            set(&mut r, "retry-after", 5);
            r
        }
        StoreError::Refused { refusal, end } => refusal_response(refusal, &end),
        StoreError::SnapshotRefused(refusal) => snapshot_refusal(refusal),
        StoreError::LogFull => {
            let mut r = error_response(
                ErrorCode::Unavailable,
                "the server's disk is full; writes resume once it has space",
            );
            set(&mut r, "retry-after", 5);
            r
        }
        StoreError::ObjectStoreSlow => {
            let mut r = error_response(
                ErrorCode::Unavailable,
                "object storage did not take the write in time; it may still be applied, so retry with the same producer headers",
            );
            set(&mut r, "retry-after", 1);
            r
        }
        StoreError::ReplicaDiverged(_) => {
            let mut r = error_response(
                ErrorCode::Unavailable,
                "this origin's copy of the stream's partition is being rebuilt; retry shortly",
            );
            set(&mut r, "retry-after", 1);
            r
        }
        StoreError::OwnershipUnconfirmed => {
            let mut r = error_response(
                ErrorCode::Unavailable,
                "object storage did not confirm in time that this origin still owns the stream's partition; retry shortly",
            );
            set(&mut r, "retry-after", 1);
            r
        }
        StoreError::Fenced => {
            let mut r = error_response(
                ErrorCode::Unavailable,
                "this origin no longer owns the stream's partition; another origin of the region serves it",
            );
            set(&mut r, "retry-after", 1);
            r
        }
        StoreError::SoftDeleted => error_response(
            ErrorCode::StreamDeleted,
            "the stream was deleted; forks of it still read its bytes, and its path is taken until they go",
        ),
        StoreError::ForkSourceDeleted => error_response(
            ErrorCode::StreamExists,
            "the fork's source was deleted (forks of it still read it, but no new fork can be made)",
        ),
        StoreError::ForkRefused(ForkRefusal::ContentTypeMismatch { source }) => error_response(
            ErrorCode::ContentTypeMismatch,
            format!("a fork has its source's content type, {source:?}"),
        ),
        StoreError::ForkRefused(ForkRefusal::BeyondTail { tail }) => {
            let mut r = error_response(
                ErrorCode::InvalidOffset,
                "the fork point is past the source's end",
            );
            set(&mut r, h::STREAM_NEXT_OFFSET, Offset(tail));
            r
        }
        StoreError::ForkRefused(ForkRefusal::TooDeep { max }) => error_response(
            ErrorCode::BadRequest,
            format!("the source is a fork {max} deep: forks chain at most {max} deep"),
        ),
        StoreError::ForkRefused(ForkRefusal::SubOffsetTooFar { limit }) => error_response(
            ErrorCode::BadRequest,
            format!("a JSON sub-offset must end within {limit} bytes of its anchor"),
        ),
        StoreError::RestoreRefused(RestoreRefusal::Trimmed { retained }) => {
            ApiError::Gone { retained }.into_response()
        }
        StoreError::RestoreRefused(RestoreRefusal::BeyondEnd { end }) => {
            let mut r = error_response(
                ErrorCode::InvalidOffset,
                "the rollback point is past the stream's end",
            );
            set(&mut r, h::STREAM_NEXT_OFFSET, Offset(end));
            r
        }
        StoreError::RestoreRefused(RestoreRefusal::SnapshotGone { snapshot }) => error_response(
            ErrorCode::RestoreSnapshotGone,
            format!(
                "the stream's bytes before its snapshot at {} are gone: it cannot be rolled back to before that snapshot",
                Offset(snapshot)
            ),
        ),
        StoreError::RetainRefused(RetainRefusal::NotLatestSnapshot) => error_response(
            ErrorCode::SnapshotNotFound,
            "retention advances only to the latest snapshot's offset",
        ),
        StoreError::RetainRefused(RetainRefusal::Backwards { retained }) => {
            let mut r = error_response(
                ErrorCode::SnapshotConflict,
                "retention never moves backwards",
            );
            set(&mut r, h::STREAM_RETAINED_OFFSET, Offset(retained));
            r
        }
    }
}

fn snapshot_refusal(refusal: SnapshotRefusal) -> Response<Body> {
    match refusal {
        SnapshotRefusal::BeyondTail { tail } => {
            let mut r = error_response(
                ErrorCode::SnapshotConflict,
                "the snapshot offset is past the end of the stream",
            );
            set(&mut r, h::STREAM_NEXT_OFFSET, Offset(tail));
            r
        }
        SnapshotRefusal::BeforeRetained { retained } => ApiError::Gone { retained }.into_response(),
        SnapshotRefusal::MatchFailed => error_response(
            ErrorCode::SnapshotConflict,
            "Stream-Snapshot-Match does not name the latest snapshot",
        ),
        SnapshotRefusal::Conflict => error_response(
            ErrorCode::SnapshotConflict,
            "another snapshot is published at this offset or a later one",
        ),
    }
}

fn staging_refusal(refusal: StagingRefusal) -> Response<Body> {
    match refusal {
        StagingRefusal::TooManyUploads { max } => error_response(
            ErrorCode::StagingLimit,
            format!(
                "the stream has parts staged for {max} snapshot offsets; publish one (or let it expire) before staging another"
            ),
        ),
        StagingRefusal::TooLarge { limit } => ApiError::PayloadTooLarge { limit }.into_response(),
        StagingRefusal::Full { .. } => {
            let mut r = error_response(
                ErrorCode::Unavailable,
                "the server holds as many staged snapshot parts as it may; retry once others are published or expire",
            );
            set(&mut r, "retry-after", 5);
            r
        }
        StagingRefusal::PartBusy { part } => {
            let mut r = error_response(
                ErrorCode::Unavailable,
                format!("part {part} of this snapshot is being staged by another request"),
            );
            set(&mut r, "retry-after", 1);
            r
        }
    }
}

fn refusal_response(refusal: AppendRefusal, tail: &End) -> Response<Body> {
    match refusal {
        AppendRefusal::Closed => {
            let mut r = error_response(ErrorCode::StreamClosed, "the stream is closed");
            tail_headers(&mut r, tail);
            r
        }
        AppendRefusal::ContentTypeMismatch { expected } => error_response(
            ErrorCode::ContentTypeMismatch,
            format!("the stream's content type is {expected}"),
        ),
        AppendRefusal::StreamSeqConflict { last } => {
            let mut r = error_response(
                ErrorCode::StreamSeqConflict,
                format!("Stream-Seq must be greater than {last:?}"),
            );
            set(&mut r, h::STREAM_NEXT_OFFSET, Offset(tail.next));
            r
        }
        AppendRefusal::Producer(ProducerRefusal::StaleEpoch { current }) => {
            let mut r = error_response(
                ErrorCode::ProducerEpochStale,
                format!("a newer epoch ({current}) took over this producer"),
            );
            set(&mut r, h::PRODUCER_EPOCH, current);
            set(&mut r, h::PRODUCER_OUTCOME, "stale-epoch");
            r
        }
        AppendRefusal::Producer(ProducerRefusal::NewEpochNotAtZero) => {
            let mut r = error_response(
                ErrorCode::BadRequest,
                "a new producer epoch starts at Producer-Seq 0",
            );
            set(&mut r, h::PRODUCER_OUTCOME, "invalid");
            r
        }
        AppendRefusal::Producer(ProducerRefusal::TooMany { max }) => {
            let mut r = error_response(
                ErrorCode::ProducerLimit,
                format!("the stream has {max} producers; a new one waits until one has been idle for 7 days"),
            );
            set(&mut r, h::PRODUCER_OUTCOME, "invalid");
            r
        }
        AppendRefusal::Producer(ProducerRefusal::SeqGap { expected, received }) => {
            let mut r = error_response(
                ErrorCode::ProducerSeqConflict,
                format!("expected Producer-Seq {expected}, received {received}"),
            );
            set(&mut r, h::PRODUCER_EXPECTED_SEQ, expected);
            set(&mut r, h::PRODUCER_RECEIVED_SEQ, received);
            set(&mut r, h::PRODUCER_OUTCOME, "sequence-gap");
            r
        }
    }
}
