//! `ds rollback PATH --to OFFSET`: put a stream back to an earlier offset
//! (`POST PATH/incarnation/{token}/restore`, docs/guides/restore.md).
//!
//! The incarnation to roll back is the one `--incarnation` names, or the
//! stream's current one, read by a `HEAD` first; a rollback or recreate
//! between the two answers 412 (exit 2) and changes nothing, so a rollback
//! never lands on an incarnation its user did not look at.

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
    /// The offset to go back to (the bytes below it are kept).
    #[arg(long)]
    pub to: String,
    /// The incarnation to roll back (default: the stream's current one).
    #[arg(long)]
    pub incarnation: Option<String>,
}

pub async fn run(ctx: &Ctx, a: Args) -> Result<(), Failure> {
    let path = stream_path(&a.path)?;
    let token = match a.incarnation {
        Some(t) => t,
        None => {
            let head = send_ok(ctx.client.request(Method::HEAD, &path)).await?;
            header(&head, "stream-incarnation").unwrap_or_default()
        }
    };
    let url = format!("{path}/incarnation/{token}/restore");
    let request = ctx
        .client
        .request(Method::POST, &url)
        .header("stream-restore-offset", a.to.as_str());
    let resp = send_ok(request).await?;
    let field = |name: &str| header(&resp, name).unwrap_or_default();
    let (incarnation, previous, next) = (
        field("stream-incarnation"),
        field("stream-previous-incarnation"),
        field("stream-next-offset"),
    );
    if ctx.json {
        return output::json_line(&serde_json::json!({
            "stream": path,
            "incarnation": incarnation,
            "previous_incarnation": previous,
            "next_offset": next,
            "closed": flag(&resp, "stream-closed"),
        }));
    }
    output::line(&format!(
        "rolled back {path} to {next}: incarnation {incarnation} (was {previous})"
    ))
}
