//! `ds subscriptions`: the subscription API under a stream root
//! (`{root}/__ds/subscriptions/{id}`, protocol §6–7): declare (`PUT`),
//! show (`GET`), delete, add and remove linked streams, claim a pull-wake.
//! The servers have no listing of subscriptions, so there is no `list`.

use clap::Subcommand;
use reqwest::Method;

use super::Ctx;
use crate::client::send_ok;
use crate::error::Failure;
use crate::output;
use crate::paths::query_value;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The stream root the subscriptions live under; stream paths in
    /// subscriptions are relative to it.
    #[arg(long, default_value = "/v1/stream")]
    pub root: String,
    #[command(subcommand)]
    pub action: Action,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Kind {
    Webhook,
    PullWake,
}

#[derive(Debug, Subcommand)]
pub enum Action {
    /// Make a subscription (201; 200 when the same exists; 409 another).
    #[command(alias = "create")]
    Declare {
        id: String,
        /// The whole body as JSON (instead of the flags below).
        #[arg(long, conflicts_with_all = ["kind", "pattern", "streams", "webhook_url", "wake_stream", "lease_ttl_ms", "description"])]
        body: Option<String>,
        /// webhook or pull-wake (default: webhook with --webhook-url, pull-wake with --wake-stream).
        #[arg(long = "type", value_enum)]
        kind: Option<Kind>,
        /// Streams to link, root-relative (`*` one segment, `**` any number).
        #[arg(long)]
        pattern: Option<String>,
        /// A stream to link by name, root-relative (repeatable).
        #[arg(long = "stream")]
        streams: Vec<String>,
        #[arg(long)]
        webhook_url: Option<String>,
        /// The stream pull-wake events go to, root-relative.
        #[arg(long)]
        wake_stream: Option<String>,
        #[arg(long)]
        lease_ttl_ms: Option<u64>,
        #[arg(long)]
        description: Option<String>,
    },
    /// Show a subscription: its status, generation, streams and cursors.
    #[command(alias = "get")]
    Show { id: String },
    /// Delete a subscription.
    Delete { id: String },
    /// Link more streams (root-relative).
    AddStreams {
        id: String,
        #[arg(required = true)]
        streams: Vec<String>,
    },
    /// Unlink a stream (root-relative).
    RemoveStream { id: String, stream: String },
    /// Claim a pull-wake subscription's pending wake as a worker.
    Claim {
        id: String,
        #[arg(long)]
        worker: String,
    },
}

/// A declaration's body from the flags.
#[allow(clippy::too_many_arguments)]
pub fn declaration(
    kind: Option<Kind>,
    pattern: Option<&str>,
    streams: &[String],
    webhook_url: Option<&str>,
    wake_stream: Option<&str>,
    lease_ttl_ms: Option<u64>,
    description: Option<&str>,
) -> Result<serde_json::Value, Failure> {
    let kind = match (kind, webhook_url, wake_stream) {
        (Some(k), _, _) => k,
        (None, Some(_), None) => Kind::Webhook,
        (None, None, Some(_)) => Kind::PullWake,
        _ => {
            return Err(Failure::Usage(
                "say where wakes go: --webhook-url URL or --wake-stream PATH (or --body JSON)"
                    .into(),
            ))
        }
    };
    let mut v = serde_json::json!({});
    match kind {
        Kind::Webhook => {
            v["type"] = "webhook".into();
            let url = webhook_url
                .ok_or_else(|| Failure::Usage("a webhook needs --webhook-url".into()))?;
            v["webhook"] = serde_json::json!({ "url": url });
        }
        Kind::PullWake => {
            v["type"] = "pull-wake".into();
            let wake = wake_stream
                .ok_or_else(|| Failure::Usage("a pull-wake needs --wake-stream".into()))?;
            v["wake_stream"] = wake.into();
        }
    }
    if let Some(p) = pattern {
        v["pattern"] = p.into();
    }
    if !streams.is_empty() {
        v["streams"] = streams.into();
    }
    if let Some(l) = lease_ttl_ms {
        v["lease_ttl_ms"] = l.into();
    }
    if let Some(d) = description {
        v["description"] = d.into();
    }
    Ok(v)
}

