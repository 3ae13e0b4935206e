//! `ds fork NEW --from SOURCE`: a stream that starts as the source's prefix
//! (`PUT NEW` with `Stream-Forked-From`).

use reqwest::Method;

use super::Ctx;
use crate::client::{header, send_ok};
use crate::error::Failure;
use crate::output;
use crate::paths::stream_path;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The new stream's path or bare name.
    pub path: String,
    /// The source stream's path or bare name.
    #[arg(long)]
    pub from: String,
    /// Where the fork leaves the source (Stream-Fork-Offset; default: its end).
    #[arg(long)]
    pub offset: Option<String>,
    /// Inherit this many more bytes (messages on a JSON stream) past the offset.
    #[arg(long)]
    pub sub_offset: Option<u64>,
    /// The content type (it must be the source's).
    #[arg(long, short = 't')]
    pub content_type: Option<String>,
    /// The fork's own TTL in seconds (default: the source's expiry).
    #[arg(long)]
    pub ttl: Option<u64>,
}

/// The fork request's headers.
pub fn headers(a: &Args, source: &str) -> Vec<(&'static str, String)> {
    let mut h = vec![("stream-forked-from", source.to_owned())];
    if let Some(o) = &a.offset {
        h.push(("stream-fork-offset", o.clone()));
    }
    if let Some(n) = a.sub_offset {
        h.push(("stream-fork-sub-offset", n.to_string()));
    }
    if let Some(t) = &a.content_type {
        h.push(("content-type", t.clone()));
    }
    if let Some(ttl) = a.ttl {
        h.push(("stream-ttl", ttl.to_string()));
    }
    h
}

pub async fn run(ctx: &Ctx, a: Args) -> Result<(), Failure> {
    let path = stream_path(&a.path)?;
    let source = stream_path(&a.from)?;
    let mut request = ctx.client.request(Method::PUT, &path);
    for (name, value) in headers(&a, &source) {
        request = request.header(name, value);
    }
    let resp = send_ok(request).await?;
    let created = resp.status().as_u16() == 201;
    let next = header(&resp, "stream-next-offset");
    if ctx.json {
        output::json_line(&serde_json::json!({
            "stream": path, "from": source, "created": created, "next_offset": next,
        }))
    } else {
        output::line(&format!(
            "{} {path} from {source} at {}",
            if created { "forked" } else { "exists" },
            next.as_deref().unwrap_or("?")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fork_names_its_source_and_offset() {
        let a = Args {
            path: "b".into(),
            from: "a".into(),
            offset: Some("0000000000000004".into()),
            sub_offset: None,
            content_type: None,
            ttl: None,
        };
        assert_eq!(
            headers(&a, "/v1/stream/a"),
            vec![
                ("stream-forked-from", "/v1/stream/a".to_string()),
                ("stream-fork-offset", "0000000000000004".to_string()),
            ]
        );
    }
}
