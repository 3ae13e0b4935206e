//! A subscription's configuration as its `PUT` declares it (protocol §6.2),
//! validated and normalized, and the hash two declarations are compared by:
//! re-sending the same configuration answers 200, a different one 409.
//!
//! Normalized: explicit streams sorted and deduplicated, the lease's
//! default filled in, absent and `null` fields alike. The hash is SHA-256
//! over the normalized configuration's canonical JSON (fields in a fixed
//! order), so it does not depend on how the client spelled its body.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::glob::Glob;

/// The lease when the request names none (protocol §6.2: 30 s).
pub const DEFAULT_LEASE_MS: u64 = 30_000;
/// The lease's bounds (protocol §6.2: 1 s to 10 minutes).
pub const MIN_LEASE_MS: u64 = 1_000;
pub const MAX_LEASE_MS: u64 = 600_000;
/// The longest webhook URL, description and subscription id accepted.
pub const MAX_URL: usize = 2_048;
pub const MAX_DESCRIPTION: usize = 1_024;
pub const MAX_ID: usize = 128;

/// How a subscription's wakes reach its workers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum Delivery {
    /// Signed `POST`s to `url`.
    Webhook { url: String },
    /// Wake events appended to the stream `wake_stream` (root-relative).
    PullWake { wake_stream: String },
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Config {
    pub delivery: Delivery,
    pub pattern: Option<String>,
    /// Root-relative paths, sorted.
    pub streams: BTreeSet<String>,
    pub lease_ttl_ms: u64,
    pub description: Option<String>,
}

/// The body of a `PUT`, as sent.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Declared {
    #[serde(rename = "type")]
    kind: Option<String>,
    pattern: Option<String>,
    streams: Option<Vec<String>>,
    webhook: Option<WebhookDeclared>,
    wake_stream: Option<String>,
    lease_ttl_ms: Option<u64>,
    description: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WebhookDeclared {
    url: Option<String>,
}

/// Why a declaration was refused (400 with this message).
#[derive(Debug, PartialEq, Eq)]
pub struct Invalid(pub String);

fn invalid(msg: impl Into<String>) -> Invalid {
    Invalid(msg.into())
}

impl Config {
    /// Parses and normalizes a `PUT` body; at most `max_streams` explicit
    /// streams.
    pub fn parse(body: &[u8], max_streams: usize) -> Result<Config, Invalid> {
        let d: Declared = serde_json::from_slice(body)
            .map_err(|e| invalid(format!("the body is not a subscription: {e}")))?;
        let delivery = match d.kind.as_deref() {
            Some("webhook") => {
                if d.wake_stream.is_some() {
                    return Err(invalid("a webhook subscription has no wake_stream"));
                }
                let url = d
                    .webhook
                    .and_then(|w| w.url)
                    .ok_or_else(|| invalid("a webhook subscription needs webhook.url"))?;
                if url.len() > MAX_URL {
                    return Err(invalid("webhook.url is longer than 2048 bytes"));
                }
                Delivery::Webhook { url }
            }
            Some("pull-wake") => {
                if d.webhook.is_some() {
                    return Err(invalid("a pull-wake subscription has no webhook"));
                }
                let wake_stream = d
                    .wake_stream
                    .ok_or_else(|| invalid("a pull-wake subscription needs wake_stream"))?;
                check_stream(&wake_stream)?;
                Delivery::PullWake { wake_stream }
            }
            Some(other) => {
                return Err(invalid(format!(
                    "type is webhook or pull-wake, not {other:?}"
                )))
            }
            None => return Err(invalid("type is required: webhook or pull-wake")),
        };
        if let Some(p) = &d.pattern {
            Glob::parse(p).map_err(|e| invalid(format!("pattern: {e}")))?;
        }
        let listed = d.streams.unwrap_or_default();
        if d.pattern.is_none() && listed.is_empty() {
            return Err(invalid("a subscription needs a pattern or streams"));
        }
        let streams = normalize_streams(listed, max_streams)?;
        if let Delivery::PullWake { wake_stream } = &delivery {
            if streams.contains(wake_stream) {
                return Err(invalid(
                    "the wake stream cannot be one of the streams it wakes for (each wake would wake it again)",
                ));
            }
        }
        let lease_ttl_ms = d.lease_ttl_ms.unwrap_or(DEFAULT_LEASE_MS);
        if !(MIN_LEASE_MS..=MAX_LEASE_MS).contains(&lease_ttl_ms) {
            return Err(invalid("lease_ttl_ms is from 1000 to 600000"));
        }
        if d.description
            .as_ref()
            .is_some_and(|s| s.len() > MAX_DESCRIPTION)
        {
            return Err(invalid("description is longer than 1024 bytes"));
        }
        Ok(Config {
            delivery,
            pattern: d.pattern,
            streams,
            lease_ttl_ms,
            description: d.description,
        })
    }