pub async fn run(ctx: &Ctx, a: Args) -> Result<(), Failure> {
    let root = a.root.trim_end_matches('/');
    if !root.starts_with('/') {
        return Err(Failure::Usage(format!(
            "the root {root:?} is a path (e.g. /v1/stream)"
        )));
    }
    let base = |id: &str| format!("{root}/__ds/subscriptions/{id}");
    let c = &ctx.client;
    let json_request = |method: Method, path: &str, body: String| {
        c.request(method, path)
            .header("content-type", "application/json")
            .body(body)
    };
    let resp = match &a.action {
        Action::Declare {
            id,
            body,
            kind,
            pattern,
            streams,
            webhook_url,
            wake_stream,
            lease_ttl_ms,
            description,
        } => {
            let body = match body {
                Some(b) => b.clone(),
                None => declaration(
                    *kind,
                    pattern.as_deref(),
                    streams,
                    webhook_url.as_deref(),
                    wake_stream.as_deref(),
                    *lease_ttl_ms,
                    description.as_deref(),
                )?
                .to_string(),
            };
            send_ok(json_request(Method::PUT, &base(id), body)).await?
        }
        Action::Show { id } => send_ok(c.request(Method::GET, &base(id))).await?,
        Action::Delete { id } => send_ok(c.request(Method::DELETE, &base(id))).await?,
        Action::AddStreams { id, streams } => {
            let body = serde_json::json!({ "streams": streams }).to_string();
            send_ok(json_request(
                Method::POST,
                &format!("{}/streams", base(id)),
                body,
            ))
            .await?
        }
        Action::RemoveStream { id, stream } => {
            let path = format!("{}/streams/{}", base(id), encode_segment(stream));
            send_ok(c.request(Method::DELETE, &path)).await?
        }
        Action::Claim { id, worker } => {
            let body = serde_json::json!({ "worker": worker }).to_string();
            send_ok(json_request(
                Method::POST,
                &format!("{}/claim", base(id)),
                body,
            ))
            .await?
        }
    };
    let status = resp.status().as_u16();
    let body = resp.bytes().await?;
    if body.is_empty() {
        let value = serde_json::json!({ "status": status });
        return if ctx.json {
            output::json_line(&value)
        } else {
            output::line(&format!("done ({status})"))
        };
    }
    let value: serde_json::Value = serde_json::from_slice(&body)
        .map_err(|e| Failure::Protocol(format!("an answer that is not JSON: {e}")))?;
    output::value(&value, ctx.json)
}

/// A stream path as one path segment (its slashes encoded too).
fn encode_segment(s: &str) -> String {
    query_value(s).replace('/', "%2F")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declarations_from_flags() {
        let v = declaration(
            None,
            Some("orders/*"),
            &[],
            Some("http://127.0.0.1:8000/hook"),
            None,
            None,
            None,
        )
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type": "webhook", "webhook": {"url": "http://127.0.0.1:8000/hook"}, "pattern": "orders/*"})
        );
        let v = declaration(
            None,
            None,
            &["a".into(), "b".into()],
            None,
            Some("wake/pool"),
            Some(1000),
            None,
        )
        .unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type": "pull-wake", "wake_stream": "wake/pool", "streams": ["a", "b"], "lease_ttl_ms": 1000})
        );
        assert!(declaration(None, None, &[], None, None, None, None).is_err());
        assert!(declaration(Some(Kind::Webhook), None, &[], None, Some("w"), None, None).is_err());
    }

    #[test]
    fn a_stream_is_one_segment() {
        assert_eq!(encode_segment("orders/eu"), "orders%2Feu");
    }
}
