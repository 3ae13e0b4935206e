//! `ds head PATH`: a stream's state from `HEAD`, without its contents.

use reqwest::Method;

use super::Ctx;
use crate::client::{flag, header, send_ok};
use crate::error::Failure;
use crate::output;
use crate::paths::stream_path;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The stream path or bare name.
    pub path: String,
}

/// The headers `head` shows, each with the name it shows it under.
const SHOWN: [(&str, &str); 9] = [
    ("content_type", "content-type"),
    ("next_offset", "stream-next-offset"),
    ("retained_offset", "stream-retained-offset"),
    ("incarnation", "stream-incarnation"),
    ("ttl", "stream-ttl"),
    ("expires_at", "stream-expires-at"),
    ("snapshot_offset", "stream-snapshot-offset"),
    ("snapshot_digest", "stream-snapshot-digest"),
    ("max_request_bytes", "ursula-max-request-bytes"),
];

pub async fn run(ctx: &Ctx, a: Args) -> Result<(), Failure> {
    let path = stream_path(&a.path)?;
    let resp = send_ok(ctx.client.request(Method::HEAD, &path)).await?;
    let mut fields = serde_json::Map::new();
    fields.insert("stream".into(), path.clone().into());
    for (name, h) in SHOWN {
        if let Some(v) = header(&resp, h) {
            fields.insert(name.into(), v.into());
        }
    }
    fields.insert("closed".into(), flag(&resp, "stream-closed").into());
    fields.insert("public".into(), flag(&resp, "stream-public").into());
    if ctx.json {
        return output::json_line(&fields.into());
    }
    for (name, value) in fields {
        let text = match value {
            serde_json::Value::String(s) => s,
            v => v.to_string(),
        };
        output::line(&format!("{name}: {text}"))?;
    }
    Ok(())
}
