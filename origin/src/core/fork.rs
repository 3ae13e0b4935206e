//! Forks (protocol §4.2): a stream that starts as another stream's prefix.
//!
//! A fork shares its source's offset space: its bytes `[0, at)` are the
//! source's, read through the source (its log extents, its file, its sealed
//! chunks), never copied; its own appends start at `at`. So creating a fork
//! writes one log record whatever the prefix holds.
//!
//! A stream that forks still read is not removed when it is deleted (or
//! expires): it is *soft-deleted*: its path answers `410` (and `409` to a
//! `PUT`), its bytes stay, and it goes for good when its last fork does,
//! which may in turn release its own source (see `store::engine`).
//!
//! The rules here are pure: what a fork request resolves to, and whether a
//! second `PUT` of a fork names the same stream.

use serde::{Deserialize, Serialize};
use shared::content_type::same_media_type;

use super::config::{Expiry, StreamConfig};

/// Where a fork's prefix comes from, as the log and checkpoints keep it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForkOf {
    /// The source stream's id (ids are never reused).
    pub source: u64,
    /// The fork holds the source's bytes `[0, at)`.
    pub at: u64,
    /// The request that made it: `Stream-Fork-Offset` (or the source's end
    /// then) and `Stream-Fork-Sub-Offset`, which a second `PUT` must match.
    pub anchor: u64,
    pub sub: u64,
    /// Set when a rollback made this stream (`core::restore`): the
    /// incarnation it replaced at its path, whose bytes below `at` it
    /// keeps (`Stream-Previous-Incarnation`, `Stream-Inherited-Offset`).
    #[serde(default)]
    pub restored: Option<std::sync::Arc<str>>,
}

/// A fork as a `PUT` asks for it, before the source is looked at.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ForkRequest {
    /// `Stream-Forked-From`: the source's path.
    pub from: String,
    /// `Stream-Fork-Offset`, when sent (the source's end otherwise).
    pub offset: Option<u64>,
    /// `Stream-Fork-Sub-Offset` (0 when absent).
    pub sub: u64,
    /// The `Content-Type` and expiry the request sent, if any: what it did
    /// not send is inherited from the source.
    pub content_type: Option<String>,
    pub expiry: Option<Expiry>,
}

/// Why a fork cannot be made; nothing changes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ForkRefusal {
    /// The request's content type is not the source's (409).
    ContentTypeMismatch { source: String },
    /// The fork point is past the source's end (400).
    BeyondTail { tail: u64 },
    /// The source is a fork this many deep already (400).
    TooDeep { max: usize },
    /// A JSON sub-offset must end within this many bytes of its anchor
    /// (one request's worth): counting messages reads them (400).
    SubOffsetTooFar { limit: u64 },
}

/// The configuration of a new fork of a stream configured as `source`:
/// the source's content type (a different one is refused) and, unless the
/// request names its own, the source's expiry (a sliding TTL starts afresh
/// for the fork; an absolute one is the same instant). Forks are never
/// capped by their source: they may outlive it.
pub fn config(req: &ForkRequest, source: &StreamConfig) -> Result<StreamConfig, ForkRefusal> {
    if let Some(ct) = &req.content_type {
        if !same_media_type(ct, &source.content_type) {
            return Err(ForkRefusal::ContentTypeMismatch {
                source: source.content_type.to_string(),
            });
        }
    }
    Ok(StreamConfig {
        content_type: source.content_type.clone(),
        expiry: req.expiry.unwrap_or(source.expiry),
        public: false,
    })
}

/// Where a binary fork's prefix ends: `sub` bytes past the anchor, which
/// must not pass the source's end. (A JSON stream's sub-offset counts
/// messages; the request handler finds their end by reading the source.)
pub fn binary_point(anchor: u64, sub: u64, tail: u64) -> Result<u64, ForkRefusal> {
    if anchor > tail {
        return Err(ForkRefusal::BeyondTail { tail });
    }
    match anchor.checked_add(sub) {
        Some(at) if at <= tail => Ok(at),
        _ => Err(ForkRefusal::BeyondTail { tail }),
    }
}

