//! `ds`: a command-line client of durable streams. It speaks only the public
//! protocol over HTTP, so it works against an origin, an edge or a CDN in
//! front of them alike.
//!
//! Module map:
//! - `args`: the command line (clap); each subcommand's options beside its code.
//! - `commands/`: one file per subcommand (`create`, `append`, `read`, `head`,
//!   `list`, `delete`, `close`, `fork`, `keys`, `subscriptions`).
//! - `client`: the HTTP client, the credential, answers to failures.
//! - `error`: [`Failure`] and the exit codes.
//! - `paths`: stream paths from bare names, base URLs, durations.
//! - `producer`: an exactly-once producer's state between runs, written
//!   durably before moving on.
//! - `sse`: a Server-Sent Events parser.
//! - `output`: what goes to stdout (`--json`: one object per line).
//!
//! Exit codes ([`error::exit`]): 0 done, 1 usage, 2 refused (HTTP 4xx but
//! 404), 3 server failure or unreachable (5xx, timeout, no connection, an
//! answer that breaks the protocol), 4 not found (404), 5 local failure (a
//! file, the producer state). Every failure prints one line on stderr:
//! `ds: <STATUS> <CODE>: <message>` for an HTTP refusal, with the server's
//! own `{"error":{"code","message"}}` when it sent one.
//!
//! Environment: `DS_URL` (default `http://127.0.0.1:4437`), `DS_KEY`,
//! `DS_TIMEOUT`, `DS_ADMIN_TOKEN` (for `keys`), `XDG_STATE_HOME` / `HOME`
//! (where producer state lives).

pub mod args;
pub mod client;
pub mod commands;
pub mod error;
pub mod output;
pub mod paths;
pub mod producer;
pub mod sse;

pub use error::Failure;

/// Runs one parsed command line.
pub async fn run(cli: args::Cli) -> Result<(), Failure> {
    let base = paths::base_url(&cli.url)?;
    let client = client::Client::new(base, cli.key.clone(), cli.timeout)?;
    let ctx = commands::Ctx {
        client,
        json: cli.json,
    };
    commands::run(&ctx, cli.command).await
}
