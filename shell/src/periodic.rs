//! A server's once-a-second work (expiry, sweeps, reloads), run on tokio's
//! clock (so paused-clock tests drive it) until the server stops.

use std::future::Future;
use std::time::Duration;

use tokio::task::JoinHandle;

/// Work repeated every period; stops when dropped.
pub struct Periodic(JoinHandle<()>);

/// Runs `work` now and then every `period`, until the returned value drops.
/// A run that takes longer than the period delays the next (none pile up).
pub fn every<F, Fut>(period: Duration, mut work: F) -> Periodic
where
    F: FnMut() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    Periodic(tokio::spawn(async move {
        let mut tick = tokio::time::interval(period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            work().await;
        }
    }))
}

impl Drop for Periodic {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[tokio::test(start_paused = true)]
    async fn runs_each_period_until_dropped() {
        let runs = Arc::new(AtomicU32::new(0));
        let counted = Arc::clone(&runs);
        let periodic = every(Duration::from_secs(1), move || {
            let counted = Arc::clone(&counted);
            async move {
                counted.fetch_add(1, Ordering::SeqCst);
            }
        });
        tokio::time::sleep(Duration::from_millis(10_500)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 11, "at 0 s, 1 s, … 10 s");
        drop(periodic);
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(runs.load(Ordering::SeqCst), 11, "none after the drop");
    }
}
