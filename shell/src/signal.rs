//! What stops a server: SIGTERM (how orchestrators stop a process) or
//! Ctrl-C.

/// `shutdown`, and then `closing` turns true: the server's live reads end
/// at once, so the drain does not wait for them.
pub async fn announced(
    shutdown: impl std::future::Future<Output = ()>,
    closing: tokio::sync::watch::Sender<bool>,
) {
    shutdown.await;
    closing.send_replace(true);
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("install SIGTERM handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}
