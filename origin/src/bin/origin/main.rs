//! `origin`: parse the command line, log, serve until SIGTERM or Ctrl-C.

use anyhow::Context;
use clap::Parser;
use origin::auth::keys::{KeyStore, NewKey};
use origin::config::{Cli, Command, KeysAction};
use origin::server::Origin;

/// mimalloc: see `shared::allocator`.
#[global_allocator]
static ALLOCATOR: shared::allocator::Mimalloc = shared::allocator::Mimalloc;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    // Before anything large is allocated: see `shell::huge_pages`.
    let small_pages = shell::huge_pages::disable();
    let (args, renamed) = shell::renamed::command_line(
        std::env::args_os(),
        |name| std::env::var_os(name),
        "ORIGIN",
        shell::renamed::FLAGS,
    );
    let cli = Cli::parse_from(args);
    shell::logging::init(cli.log_format);
    cli.check().map_err(anyhow::Error::msg)?;
    // Everything the origin writes is its own: the log, stream files,
    // checkpoints, staged snapshots, keys (0600; folders 0700).
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    std::fs::create_dir_all(&cli.data)
        .with_context(|| format!("creating {}", cli.data.display()))?;
    if let Some(Command::Keys { action }) = &cli.command {
        return keys(&cli, action);
    }
    // Listened to from here on: a stop during recovery (which can take a
    // while with many streams) stops the process cleanly rather than
    // leaving it to the signal's default action.
    let mut signals = shell::signal::StopSignals::install();
    let listener = tokio::net::TcpListener::bind(cli.listen)
        .await
        .with_context(|| format!("binding {}", cli.listen))?;
    tracing::info!(addr = %listener.local_addr()?, "origin listening on {}", listener.local_addr()?);
    for warning in renamed {
        tracing::warn!("{warning}");
    }
    if let Err(e) = small_pages {
        tracing::debug!(error = %e, "transparent huge pages stay as the system has them");
    }
    if let Some(url) = &cli.object_store {
        tracing::info!(%url, "sealing complete chunks into object storage");
    }
    let mut store = cli.store_config();
    if store.region.url.is_empty() {
        let bound = listener.local_addr()?;
        anyhow::ensure!(
            !cli.in_region() || !bound.ip().is_unspecified(),
            "listening on {bound}, this origin cannot tell the region where to reach it: set --advertise-url"
        );
        store.region.url = format!("http://{bound}");
    }
    if cli.in_region() {
        tracing::info!(node = %store.region.node, url = %store.region.url, "joining the region");
        let origin = origin::server::region::RegionOrigin::new(
            store,
            cli.http_config(),
            cli.membership_config(),
        )
        .context("opening the data directory")?;
        // A stop while it opened is seen at once.
        let stop = shell::signal::stop_signal_from(signals, origin.draining(), cli.drain_delay);
        origin.serve(listener, stop).await?;
        tracing::info!("stopped");
        return Ok(());
    }
    // Recovery replays the log; meanwhile the listener answers 503 (and
    // `/healthz` 200) rather than leaving clients in its backlog.
    let http = cli.http_config();
    let serve = http.serve.clone();
    let opening = tokio::task::spawn_blocking(move || Origin::open(store, http));
    let recovering = shell::recovering::answer_until(&listener, &serve, opening);
    let (opened, held) = tokio::select! {
        recovered = recovering => recovered,
        () = signals.recv() => {
            // Nothing is lost: what recovery did so far is crash-safe (as
            // for a `kill -9`), and the next start replays the log again.
            // The process exits at once, without waiting for the replay's
            // thread.
            tracing::info!("stopped during recovery");
            std::process::exit(0);
        }
    };
    let origin = opened
        .context("recovery stopped")?
        .context("opening the data directory")?;
    tracing::info!(
        streams = origin.report.streams,
        records = origin.report.records_replayed,
        torn_bytes = origin.report.torn_bytes_dropped,
        "recovered"
    );
    let stop = shell::signal::stop_signal_from(signals, origin.draining(), cli.drain_delay);
    origin.serve_held(listener, held, stop).await?;
    tracing::info!("stopped");
    Ok(())
}

/// `origin keys …`: works on the data directory's key store directly.
fn keys(cli: &Cli, action: &KeysAction) -> anyhow::Result<()> {
    let store = KeyStore::open(&cli.data).context("opening the key store")?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)?
        .as_secs();
    match action {
        KeysAction::Create {
            account,
            read_only,
            prefix,
            agent,
        } => {
            anyhow::ensure!(
                !account.is_empty() && !account.contains('/'),
                "the account is one path segment"
            );
            let (record, key) = store.create(
                NewKey {
                    account: account.clone(),
                    read_only: *read_only,
                    prefix: prefix.clone(),
                    agent: *agent,
                },
                now,
            )?;
            println!("{key}");
            eprintln!(
                "key {} for account {} made; the line above is the only copy of it",
                record.id, record.account
            );
        }
        KeysAction::List { account } => {
            for k in store.list(account.as_deref()) {
                println!("{}", serde_json::to_string(&k)?);
            }
        }
        KeysAction::Revoke { id } => {
            anyhow::ensure!(store.revoke(id, now)?, "no key {id}");
            eprintln!("key {id} revoked; a running origin stops taking it within a second");
        }
    }
    Ok(())
}
