//! Snapshots and retention: which publish and which retention move a stream
//! may take. A snapshot stands for the stream's bytes `[0, offset)` folded
//! into one blob the writer of the stream chose; retention then lets the
//! bytes before a snapshot go (reads before it answer 410).
//!
//! One snapshot is visible at a time (the latest); publishing replaces it.
//! Publishing is idempotent: the same blob at the same offset answers the
//! same digest; a different blob at an offset already published, or a
//! snapshot older than the latest, is a conflict.

use serde::{Deserialize, Serialize};

use super::stream::StreamCore;

/// A published snapshot. `digest` is the SHA-256 of the blob, lowercase hex.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotMeta {
    pub offset: u64,
    pub len: u64,
    pub digest: String,
    pub content_type: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotRefusal {
    /// The offset is past the stream's end (409).
    BeyondTail { tail: u64 },
    /// The offset is before the retained offset (410).
    BeforeRetained { retained: u64 },
    /// `Stream-Snapshot-Match` named another snapshot than the latest (409).
    MatchFailed,
    /// Another blob is published at this offset, or a later snapshot exists
    /// (409).
    Conflict,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SnapshotDecision {
    /// Becomes the latest snapshot (replacing `replaced`, if any).
    Publish { replaced: Option<SnapshotMeta> },
    /// Exactly this snapshot is already the latest: nothing changes.
    Same,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RetainRefusal {
    /// The offset is not the latest snapshot's (404).
    NotLatestSnapshot,
    /// Retention never moves backwards (409).
    Backwards { retained: u64 },
}

impl StreamCore {
    pub fn decide_snapshot(
        &self,
        meta: &SnapshotMeta,
        expect_digest: Option<&str>,
    ) -> Result<SnapshotDecision, SnapshotRefusal> {
        if meta.offset > self.len {
            return Err(SnapshotRefusal::BeyondTail { tail: self.len });
        }
        if meta.offset < self.retained {
            return Err(SnapshotRefusal::BeforeRetained {
                retained: self.retained,
            });
        }
        let current = self.snapshot.as_ref();
        if let Some(expected) = expect_digest {
            if current.map(|c| c.digest.as_str()) != Some(expected) {
                return Err(SnapshotRefusal::MatchFailed);
            }
        }
        match current {
            Some(c) if **c == *meta => Ok(SnapshotDecision::Same),
            Some(c) if c.offset >= meta.offset => Err(SnapshotRefusal::Conflict),
            _ => Ok(SnapshotDecision::Publish {
                replaced: current.map(|c| (**c).clone()),
            }),
        }
    }

    /// Whether retention may advance to `offset`; `Ok(false)` when it is
    /// there already.
    pub fn decide_retain(&self, offset: u64) -> Result<bool, RetainRefusal> {
        if self.snapshot.as_ref().map(|s| s.offset) != Some(offset) {
            return Err(RetainRefusal::NotLatestSnapshot);
        }
        if offset < self.retained {
            return Err(RetainRefusal::Backwards {
                retained: self.retained,
            });
        }
        Ok(offset > self.retained)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::{Expiry, StreamConfig};

    fn core(len: u64) -> StreamCore {
        let mut c = StreamCore::new(
            1,
            "/s".into(),
            "1-x".into(),
            StreamConfig {
                content_type: "application/octet-stream".into(),
                expiry: Expiry::Never,
                public: false,
            },
            0,
        );
        c.len = len;
        c
    }

    fn meta(offset: u64, digest: &str) -> SnapshotMeta {
        SnapshotMeta {
            offset,
            len: 3,
            digest: digest.into(),
            content_type: "application/json".into(),
        }
    }

    #[test]
    fn publish_replace_and_idempotence() {
        let mut c = core(100);
        assert_eq!(
            c.decide_snapshot(&meta(101, "a"), None),
            Err(SnapshotRefusal::BeyondTail { tail: 100 })
        );
        assert_eq!(
            c.decide_snapshot(&meta(50, "a"), None),
            Ok(SnapshotDecision::Publish { replaced: None })
        );
        c.snapshot = Some(Box::new(meta(50, "a")));
        assert_eq!(
            c.decide_snapshot(&meta(50, "a"), None),
            Ok(SnapshotDecision::Same)
        );
        assert_eq!(
            c.decide_snapshot(&meta(50, "b"), None),
            Err(SnapshotRefusal::Conflict)
        );
        assert_eq!(
            c.decide_snapshot(&meta(40, "b"), None),
            Err(SnapshotRefusal::Conflict),
            "never older than the latest"
        );
        assert_eq!(
            c.decide_snapshot(&meta(60, "b"), Some("zzz")),
            Err(SnapshotRefusal::MatchFailed)
        );
        assert_eq!(
            c.decide_snapshot(&meta(60, "b"), Some("a")),
            Ok(SnapshotDecision::Publish {
                replaced: Some(meta(50, "a"))
            })
        );
    }

    #[test]
    fn retention_follows_the_latest_snapshot() {
        let mut c = core(100);
        assert_eq!(c.decide_retain(0), Err(RetainRefusal::NotLatestSnapshot));
        c.snapshot = Some(Box::new(meta(50, "a")));
        assert_eq!(c.decide_retain(40), Err(RetainRefusal::NotLatestSnapshot));
        assert_eq!(c.decide_retain(50), Ok(true));
        c.retained = 50;
        assert_eq!(c.decide_retain(50), Ok(false));
        assert_eq!(
            c.decide_snapshot(&meta(10, "b"), None),
            Err(SnapshotRefusal::BeforeRetained { retained: 50 })
        );
    }
}
