//! Route strings and header lists of the HTTP surface, in one place.

pub use shell::ready::{HEALTH, METRICS, READY};

/// Request headers a browser may send cross-origin.
pub const ALLOWED_REQUEST_HEADERS: &str = "content-type, authorization, if-none-match, stream-seq, stream-ttl, \
stream-expires-at, stream-closed, stream-incarnation, producer-id, producer-epoch, producer-seq, accept, cache-control, range, \
stream-snapshot-match, stream-snapshot-parts, stream-public, stream-forked-from, stream-fork-offset, \
stream-fork-sub-offset, stream-restore-offset";
