//! Header names of the protocol. Lowercase, as HTTP/2 sends them; `http`
//! compares header names case-insensitively anyway.

pub const STREAM_NEXT_OFFSET: &str = "stream-next-offset";
pub const STREAM_OFFSET: &str = "stream-offset";
pub const STREAM_UP_TO_DATE: &str = "stream-up-to-date";
pub const STREAM_CLOSED: &str = "stream-closed";
pub const STREAM_CURSOR: &str = "stream-cursor";
pub const STREAM_TTL: &str = "stream-ttl";
pub const STREAM_EXPIRES_AT: &str = "stream-expires-at";
pub const STREAM_SEQ: &str = "stream-seq";
pub const STREAM_INCARNATION: &str = "stream-incarnation";
pub const STREAM_RETAINED_OFFSET: &str = "stream-retained-offset";
pub const STREAM_SNAPSHOT_OFFSET: &str = "stream-snapshot-offset";
pub const STREAM_SNAPSHOT_DIGEST: &str = "stream-snapshot-digest";
pub const STREAM_IMMUTABLE: &str = "stream-immutable";
pub const STREAM_DATA_CONTENT_TYPE: &str = "stream-data-content-type";
pub const STREAM_SSE_DATA_ENCODING: &str = "stream-sse-data-encoding";
pub const PRODUCER_ID: &str = "producer-id";
pub const PRODUCER_EPOCH: &str = "producer-epoch";
pub const PRODUCER_SEQ: &str = "producer-seq";
pub const PRODUCER_EXPECTED_SEQ: &str = "producer-expected-seq";
pub const PRODUCER_RECEIVED_SEQ: &str = "producer-received-seq";
pub const PRODUCER_OUTCOME: &str = "producer-outcome";
pub const MAX_REQUEST_BYTES: &str = "ursula-max-request-bytes";
pub const MAX_SNAPSHOT_BYTES: &str = "ursula-max-snapshot-bytes";

/// Headers a browser may read from a cross-origin answer.
pub const EXPOSED: &str = "stream-next-offset, stream-offset, stream-up-to-date, stream-closed, \
stream-cursor, stream-ttl, stream-expires-at, stream-seq, stream-incarnation, stream-retained-offset, \
stream-snapshot-offset, stream-snapshot-digest, stream-immutable, stream-data-content-type, \
stream-sse-data-encoding, producer-epoch, producer-seq, producer-expected-seq, producer-received-seq, \
producer-outcome, ursula-max-request-bytes, ursula-max-snapshot-bytes, etag, location, retry-after, content-type";
