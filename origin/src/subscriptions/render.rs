//! Subscriptions as JSON: a subscription's description (protocol §6.3),
//! its streams with their tails, a webhook's body (§7.1) and a claim's
//! answer (§7.2).

use serde_json::{json, Value};
use shared::offset::Offset;

use crate::core::subscription::config::Delivery;
use crate::core::subscription::state::{LinkReport, Subscription, Wake};

/// The control URL of a stream root: `{base}{root}/__ds`.
pub fn control_url(base: &str, root: &str) -> String {
    format!("{base}{root}/{}", shared::paths::CONTROL_SEGMENT)
}

/// RFC 3339 in UTC with exactly three fractional digits.
fn iso(ms: u64) -> String {
    let secs = i64::try_from(ms / 1000).unwrap_or(i64::MAX);
    let t =
        time::OffsetDateTime::from_unix_timestamp(secs).unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let whole = t
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_default();
    format!("{}.{:03}Z", whole.trim_end_matches('Z'), ms % 1000)
}

/// Streams as a read reports them.
pub fn links(reports: &[LinkReport]) -> Value {
    streams(reports, false)
}

/// Streams as a wake or claim reports them: with their tails.
pub fn wake_streams(reports: &[LinkReport]) -> Value {
    streams(reports, true)
}

fn streams(reports: &[LinkReport], tails: bool) -> Value {
    Value::Array(
        reports
            .iter()
            .map(|r| {
                let mut v = json!({
                    "path": r.path,
                    "link_type": r.link_type,
                    "acked_offset": Offset(r.acked).to_string(),
                });
                if tails {
                    v["tail_offset"] = json!(Offset(r.tail.unwrap_or(r.acked)).to_string());
                    v["has_pending"] = json!(r.has_pending());
                }
                v
            })
            .collect(),
    )
}

/// A subscription's description: `base` is the server's URL, `kid` the
/// signing key's.
pub fn describe(
    root: &str,
    sub: &Subscription,
    reports: &[LinkReport],
    base: &str,
    kid: &str,
) -> Value {
    let (webhook, wake_stream) = match &sub.config.delivery {
        Delivery::Webhook { url } => (
            json!({
                "url": url,
                "signing": {
                    "alg": "ed25519",
                    "kid": kid,
                    "jwks_url": format!("{}/jwks.json", control_url(base, root)),
                },
            }),
            Value::Null,
        ),
        Delivery::PullWake { wake_stream } => (Value::Null, json!(wake_stream)),
    };
    let kind = if sub.config.is_webhook() {
        "webhook"
    } else {
        "pull-wake"
    };
    json!({
        "id": sub.id,
        "subscription_id": sub.id,
        "type": kind,
        "pattern": sub.config.pattern,
        "streams": links(reports),
        "webhook": webhook,
        "wake_stream": wake_stream,
        "lease_ttl_ms": sub.config.lease_ttl_ms,
        "created_at": iso(sub.created_at),
        "status": sub.status(),
        "description": sub.config.description,
        "generation": sub.generation,
    })
}

/// The body of a webhook delivery.
pub fn webhook_body(
    root: &str,
    sub: &Subscription,
    wake: &Wake,
    reports: &[LinkReport],
    base: &str,
    token: &str,
) -> Vec<u8> {
    let body = json!({
        "subscription_id": sub.id,
        "wake_id": wake.id,
        "generation": wake.generation,
        "streams": wake_streams(reports),
        "callback_url": format!("{}/subscriptions/{}/callback", control_url(base, root), sub.id),
        "callback_token": token,
    });
    serde_json::to_vec(&body).expect("a wake serializes")
}

#[cfg(test)]
mod tests {
    #[test]
    fn times_are_iso() {
        assert_eq!(super::iso(1_778_284_800_123), "2026-05-09T00:00:00.123Z");
        assert_eq!(super::iso(1_778_284_800_400), "2026-05-09T00:00:00.400Z");
        assert_eq!(super::iso(1_778_284_800_000), "2026-05-09T00:00:00.000Z");
    }
}
