//! `ds list`: streams by prefix, a page at a time (`GET /_streams?prefix=P&
//! after=CURSOR&limit=N`, answering `{"streams":[…],"next_cursor":…,
//! "has_more":…}`); `--all` follows the cursors to the end.

use reqwest::Method;
use serde::Deserialize;

use super::Ctx;
use crate::client::send_ok;
use crate::error::Failure;
use crate::output;
use crate::paths::{query_value, stream_path};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only streams whose path starts with this (a bare name: under /v1/stream/).
    #[arg(long)]
    pub prefix: Option<String>,
    /// Streams per page (the server bounds it).
    #[arg(long)]
    pub limit: Option<u32>,
    /// Start after this cursor (a page's next_cursor).
    #[arg(long)]
    pub after: Option<String>,
    /// Follow the cursors: every stream.
    #[arg(long)]
    pub all: bool,
}

/// One page of the listing.
#[derive(Debug, Deserialize)]
pub struct Page {
    pub streams: Vec<serde_json::Value>,
    #[serde(default)]
    pub next_cursor: Option<String>,
    #[serde(default)]
    pub has_more: bool,
}

/// The path and query of a page.
pub fn page_query(prefix: Option<&str>, after: Option<&str>, limit: Option<u32>) -> String {
    let mut q = Vec::new();
    if let Some(p) = prefix {
        q.push(format!("prefix={}", query_value(p)));
    }
    if let Some(a) = after {
        q.push(format!("after={}", query_value(a)));
    }
    if let Some(l) = limit {
        q.push(format!("limit={l}"));
    }
    if q.is_empty() {
        "/_streams".into()
    } else {
        format!("/_streams?{}", q.join("&"))
    }
}

/// A stream as one line for people: path, status, tail, content type.
pub fn stream_line(s: &serde_json::Value) -> String {
    let text = |k: &str| s.get(k).and_then(|v| v.as_str()).unwrap_or("-").to_owned();
    format!(
        "{}\t{}\t{}\t{}",
        text("stream_id"),
        text("status"),
        text("tail_offset"),
        text("content_type")
    )
}

pub async fn run(ctx: &Ctx, a: Args) -> Result<(), Failure> {
    let prefix = a.prefix.as_deref().map(stream_path).transpose()?;
    let mut after = a.after.clone();
    let mut all = Vec::new();
    loop {
        let query = page_query(prefix.as_deref(), after.as_deref(), a.limit);
        let resp = send_ok(ctx.client.request(Method::GET, &query)).await?;
        let page: Page = resp
            .json()
            .await
            .map_err(|e| Failure::Protocol(format!("a listing that is not one: {e}")))?;
        if !ctx.json {
            for s in &page.streams {
                output::line(&stream_line(s))?;
            }
        }
        let more = page.has_more && page.next_cursor.is_some();
        if !a.all {
            if ctx.json {
                return output::json_line(&serde_json::json!({
                    "streams": page.streams,
                    "next_cursor": page.next_cursor,
                    "has_more": page.has_more,
                }));
            }
            if more {
                eprintln!(
                    "ds: more: ds list --after {}",
                    page.next_cursor.as_deref().unwrap_or_default()
                );
            }
            return Ok(());
        }
        all.extend(page.streams);
        if !more {
            break;
        }
        after = page.next_cursor;
    }
    if ctx.json {
        output::json_line(&serde_json::json!({
            "streams": all, "next_cursor": null, "has_more": false,
        }))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_are_asked_for_by_prefix_cursor_and_limit() {
        assert_eq!(page_query(None, None, None), "/_streams");
        assert_eq!(
            page_query(Some("/v1/stream/a b"), Some("c"), Some(10)),
            "/_streams?prefix=/v1/stream/a%20b&after=c&limit=10"
        );
    }

    #[test]
    fn a_page_reads_as_the_server_writes_it() {
        let page: Page = serde_json::from_str(
            r#"{"streams":[{"stream_id":"/v1/stream/a","status":"open","content_type":"text/plain","tail_offset":"0000000000000003","created_at_ms":1,"last_write_at_ms":1,"closed":false,"incarnation":"x"}],"next_cursor":null,"has_more":false}"#,
        )
        .unwrap();
        assert_eq!(page.streams.len(), 1);
        assert!(!page.has_more);
        assert_eq!(
            stream_line(&page.streams[0]),
            "/v1/stream/a\topen\t0000000000000003\ttext/plain"
        );
    }
}
