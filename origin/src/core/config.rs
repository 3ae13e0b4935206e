//! A stream's configuration, chosen at create and never changed, and the rule
//! that decides whether a second create of the same path is the same stream.

use serde::{Deserialize, Serialize};
use shared::content_type::same_media_type;

use super::Millis;

/// How a stream expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Expiry {
    Never,
    /// Sliding: idle (no read or write) for this many seconds.
    IdleSecs(u64),
    /// Absolute: at this instant.
    At(Millis),
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamConfig {
    /// As the creator sent it (or `application/octet-stream`); shared by
    /// every stream of the same type (see `store::engine`'s interning).
    pub content_type: std::sync::Arc<str>,
    pub expiry: Expiry,
    /// Whether reads may be served without a credential (issue: access control).
    #[serde(default)]
    pub public: bool,
}

impl StreamConfig {
    /// Whether a create request names the same stream: same media type (case
    /// and parameters aside, as appends compare it), same expiry.
    pub fn same_as(&self, other: &StreamConfig) -> bool {
        same_media_type(&self.content_type, &other.content_type) && self.expiry == other.expiry
    }

    pub fn is_json(&self) -> bool {
        shared::content_type::is_json(&self.content_type)
    }

    /// When the stream expires, given its last read or write.
    pub fn expires_at(&self, last_access: Millis) -> Option<Millis> {
        match self.expiry {
            Expiry::Never => None,
            Expiry::IdleSecs(s) => Some(last_access.saturating_add(s.saturating_mul(1000))),
            Expiry::At(t) => Some(t),
        }
    }

    pub fn is_expired(&self, last_access: Millis, now: Millis) -> bool {
        self.expires_at(last_access).is_some_and(|t| now >= t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(ct: &str, expiry: Expiry) -> StreamConfig {
        StreamConfig {
            content_type: ct.into(),
            expiry,
            public: false,
        }
    }

    #[test]
    fn same_config() {
        assert!(cfg("application/json", Expiry::Never)
            .same_as(&cfg("APPLICATION/JSON; charset=utf-8", Expiry::Never)));
        assert!(!cfg("text/plain", Expiry::IdleSecs(5))
            .same_as(&cfg("text/plain", Expiry::IdleSecs(6))));
        assert!(!cfg("text/plain", Expiry::Never).same_as(&cfg("text/plain", Expiry::At(5))));
    }

    #[test]
    fn expiry() {
        let c = cfg("a/b", Expiry::IdleSecs(10));
        assert!(!c.is_expired(1_000, 10_999));
        assert!(c.is_expired(1_000, 11_000));
        assert!(!cfg("a/b", Expiry::Never).is_expired(0, u64::MAX));
        assert!(cfg("a/b", Expiry::At(50)).is_expired(0, 50));
    }
}