/// A fork's retained offset: its own, or its source's up to its fork point
/// if that is later (a snapshot of the source replaced those bytes for
/// every reader of them).
pub fn retained(own: u64, source: u64, at: u64) -> u64 {
    own.max(source.min(at))
}

/// Whether a second `PUT` of a fork names the fork that is there: the same
/// source, the same sub-offset, and (each only when the request sends it)
/// the same fork offset, content type and expiry; what it leaves out was
/// inherited the first time, so it matches.
pub fn same_fork(
    existing: &ForkOf,
    existing_config: &StreamConfig,
    source_matches: bool,
    req: &ForkRequest,
) -> bool {
    source_matches
        && existing.sub == req.sub
        && req.offset.is_none_or(|o| o == existing.anchor)
        && req
            .content_type
            .as_deref()
            .is_none_or(|ct| same_media_type(ct, &existing_config.content_type))
        && req.expiry.is_none_or(|e| e == existing_config.expiry)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn source(expiry: Expiry) -> StreamConfig {
        StreamConfig {
            content_type: "text/plain".into(),
            expiry,
            public: true,
        }
    }

    fn req() -> ForkRequest {
        ForkRequest {
            from: "/v1/stream/a".into(),
            offset: None,
            sub: 0,
            content_type: None,
            expiry: None,
        }
    }

    #[test]
    fn a_fork_inherits_what_it_does_not_name() {
        let c = config(&req(), &source(Expiry::IdleSecs(3600))).unwrap();
        assert_eq!(&*c.content_type, "text/plain");
        assert_eq!(c.expiry, Expiry::IdleSecs(3600));
        assert!(
            !c.public,
            "visibility is the fork creator's choice, not inherited"
        );
        let own = ForkRequest {
            expiry: Some(Expiry::IdleSecs(99_999)),
            content_type: Some("TEXT/PLAIN; charset=utf-8".into()),
            ..req()
        };
        let c = config(&own, &source(Expiry::At(5))).unwrap();
        assert_eq!(
            c.expiry,
            Expiry::IdleSecs(99_999),
            "no capping by the source"
        );
    }

    #[test]
    fn a_different_content_type_is_refused() {
        let r = ForkRequest {
            content_type: Some("application/json".into()),
            ..req()
        };
        assert!(matches!(
            config(&r, &source(Expiry::Never)),
            Err(ForkRefusal::ContentTypeMismatch { .. })
        ));
    }

    #[test]
    fn binary_fork_points() {
        assert_eq!(binary_point(0, 3, 5), Ok(3));
        assert_eq!(binary_point(0, 5, 5), Ok(5));
        assert_eq!(binary_point(5, 0, 5), Ok(5));
        assert!(binary_point(0, 6, 5).is_err());
        assert!(binary_point(6, 0, 5).is_err());
        assert!(binary_point(1, u64::MAX, 5).is_err(), "no overflow");
    }

    #[test]
    fn a_second_put_matches_on_what_it_sends() {
        let existing = ForkOf {
            source: 1,
            at: 3,
            anchor: 0,
            sub: 3,
            restored: None,
        };
        let cfg = source(Expiry::IdleSecs(60));
        let same = ForkRequest { sub: 3, ..req() };
        assert!(same_fork(&existing, &cfg, true, &same));
        assert!(!same_fork(&existing, &cfg, false, &same));
        assert!(!same_fork(
            &existing,
            &cfg,
            true,
            &ForkRequest { sub: 2, ..req() }
        ));
        let offset = ForkRequest {
            offset: Some(1),
            ..same.clone()
        };
        assert!(!same_fork(&existing, &cfg, true, &offset));
        let ttl = ForkRequest {
            expiry: Some(Expiry::IdleSecs(61)),
            ..same
        };
        assert!(!same_fork(&existing, &cfg, true, &ttl));
    }
}
