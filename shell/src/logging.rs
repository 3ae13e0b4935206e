//! Logs to standard output, filtered by `RUST_LOG` (default `info`), in
//! colour only on a terminal and without `NO_COLOR`.

/// Installs the process's log subscriber (once, at start).
pub fn init() {
    tracing_subscriber::fmt()
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stdout())
                && std::env::var_os("NO_COLOR").is_none(),
        )
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
}
