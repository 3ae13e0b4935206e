//! `ds close PATH [DATA]`: an append with `Stream-Closed: true`, with the
//! data as the last message or with no body.

use reqwest::Method;

use super::{content_type_of, Ctx};
use crate::client::{header, send_ok};
use crate::error::Failure;
use crate::output;
use crate::paths::stream_path;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The stream path or bare name.
    pub path: String,
    /// A last message to append as it closes.
    pub data: Option<String>,
    /// The data's content type (default: the stream's, from a HEAD).
    #[arg(long, short = 't')]
    pub content_type: Option<String>,
}

pub async fn run(ctx: &Ctx, a: Args) -> Result<(), Failure> {
    let path = stream_path(&a.path)?;
    let mut request = ctx
        .client
        .request(Method::POST, &path)
        .header("stream-closed", "true");
    if let Some(data) = a.data {
        let content_type = match a.content_type {
            Some(t) => t,
            None => content_type_of(ctx, &path).await?,
        };
        request = request.header("content-type", content_type).body(data);
    }
    let resp = send_ok(request).await?;
    let next = header(&resp, "stream-next-offset");
    if ctx.json {
        output::json_line(&serde_json::json!({"stream": path, "closed": true, "next_offset": next}))
    } else {
        output::line(&format!(
            "closed {path} at {}",
            next.as_deref().unwrap_or("?")
        ))
    }
}
