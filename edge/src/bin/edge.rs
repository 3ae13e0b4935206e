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
    tracing_subscriber::fmt()
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stdout())
                && std::env::var_os("NO_COLOR").is_none(),
        )
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let cli = Cli::parse();
    let config = cli.config()?;
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("binding {}", cli.listen))?;
    tracing::info!(addr = %listener.local_addr()?, "edge listening on {}", listener.local_addr()?);
    tracing::info!(origin = %config.origin, cache_bytes = config.cache_bytes, "serving");
    if let Some(url) = &config.object_store {
        tracing::info!(%url, "sealed chunks are read from object storage");
    }
    Edge::new(config)
        .context("opening the object store")?
        .serve(listener, shutdown_signal())
        .await?;
    tracing::info!("stopped");
    Ok(())
}

async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
