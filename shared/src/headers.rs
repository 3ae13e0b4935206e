//! Header names of the protocol, as ready-made `HeaderName`s (parsing a name
//! from a string on every answer showed up in profiles). Lowercase, as
//! HTTP/2 sends them; `http` compares names case-insensitively anyway.

use http::HeaderName;

/// On an answer a region's follower forwarded: the owner's URL, so an edge
/// that lists it among its origins sends there from then on (one hop
/// fewer). The edge drops it from what it passes on.
pub const REGION_OWNER: HeaderName = HeaderName::from_static("ds-region-owner");
/// A region's partition count (`shared::partition`), on its forwarded
/// answers and its invalidation feed's, when it has more than one.
pub const REGION_PARTITIONS: HeaderName = HeaderName::from_static("ds-region-partitions");
/// The region's peer key, which one origin's requests to another carry
/// (an origin asks nothing else of them: see `origin::region::peer_key`).
pub const REGION_PEER: HeaderName = HeaderName::from_static("ds-region-peer");
/// On a client's request a follower forwards to the partition's owner: the
/// client's address as the follower saw it, so the owner's per-client
/// shares count the client rather than the follower. Believed only beside
/// [`REGION_VIA`] carrying the region's peer key; dropped otherwise.
pub const REGION_CLIENT: HeaderName = HeaderName::from_static("ds-region-client");
/// The region's peer key on a client's request a follower forwarded: it
/// vouches for [`REGION_CLIENT`] and for nothing else (the request is still
/// the client's, admitted by the client's own credential).
pub const REGION_VIA: HeaderName = HeaderName::from_static("ds-region-via");
pub const STREAM_NEXT_OFFSET: HeaderName = HeaderName::from_static("stream-next-offset");
pub const STREAM_OFFSET: HeaderName = HeaderName::from_static("stream-offset");
pub const STREAM_UP_TO_DATE: HeaderName = HeaderName::from_static("stream-up-to-date");
pub const STREAM_CLOSED: HeaderName = HeaderName::from_static("stream-closed");
pub const STREAM_CURSOR: HeaderName = HeaderName::from_static("stream-cursor");
pub const STREAM_TTL: HeaderName = HeaderName::from_static("stream-ttl");
pub const STREAM_EXPIRES_AT: HeaderName = HeaderName::from_static("stream-expires-at");
pub const STREAM_SEQ: HeaderName = HeaderName::from_static("stream-seq");
pub const STREAM_INCARNATION: HeaderName = HeaderName::from_static("stream-incarnation");
pub const STREAM_RETAINED_OFFSET: HeaderName = HeaderName::from_static("stream-retained-offset");
pub const STREAM_SNAPSHOT_OFFSET: HeaderName = HeaderName::from_static("stream-snapshot-offset");
pub const STREAM_SNAPSHOT_DIGEST: HeaderName = HeaderName::from_static("stream-snapshot-digest");
pub const STREAM_READ_ORIGIN: HeaderName = HeaderName::from_static("stream-read-origin");
pub const STREAM_IMMUTABLE: HeaderName = HeaderName::from_static("stream-immutable");
/// After a rollback: the incarnation the stream had before it, and the
/// offset below which its bytes are that incarnation's.
pub const STREAM_PREVIOUS_INCARNATION: HeaderName =
    HeaderName::from_static("stream-previous-incarnation");
