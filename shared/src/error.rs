//! The error model: a code a program can switch on, a message a person can
//! read, and the HTTP status both mean. Origin and edge render refusals from
//! this one table so they never disagree.

use serde::{Deserialize, Serialize};

/// Every error code a refusal may carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ErrorCode {
    BadRequest,
    InvalidOffset,
    InvalidJson,
    EmptyBody,
    NotFound,
    /// No snapshot, or not the latest one.
    SnapshotNotFound,
    MethodNotAllowed,
    StreamExists,
    ContentTypeMismatch,
    StreamClosed,
    StreamSeqConflict,
    ProducerSeqConflict,
    ProducerEpochStale,
    /// 409: a stream's producers are at their bound.
    ProducerLimit,
    /// 409: a stream has as many snapshot offsets with staged parts as it
    /// may; one must be published (or expire) first.
    StagingLimit,
    /// Another snapshot at the offset, a later one, or a failed
    /// `Stream-Snapshot-Match`.
    SnapshotConflict,
    /// 409: a fork whose path and source's path fall in different
    /// partitions of a region (not yet supported there).
    ForkAcrossPartitions,
    /// A rollback to before a snapshot that replaced the bytes before it.
    RestoreSnapshotGone,
    PreconditionFailed,
    Gone,
    /// 410: the stream was deleted, and forks of it still read its bytes
    /// (its path is taken until they go).
    StreamDeleted,
    PayloadTooLarge,
    /// 408: a request body stalled.
    RequestTimeout,
    RangeNotSatisfiable,
    /// 401: missing, unknown, expired or revoked credential.
    Unauthorized,
    /// 401: an agent key must be exchanged for a token first.
    ExchangeRequired,
    /// 403: the credential does not reach the stream, or reads only.
    Forbidden,
    RateLimited,
    Unavailable,
    /// 503 on `/readyz`: the server should not be sent requests now.
    NotReady,
    /// 404: no subscription by that id (protocol §6).
    SubscriptionNotFound,
    /// 409: a subscription by that id with another configuration.
    SubscriptionExists,
    /// 409: a subscription bound (subscriptions, linked streams) is reached.
    SubscriptionLimit,
    /// 400: a webhook URL that may not be called (protocol §12.8).
    WebhookUrlRejected,
    /// 401: a callback or claim token that is not this server's, or not
    /// for this subscription.
    TokenInvalid,
    TokenExpired,
    /// 409: not the subscription's current generation and wake (§7.3).
    Fenced,
    /// 409: another worker holds the subscription's lease.
    AlreadyClaimed,
    /// 409: a claim when no linked stream has pending work.
    NoPendingWork,
    Internal,
}

