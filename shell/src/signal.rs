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
/// (or a second signal): [`after_drain`] of two of `signals`, listened to
/// since they were made (a binary makes them before its recovery, so that
/// no stop is missed nor left to the default action in between).
pub async fn stop_signal_from(mut signals: StopSignals, draining: Draining, delay: Duration) {
    signals.recv().await;
    after_drain(
        std::future::ready(()),
        draining,
        delay,
        move || async move { signals.recv().await },
    )
    .await
}

/// Runs `then` once `closing` turns true (or its sender goes), in a task
/// of its own: for what learns of the shutdown otherwise than by watching
/// the flag (waits polled by hand, `crate::waker_set::Closing`).
pub fn on_closing(
    mut closing: tokio::sync::watch::Receiver<bool>,
    then: impl FnOnce() + Send + 'static,
) {
    tokio::spawn(async move {
        let _ = closing.wait_for(|c| *c).await;
        then();
    });
}

/// Resolves on SIGTERM or Ctrl-C received from this call on. The handlers
/// are installed here, at once, not when the future is first polled: a
/// server polls it among other branches, and a request served before that
/// poll would leave a SIGTERM to the default action (the process killed,
/// not stopped).
pub fn shutdown() -> impl Future<Output = ()> {
    let mut signals = StopSignals::install();
    async move { signals.recv().await }
}

/// SIGTERM and Ctrl-C, listened to from [`StopSignals::install`] on: one
/// received before a [`StopSignals::recv`] is kept for it. Once installed,
/// a stop signal no longer takes its default action (the process killed)
/// for the rest of the process's life, so a binary installs them first and
/// keeps them until it serves.
pub struct StopSignals {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    pub fn install() -> StopSignals {
        use tokio::signal::unix::{signal, SignalKind};
        StopSignals {
            term: signal(SignalKind::terminate()).expect("install the SIGTERM handler"),
            interrupt: signal(SignalKind::interrupt()).expect("install the SIGINT handler"),
        }
    }

    /// The next stop signal (or one received since the last).
    pub async fn recv(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
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
