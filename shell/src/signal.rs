//! What stops a server: SIGTERM (how orchestrators stop a process) or
//! Ctrl-C; with a drain delay (`--drain-delay`), only after the server
//! has told its balancer for that long that it is going.

use std::future::Future;
use std::time::Duration;

use crate::ready::Draining;

/// `shutdown`, and then `closing` turns true: the server's live reads end
/// at once, so the drain does not wait for them, and the listener closes.
/// `/readyz` says draining from then on, if it did not already.
pub async fn announced(
    shutdown: impl Future<Output = ()>,
    closing: tokio::sync::watch::Sender<bool>,
    draining: Draining,
) {
    shutdown.await;
    draining.start();
    closing.send_replace(true);
}

/// Resolves `delay` after `first` (a stop signal), or at a second one
/// (`again()`, made only after the first, so that it does not see the
/// first: an operator who does not want to wait), with `draining` set from
/// `first` on. Meanwhile the server serves
/// as before, new connections included, and `/readyz` answers `503`, so a
/// balancer that checks it every few seconds takes the server out of
/// rotation before its listener closes (with no delay, new connections are
/// refused at once, and a balancer learns it from failed requests).
pub async fn after_drain<F: Future<Output = ()>>(
    first: impl Future<Output = ()>,
    draining: Draining,
    delay: Duration,
    again: impl FnOnce() -> F,
) {
    first.await;
    draining.start();
    if delay.is_zero() {
        return;
    }
    tracing::info!(
        delay_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
        "draining: not ready, still serving until the delay ends or another stop signal"
    );
    tokio::select! {
        () = tokio::time::sleep(delay) => {}
        () = again() => tracing::info!("a second stop signal: closing now"),
    }
}

/// What a server binary stops on: a stop signal, then `delay` of draining
/// (or a second signal): [`after_drain`] of [`shutdown`] twice.
pub fn stop_signal(draining: Draining, delay: Duration) -> impl Future<Output = ()> {
    after_drain(shutdown(), draining, delay, shutdown)
}

/// Resolves on SIGTERM or Ctrl-C received from this call on. The handlers
/// are installed here, at once, not when the future is first polled: a
/// server polls it among other branches, and a request served before that
/// poll would leave a SIGTERM to the default action (the process killed,
/// not stopped).
pub fn shutdown() -> impl Future<Output = ()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("install the SIGTERM handler");
    let mut interrupt = signal(SignalKind::interrupt()).expect("install the SIGINT handler");
    async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = interrupt.recv() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_stop_drains_for_the_delay_then_closes() {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let draining = Draining::default();
        let done = tokio::spawn(after_drain(
            async {
                let _ = stopped.await;
            },
            draining.clone(),
            Duration::from_secs(15),
            std::future::pending,
        ));
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(!draining.started() && !done.is_finished());
        stop.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(14_999)).await;
        assert!(draining.started(), "not ready from the signal on");
        assert!(!done.is_finished(), "still serving during the delay");
        tokio::time::sleep(Duration::from_millis(2)).await;
        assert!(done.is_finished(), "closes when the delay ends");
    }

    #[tokio::test(start_paused = true)]
    async fn a_second_signal_ends_the_delay_and_no_delay_closes_at_once() {
        let (again, second) = tokio::sync::oneshot::channel::<()>();
        let draining = Draining::default();
        let done = tokio::spawn(after_drain(
            std::future::ready(()),
            draining.clone(),
            Duration::from_secs(600),
            || async {
                let _ = second.await;
            },
        ));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(draining.started() && !done.is_finished());
        again.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert!(done.is_finished());

        let draining = Draining::default();
        after_drain(
            std::future::ready(()),
            draining.clone(),
            Duration::ZERO,
            std::future::pending,
        )
        .await;
        assert!(draining.started());
    }
}
