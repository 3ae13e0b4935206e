//! This origin's heartbeat, renewed on a task of its own so that a long
//! replay never makes it look dead (`region::membership`).

use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

use super::RegionOrigin;
use crate::region::liveness::Served;
use crate::region::membership::Heartbeater;

impl RegionOrigin {
    /// Renews the heartbeat every renewal until told to stop; `leaving`
    /// while this origin stands aside after failed claims.
    pub(super) async fn beat(
        self: Arc<Self>,
        heartbeater: Arc<Heartbeater>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let mut interval = tokio::time::interval(self.membership.renew);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = stop.wait_for(|s| *s) => return,
            }
            if !self.pinned.load(Relaxed) {
                continue;
            }
            let aside = self.standing_aside.load(Relaxed);
            let released = self
                .released
                .lock()
                .iter()
                .filter(|(_, stopped)| *stopped)
                .map(|(r, _)| *r)
                .collect();
            let serving = (0..self.partitions)
                .filter_map(|p| match self.current(p) {
                    super::Current::Serving { epoch, .. } => Some(Served {
                        partition: p,
                        epoch,
                    }),
                    _ => None,
                })
                .collect();
            let beat = heartbeater.beat(aside, released, serving);
            match tokio::time::timeout(self.patience(), beat).await {
                Ok(Ok(())) => {}
                _ => {
                    self.metrics.heartbeat_failures.fetch_add(1, Relaxed);
                    tracing::warn!("could not renew this origin's heartbeat");
                }
            }
        }
    }
}
