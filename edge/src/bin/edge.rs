//! `edge`: parse the command line, log, serve until SIGTERM or Ctrl-C.

use anyhow::Context;
use clap::Parser;
use edge::config::Cli;
use edge::server::Edge;

/// mimalloc, as the origin: see `shared::allocator`.
#[global_allocator]
static ALLOCATOR: shared::allocator::Mimalloc = shared::allocator::Mimalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Before anything large is allocated: see `shell::huge_pages`.
    let small_pages = shell::huge_pages::disable();
    let (args, renamed) = shell::renamed::command_line(
        std::env::args_os(),
        |name| std::env::var_os(name),
        "EDGE",
        shell::renamed::FLAGS,
    );
    let cli = Cli::parse_from(args);
    shell::logging::init(cli.log_format);
    let config = cli.config()?;
    // Listened to from before the first log line on (see the origin's).
    let signals = shell::signal::StopSignals::install();
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("binding {}", cli.listen))?;
    tracing::info!(addr = %listener.local_addr()?, "edge listening on {}", listener.local_addr()?);
    for warning in renamed {
        tracing::warn!("{warning}");
    }
    if let Err(e) = small_pages {
        tracing::debug!(error = %e, "transparent huge pages stay as the system has them");
    }
    tracing::info!(origin = %config.origin, cache_bytes = config.cache_bytes, "serving");
    if let Some(url) = &config.object_store {
        tracing::info!(%url, "sealed chunks are read from object storage");
    }
    let delay = config.limits.serve.drain_delay;
    let edge = Edge::new(config).context("opening the object store")?;
    let stop = shell::signal::stop_signal_from(signals, edge.draining(), delay);
    edge.serve(listener, stop).await?;
    tracing::info!("stopped");
    Ok(())
}
