//! One file per subcommand; each has its `Args` and an `async fn run`.

pub mod append;
pub mod close;
pub mod create;
pub mod delete;
pub mod fork;
pub mod head;
pub mod keys;
pub mod list;
pub mod read;
pub mod rollback;
pub mod subscriptions;

use crate::args::Command;
use crate::client::Client;
use crate::error::Failure;

/// What every command gets.
#[derive(Debug)]
pub struct Ctx {
    pub client: Client,
    /// `--json`: machine-readable output.
    pub json: bool,
}

pub async fn run(ctx: &Ctx, command: Command) -> Result<(), Failure> {
    match command {
        Command::Create(a) => create::run(ctx, a).await,
        Command::Append(a) => append::run(ctx, a).await,
        Command::Read(a) => read::run(ctx, a).await,
        Command::Head(a) => head::run(ctx, a).await,
        Command::List(a) => list::run(ctx, a).await,
        Command::Delete(a) => delete::run(ctx, a).await,
        Command::Close(a) => close::run(ctx, a).await,
        Command::Fork(a) => fork::run(ctx, a).await,
        Command::Rollback(a) => rollback::run(ctx, a).await,
        Command::Keys(a) => keys::run(ctx, a).await,
        Command::Subscriptions(a) => subscriptions::run(ctx, a).await,
    }
}

/// The stream's content type, from a `HEAD` (an append needs it, and the
/// user should not have to repeat it).
pub async fn content_type_of(ctx: &Ctx, path: &str) -> Result<String, Failure> {
    let resp = crate::client::send_ok(ctx.client.request(reqwest::Method::HEAD, path)).await?;
    Ok(crate::client::header(&resp, "content-type")
        .unwrap_or_else(|| "application/octet-stream".into()))
}

/// Whether a content type is JSON (the servers' JSON mode).
pub fn is_json(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}
