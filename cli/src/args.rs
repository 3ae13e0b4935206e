//! The command line: global options and one subcommand. Each subcommand's
//! own options live beside its code in `commands/`.

use std::time::Duration;

use clap::{Parser, Subcommand};

use crate::commands;

/// ds: a client of durable streams (append-only byte streams over HTTP).
///
/// PATH is a stream path (`/v1/stream/chat-1`, `/acme/s.events`) or a bare
/// name (`chat-1`, read as `/v1/stream/chat-1`).
///
/// Exit codes: 0 done, 1 usage, 2 refused (HTTP 4xx but 404), 3 server
/// failure or unreachable (5xx, timeout, no connection), 4 not found
/// (404), 5 local failure (a file, the producer state).
#[derive(Debug, Parser)]
#[command(name = "ds", version, max_term_width = 100)]
pub struct Cli {
    /// The server: an origin, an edge or a CDN in front (http:// only).
    #[arg(
        long,
        env = "DS_URL",
        default_value = "http://127.0.0.1:4437",
        global = true
    )]
    pub url: String,
    /// An API key or token, sent as `Authorization: Bearer KEY`.
    #[arg(long, env = "DS_KEY", hide_env_values = true, global = true)]
    pub key: Option<String>,
    /// Machine-readable output: one JSON object per line on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// The longest one request may take (a live tail's connection excepted):
    /// 30s, 500ms, 2m.
    #[arg(long, env = "DS_TIMEOUT", default_value = "30s", value_parser = crate::paths::duration, global = true)]
    pub timeout: Duration,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a stream (201; 200 when it exists with the same configuration).
    Create(commands::create::Args),
    /// Append a body from the argument, a file or stdin; with --lines one
    /// append per line; with --producer exactly once, resumable.
    Append(commands::append::Args),
    /// Read from an offset until up to date; with --follow tail forever.
    Read(commands::read::Args),
    /// A stream's state without its contents.
    Head(commands::head::Args),
    /// List streams (GET /_streams).
    List(commands::list::Args),
    /// Delete a stream.
    Delete(commands::delete::Args),
    /// Close a stream, with or without a last message.
    Close(commands::close::Args),
    /// Fork a stream: a new stream that starts as a prefix of another.
    Fork(commands::fork::Args),
    /// Put a stream back to an earlier offset (a new incarnation keeps the
    /// bytes below it).
    Rollback(commands::rollback::Args),
    /// API keys through the origin's admin API (/_admin/keys).
    Keys(commands::keys::Args),
    /// Subscriptions ({root}/__ds/subscriptions/{id}).
    #[command(alias = "subs")]
    Subscriptions(commands::subscriptions::Args),
}