impl ErrorCode {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::BadRequest => "BAD_REQUEST",
            ErrorCode::InvalidOffset => "INVALID_OFFSET",
            ErrorCode::InvalidJson => "INVALID_JSON",
            ErrorCode::EmptyBody => "EMPTY_BODY",
            ErrorCode::NotFound => "STREAM_NOT_FOUND",
            ErrorCode::SnapshotNotFound => "SNAPSHOT_NOT_FOUND",
            ErrorCode::SnapshotConflict => "SNAPSHOT_CONFLICT",
            ErrorCode::MethodNotAllowed => "METHOD_NOT_ALLOWED",
            ErrorCode::StreamExists => "STREAM_EXISTS",
            ErrorCode::ContentTypeMismatch => "CONTENT_TYPE_MISMATCH",
            ErrorCode::StreamClosed => "STREAM_CLOSED",
            ErrorCode::StreamSeqConflict => "STREAM_SEQ_CONFLICT",
            ErrorCode::ProducerSeqConflict => "PRODUCER_SEQ_CONFLICT",
            ErrorCode::ProducerEpochStale => "PRODUCER_EPOCH_STALE",
            ErrorCode::ProducerLimit => "PRODUCER_LIMIT",
            ErrorCode::StagingLimit => "STAGING_LIMIT",
            ErrorCode::ForkAcrossPartitions => "FORK_ACROSS_PARTITIONS",
            ErrorCode::RestoreSnapshotGone => "RESTORE_SNAPSHOT_GONE",
            ErrorCode::PreconditionFailed => "INCARNATION_MISMATCH",
            ErrorCode::Gone => "OFFSET_TRIMMED",
            ErrorCode::StreamDeleted => "STREAM_DELETED",
            ErrorCode::PayloadTooLarge => "PAYLOAD_TOO_LARGE",
            ErrorCode::RequestTimeout => "REQUEST_TIMEOUT",
            ErrorCode::RangeNotSatisfiable => "RANGE_NOT_SATISFIABLE",
            ErrorCode::Unauthorized => "UNAUTHORIZED",
            ErrorCode::ExchangeRequired => "exchange_required",
            ErrorCode::Forbidden => "FORBIDDEN",
            ErrorCode::RateLimited => "RATE_LIMITED",
            ErrorCode::Unavailable => "UNAVAILABLE",
            ErrorCode::NotReady => "NOT_READY",
            ErrorCode::SubscriptionNotFound => "SUBSCRIPTION_NOT_FOUND",
            ErrorCode::SubscriptionExists => "SUBSCRIPTION_ALREADY_EXISTS",
            ErrorCode::SubscriptionLimit => "SUBSCRIPTION_LIMIT",
            ErrorCode::WebhookUrlRejected => "WEBHOOK_URL_REJECTED",
            ErrorCode::TokenInvalid => "TOKEN_INVALID",
            ErrorCode::TokenExpired => "TOKEN_EXPIRED",
            ErrorCode::Fenced => "FENCED",
            ErrorCode::AlreadyClaimed => "ALREADY_CLAIMED",
            ErrorCode::NoPendingWork => "NO_PENDING_WORK",
            ErrorCode::Internal => "INTERNAL",
        }
    }

    /// The HTTP status this code is answered with.
    pub fn status(self) -> u16 {
        match self {
            ErrorCode::BadRequest
            | ErrorCode::InvalidOffset
            | ErrorCode::InvalidJson
            | ErrorCode::EmptyBody
            | ErrorCode::WebhookUrlRejected => 400,
            ErrorCode::ProducerEpochStale | ErrorCode::Forbidden => 403,
            ErrorCode::Unauthorized
            | ErrorCode::ExchangeRequired
            | ErrorCode::TokenInvalid
            | ErrorCode::TokenExpired => 401,
            ErrorCode::NotFound | ErrorCode::SnapshotNotFound | ErrorCode::SubscriptionNotFound => {
                404
            }
            ErrorCode::MethodNotAllowed => 405,
            ErrorCode::StreamExists
            | ErrorCode::ContentTypeMismatch
            | ErrorCode::StreamClosed
            | ErrorCode::StreamSeqConflict
            | ErrorCode::ProducerSeqConflict
            | ErrorCode::ProducerLimit
            | ErrorCode::StagingLimit
            | ErrorCode::ForkAcrossPartitions
            | ErrorCode::RestoreSnapshotGone
            | ErrorCode::SnapshotConflict
            | ErrorCode::SubscriptionExists
            | ErrorCode::SubscriptionLimit
            | ErrorCode::Fenced
            | ErrorCode::AlreadyClaimed
            | ErrorCode::NoPendingWork => 409,
            ErrorCode::Gone | ErrorCode::StreamDeleted => 410,
            ErrorCode::PreconditionFailed => 412,
            ErrorCode::RequestTimeout => 408,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::RangeNotSatisfiable => 416,
            ErrorCode::RateLimited => 429,
            ErrorCode::Unavailable | ErrorCode::NotReady => 503,
            ErrorCode::Internal => 500,
        }
    }
}

/// `{"error":{"code":"…","message":"…"}}`
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorDetail {
    pub code: String,
    pub message: String,
    /// The request's id (`X-Request-Id`), where the server knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
}

impl ErrorBody {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorBody {
            error: ErrorDetail {
                code: code.as_str().to_owned(),
                message: message.into(),
                request_id: None,
            },
        }
    }

    /// The body, naming the request it answers.
    pub fn with_request_id(mut self, id: Option<String>) -> Self {
        self.error.request_id = id;
        self
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("error bodies always serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn body_shape() {
        let body = ErrorBody::new(ErrorCode::ContentTypeMismatch, "nope").to_json();
        assert_eq!(
            body,
            r#"{"error":{"code":"CONTENT_TYPE_MISMATCH","message":"nope"}}"#
        );
        assert_eq!(ErrorCode::ContentTypeMismatch.status(), 409);
        assert_eq!(
            ErrorCode::ProducerSeqConflict.as_str(),
            "PRODUCER_SEQ_CONFLICT"
        );
    }
}
