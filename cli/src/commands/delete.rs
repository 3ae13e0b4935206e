//! `ds delete PATH`: `DELETE` the stream.

use reqwest::Method;

use super::Ctx;
use crate::client::send_ok;
use crate::error::Failure;
use crate::output;
use crate::paths::stream_path;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The stream path or bare name.
    pub path: String,
}

pub async fn run(ctx: &Ctx, a: Args) -> Result<(), Failure> {
    let path = stream_path(&a.path)?;
    send_ok(ctx.client.request(Method::DELETE, &path)).await?;
    if ctx.json {
        output::json_line(&serde_json::json!({"stream": path, "deleted": true}))
    } else {
        output::line(&format!("deleted {path}"))
    }
}