    /// SHA-256 of the normalized configuration, hex.
    pub fn hash(&self) -> String {
        let canonical = serde_json::to_vec(self).expect("a configuration serializes");
        hex::encode(Sha256::digest(&canonical))
    }

    pub fn glob(&self) -> Option<Glob> {
        self.pattern.as_deref().and_then(|p| Glob::parse(p).ok())
    }

    pub fn is_webhook(&self) -> bool {
        matches!(self.delivery, Delivery::Webhook { .. })
    }

    /// Whether `rel` may be linked: anything but the wake stream (its own
    /// wake events would wake the subscription again, for ever).
    pub fn may_link(&self, rel: &str) -> bool {
        !matches!(&self.delivery, Delivery::PullWake { wake_stream } if wake_stream == rel)
    }
}

/// Sorted, deduplicated, each a valid root-relative stream path; at most
/// `max` of them.
pub fn normalize_streams(listed: Vec<String>, max: usize) -> Result<BTreeSet<String>, Invalid> {
    let mut streams = BTreeSet::new();
    for s in listed {
        check_stream(&s)?;
        streams.insert(s);
    }
    if streams.len() > max {
        return Err(invalid(format!(
            "a subscription links at most {max} streams"
        )));
    }
    Ok(streams)
}

/// A root-relative stream path: what `{root}/{path}` must be to name a
/// stream.
pub fn check_stream(path: &str) -> Result<(), Invalid> {
    if path.starts_with('/') {
        return Err(invalid(format!(
            "{path:?}: stream paths here are relative to the stream root (no leading /)"
        )));
    }
    shared::paths::validate_stream_path(&format!("/{path}"))
        .map_err(|e| invalid(format!("{path:?}: {e}")))
}

/// Whether an id may name a subscription: 1 to 128 of `A-Z a-z 0-9 . _ -`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(body: &str) -> Result<Config, Invalid> {
        Config::parse(body.as_bytes(), 100)
    }

    #[test]
    fn same_configuration_spelled_differently_hashes_alike() {
        let a = parse(r#"{"type":"webhook","pattern":"events/*","streams":["b","a","a"],"webhook":{"url":"https://x.example/h"}}"#).unwrap();
        let b = parse(r#"{"streams":["a","b"],"lease_ttl_ms":30000,"webhook":{"url":"https://x.example/h"},"pattern":"events/*","type":"webhook","description":null}"#).unwrap();
        assert_eq!(a.hash(), b.hash());
        let c = parse(r#"{"type":"webhook","pattern":"events/*","streams":["a","b"],"webhook":{"url":"https://x.example/h"},"description":"d"}"#).unwrap();
        assert_ne!(a.hash(), c.hash());
    }

    #[test]
    fn refusals() {
        for body in [
            r#"{}"#,
            r#"{"type":"email","pattern":"a"}"#,
            r#"{"type":"webhook","pattern":"a"}"#,
            r#"{"type":"webhook","webhook":{"url":"https://x"}}"#,
            r#"{"type":"pull-wake","pattern":"a"}"#,
            r#"{"type":"pull-wake","pattern":"a","wake_stream":"/abs"}"#,
            r#"{"type":"webhook","pattern":"a","webhook":{"url":"https://x"},"lease_ttl_ms":999}"#,
            r#"{"type":"webhook","pattern":"a","webhook":{"url":"https://x"},"lease_ttl_ms":600001}"#,
            r#"{"type":"webhook","streams":["a/../b"],"webhook":{"url":"https://x"}}"#,
            r#"{"type":"webhook","pattern":"a","webhook":{"url":"https://x"},"extra":1}"#,
            r#"{"type":"pull-wake","streams":["w"],"wake_stream":"w"}"#,
            "not json",
        ] {
            assert!(parse(body).is_err(), "{body}");
        }
        let many: Vec<String> = (0..101).map(|i| format!("s{i}")).collect();
        let body =
            serde_json::json!({"type":"webhook","streams":many,"webhook":{"url":"https://x"}});
        assert!(parse(&body.to_string()).is_err());
    }

    #[test]
    fn ids() {
        assert!(valid_id("sub-1.a_b"));
        assert!(!valid_id(""));
        assert!(!valid_id("a/b"));
        assert!(!valid_id(&"x".repeat(129)));
    }
}
