//! The origin's invalidation feed: what makes something an edge cached
//! wrong from one moment on. A stream deleted (or expired), created, whose
//! retention advanced or whose latest snapshot was replaced, is one
//! [`Invalidation`]; the origin numbers
//! them in order and edges tail them (`GET /_invalidations`), so an edge
//! learns within a round trip that it may no longer answer for a stream
//! from what it keeps (`docs/decisions/0006-edge-invalidation.md`).
//!
//! The feed names streams by [`stream_id`], a hash of the path, not by the
//! path: it is readable without a credential, and names no stream that a
//! reader does not already know.
//!
//! Wire form: the feed reads like a stream of our protocol. A long-poll
//! from a position answers the events from there as NDJSON (one
//! [`Invalidation`] per line) with `Stream-Next-Offset` naming the next
//! position, `204` when none came within `timeout_ms`; `Stream-Incarnation`
//! names the origin process (its feed starts again empty at a restart), and
//! a request naming another answers `412`; a position the origin no longer
//! keeps answers `410`. Either tells an edge it missed events.

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The feed's path at the origin.
pub const PATH: &str = "/_invalidations";

/// The most events one answer carries.
pub const MAX_EVENTS_PER_ANSWER: usize = 1024;

/// What happened to a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    /// The incarnation is gone (deleted, or expired): nothing of it may be
    /// served any more.
    Deleted,
    /// A new incarnation exists at the path.
    Created,
    /// Reads before `retained` answer `410` from now on.
    Retained,
    /// A newer snapshot replaced the latest one: the old one's cacheable
    /// URL answers `404` from now on.
    #[serde(rename = "snapshot")]
    SnapshotReplaced,
}

/// One event of the feed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Invalidation {
    /// Its position in the feed.
    pub seq: u64,
    /// [`stream_id`] of the stream's path.
    pub stream: u64,
    pub incarnation: String,
    pub change: Change,
    /// The retained offset, for [`Change::Retained`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retained: Option<u64>,
}

/// The feed's name for a stream path: the first 8 bytes of its SHA-256.
pub fn stream_id(path: &str) -> u64 {
    let hash = Sha256::digest(path.as_bytes());
    u64::from_be_bytes(hash[..8].try_into().expect("8 bytes"))
}

/// The NDJSON body of one answer.
pub fn encode(events: &[Invalidation]) -> Vec<u8> {
    let mut out = Vec::with_capacity(events.len() * 96);
    for e in events {
        serde_json::to_writer(&mut out, e).expect("an event serializes");
        out.push(b'\n');
    }
    out
}

/// The events of one answer's body; `None` for a body that is not the
/// feed's (an edge then treats the feed as lost).
pub fn decode(body: &[u8]) -> Option<Vec<Invalidation>> {
    body.split(|b| *b == b'\n')
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_slice(line).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let events = vec![
            Invalidation {
                seq: 0,
                stream: stream_id("/v1/stream/a"),
                incarnation: "1-ab".into(),
                change: Change::Deleted,
                retained: None,
            },
            Invalidation {
                seq: 1,
                stream: stream_id("/v1/stream/b"),
                incarnation: "2-cd".into(),
                change: Change::Retained,
                retained: Some(4096),
            },
        ];
        let body = encode(&events);
        assert_eq!(body.iter().filter(|b| **b == b'\n').count(), 2);
        assert_eq!(decode(&body), Some(events));
        assert_eq!(decode(b""), Some(vec![]));
        assert_eq!(decode(b"{\"seq\":1}\n"), None);
        assert_ne!(stream_id("/a"), stream_id("/b"));
    }

    proptest::proptest! {
        #[test]
        fn any_body_decodes_or_refuses(body in proptest::collection::vec(proptest::num::u8::ANY, 0..300)) {
            let _ = decode(&body);
        }
    }
}
