//! What stops a server: SIGTERM (how orchestrators stop a process) or
//! Ctrl-C.

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
