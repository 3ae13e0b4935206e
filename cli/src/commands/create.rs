//! `ds create PATH`: `PUT` the stream with its configuration.

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
    /// The stream's content type (the server's default: application/octet-stream).
    #[arg(long, short = 't')]
    pub content_type: Option<String>,
    /// Expire after this many seconds without a read, append or close (Stream-TTL).
    #[arg(long, conflicts_with = "expires_at")]
    pub ttl: Option<u64>,
    /// Expire at this instant (RFC 3339, Stream-Expires-At).
    #[arg(long)]
    pub expires_at: Option<String>,
    /// Anyone may read it without a credential (Stream-Public: true).
    #[arg(long)]
    pub public: bool,
}

/// The create request's headers, in order.
pub fn headers(a: &Args) -> Vec<(&'static str, String)> {
    let mut h = Vec::new();
    if let Some(t) = &a.content_type {
        h.push(("content-type", t.clone()));
    }
    if let Some(ttl) = a.ttl {
        h.push(("stream-ttl", ttl.to_string()));
    }
    if let Some(at) = &a.expires_at {
        h.push(("stream-expires-at", at.clone()));
    }
    if a.public {
        h.push(("stream-public", "true".into()));
    }
    h
}

pub async fn run(ctx: &Ctx, a: Args) -> Result<(), Failure> {
    let path = stream_path(&a.path)?;
    let mut request = ctx.client.request(Method::PUT, &path);
    for (name, value) in headers(&a) {
        request = request.header(name, value);
    }
    let resp = send_ok(request).await?;
    let created = resp.status().as_u16() == 201;
    if ctx.json {
        output::json_line(&serde_json::json!({
            "stream": path,
            "created": created,
            "status": resp.status().as_u16(),
            "next_offset": header(&resp, "stream-next-offset"),
            "closed": flag(&resp, "stream-closed"),
            "public": flag(&resp, "stream-public"),
        }))
    } else {
        output::line(&format!(
            "{} {path}",
            if created { "created" } else { "exists" }
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_was_asked_is_sent() {
        let a = Args {
            path: "a".into(),
            content_type: Some("application/json".into()),
            ttl: Some(60),
            expires_at: None,
            public: true,
        };
        assert_eq!(
            headers(&a),
            vec![
                ("content-type", "application/json".to_string()),
                ("stream-ttl", "60".to_string()),
                ("stream-public", "true".to_string()),
            ]
        );
    }
}