pub const STREAM_INHERITED_OFFSET: HeaderName = HeaderName::from_static("stream-inherited-offset");
/// A rollback's point (request-only).
pub const STREAM_RESTORE_OFFSET: HeaderName = HeaderName::from_static("stream-restore-offset");
/// `true`: anyone may read the stream without a credential.
/// The fork headers of a `PUT` (protocol §4.2): request-only.
pub const STREAM_FORKED_FROM: HeaderName = HeaderName::from_static("stream-forked-from");
pub const STREAM_FORK_OFFSET: HeaderName = HeaderName::from_static("stream-fork-offset");
pub const STREAM_FORK_SUB_OFFSET: HeaderName = HeaderName::from_static("stream-fork-sub-offset");
pub const STREAM_PUBLIC: HeaderName = HeaderName::from_static("stream-public");
/// Publish only if the latest snapshot has this digest.
pub const STREAM_SNAPSHOT_MATCH: HeaderName = HeaderName::from_static("stream-snapshot-match");
/// Publish the staged parts `0..N` of a snapshot.
pub const STREAM_SNAPSHOT_PARTS: HeaderName = HeaderName::from_static("stream-snapshot-parts");
pub const STREAM_DATA_CONTENT_TYPE: HeaderName =
    HeaderName::from_static("stream-data-content-type");
pub const STREAM_SSE_DATA_ENCODING: HeaderName =
    HeaderName::from_static("stream-sse-data-encoding");
pub const PRODUCER_ID: HeaderName = HeaderName::from_static("producer-id");
pub const PRODUCER_EPOCH: HeaderName = HeaderName::from_static("producer-epoch");
pub const PRODUCER_SEQ: HeaderName = HeaderName::from_static("producer-seq");
pub const PRODUCER_EXPECTED_SEQ: HeaderName = HeaderName::from_static("producer-expected-seq");
pub const PRODUCER_RECEIVED_SEQ: HeaderName = HeaderName::from_static("producer-received-seq");
pub const PRODUCER_OUTCOME: HeaderName = HeaderName::from_static("producer-outcome");
pub const MAX_REQUEST_BYTES: HeaderName = HeaderName::from_static("ursula-max-request-bytes");
pub const MAX_SNAPSHOT_BYTES: HeaderName = HeaderName::from_static("ursula-max-snapshot-bytes");

/// Headers a browser may read from a cross-origin answer.
pub const EXPOSED: &str = "stream-next-offset, stream-offset, stream-up-to-date, stream-closed, \
stream-cursor, stream-ttl, stream-expires-at, stream-seq, stream-incarnation, stream-retained-offset, \
stream-snapshot-offset, stream-snapshot-digest, stream-read-origin, stream-immutable, stream-public, stream-data-content-type, \
stream-previous-incarnation, stream-inherited-offset, \
stream-sse-data-encoding, producer-epoch, producer-seq, producer-expected-seq, producer-received-seq, \
producer-outcome, ursula-max-request-bytes, ursula-max-snapshot-bytes, etag, location, retry-after, content-type, \
x-request-id";

/// The browser-safety headers of an answer that may have a body:
/// `nosniff`, a resource policy that lets pages on other origins read it,
/// and `Content-Security-Policy: sandbox`.
pub fn insert_safety(h: &mut http::HeaderMap) {
    const CORP: HeaderName = HeaderName::from_static("cross-origin-resource-policy");
    h.insert(
        http::header::X_CONTENT_TYPE_OPTIONS,
        http::HeaderValue::from_static("nosniff"),
    );
    h.insert(CORP, http::HeaderValue::from_static("cross-origin"));
    // A stream of `text/html` or `image/svg+xml` is whatever its writers
    // sent: opened in a browser from the API's own origin it would run
    // their scripts there (stored XSS). Sandboxed, it runs nothing and has
    // an origin of its own. No answer of this API is a page meant to run.
    h.insert(
        http::header::CONTENT_SECURITY_POLICY,
        http::HeaderValue::from_static("sandbox"),
    );
}

/// CORS for any origin: credentials travel in `Authorization`, never in
/// cookies, so `*` is right, and it keeps answers shareable by caches.
pub fn insert_cors(h: &mut http::HeaderMap) {
    h.insert(
        http::header::ACCESS_CONTROL_ALLOW_ORIGIN,
        http::HeaderValue::from_static("*"),
    );
    h.insert(
        http::header::ACCESS_CONTROL_EXPOSE_HEADERS,
        http::HeaderValue::from_static(EXPOSED),
    );
}
