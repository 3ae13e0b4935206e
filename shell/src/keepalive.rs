//! When an idle SSE tail sends its keepalive comment (`shared::sse::
//! KEEPALIVE`), at the origin and the edge alike: `every` after the tail's
//! last write, so a busy tail sends none and a silent one sends one per
//! period. A CDN or proxy that cuts an answer silent for longer than its
//! read timeout then never cuts a tail, if `every` is below that timeout.
//! Time is tokio's, so paused-clock tests drive it.

use std::time::Duration;

use tokio::time::Instant;

/// One tail's keepalive timer; `every == 0` turns keepalives off.
#[derive(Debug)]
pub struct Keepalive {
    every: Duration,
    next: Option<Instant>,
}

impl Keepalive {
    /// A timer that starts now (the answer's head is the tail's first write).
    pub fn new(every: Duration) -> Self {
        let mut k = Keepalive { every, next: None };
        k.wrote();
        k
    }

    /// The tail wrote something (an event or a keepalive): the next
    /// keepalive is due a whole period later.
    pub fn wrote(&mut self) {
        self.next = (!self.every.is_zero()).then(|| crate::clock::deadline(self.every));
    }

    /// When to wake next: the keepalive's time, or `deadline` if that comes
    /// first (or keepalives are off). One timer for both: a waiting tail's
    /// state carries one timer, not two.
    pub fn until(&self, deadline: Instant) -> Instant {
        self.next.map_or(deadline, |next| next.min(deadline))
    }

    /// Whether a keepalive is due now.
    pub fn is_due(&self) -> bool {
        self.next.is_some_and(|next| Instant::now() >= next)
    }

    /// Resolves when a keepalive is due; never, when keepalives are off.
    pub async fn due(&self) {
        match self.next {
            Some(at) => tokio::time::sleep_until(at).await,
            None => std::future::pending().await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_keepalive_is_due_a_period_after_the_last_write() {
        let began = Instant::now();
        let mut k = Keepalive::new(Duration::from_secs(15));
        k.due().await;
        assert_eq!(began.elapsed(), Duration::from_secs(15));
        tokio::time::sleep(Duration::from_secs(10)).await;
        k.wrote();
        k.due().await;
        assert_eq!(began.elapsed(), Duration::from_secs(40));
    }

    #[tokio::test(start_paused = true)]
    async fn one_timer_wakes_for_the_keepalive_or_the_deadline() {
        let began = Instant::now();
        let k = Keepalive::new(Duration::from_secs(15));
        let far = began + Duration::from_secs(60);
        let near = began + Duration::from_secs(5);
        assert_eq!(k.until(far), began + Duration::from_secs(15));
        assert_eq!(k.until(near), near);
        assert!(!k.is_due());
        tokio::time::sleep_until(k.until(far)).await;
        assert!(k.is_due());
        let off = Keepalive::new(Duration::ZERO);
        assert_eq!(off.until(far), far);
        assert!(!off.is_due());
    }

    #[tokio::test(start_paused = true)]
    async fn a_zero_period_sends_none() {
        let k = Keepalive::new(Duration::ZERO);
        let waited = tokio::time::timeout(Duration::from_secs(3600), k.due()).await;
        assert!(waited.is_err(), "no keepalive is ever due");
    }
}
