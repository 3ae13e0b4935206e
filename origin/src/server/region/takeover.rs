//! Where a takeover is decided: the membership loop. Every `renew` it
//! looks at the region's heartbeats (`region::membership`), and for each
//! partition decides (`region::liveness::decide`) whether this origin
//! serves it, follows its owner, releases it (a hand-off to the spread's
//! choice) or claims it: a partition whose owner stopped renewing is
//! taken over by a claim (`moves::claim`, then `store::claim_partition`).
//! It also tends what the partitions served here need between looks:
//! stepping down when a store stopped, checkpoint builds, the key store.

use std::path::PathBuf;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::{remove_later, Current, RegionOrigin};
use crate::http::Shared;
use crate::region::checkpoint::Built;
use crate::region::liveness::{Decision, Released};
use crate::region::membership::Membership;
use crate::region::WalError;

/// A claim's outcome, with its partition and folder.
type ClaimDone = (
    u32,
    PathBuf,
    Result<std::io::Result<Shared>, tokio::task::JoinError>,
);

/// Failed claims of one partition in a row past which this origin stands
/// aside (a lost race fails a claim once; a broken disk or bucket again
/// and again).
const STAND_ASIDE_AFTER: u32 = 2;

/// How long a partition this origin claimed back after releasing it stays
/// here whatever the spread says.
const TAKEN_BACK_KEPT: Duration = Duration::from_secs(60);

/// What the loop keeps per partition between looks.
pub(super) struct Tending {
    claims: FuturesUnordered<futures::future::BoxFuture<'static, ClaimDone>>,
    claiming: Vec<bool>,
    /// Each partition's failed claims in a row, and when the next may start.
    failures: Vec<u32>,
    next_claim: Vec<Instant>,
    /// The ETag the key store was last read from the bucket at.
    keys_read: Option<String>,
    /// Each partition's checkpoint build under way, and when the next may
    /// start.
    building: Vec<Option<JoinHandle<Result<Built, WalError>>>>,
    next_build: Vec<Instant>,
    /// With one WAL per origin, each partition's last checkpoint this
    /// origin published (its tenure's epoch, and its number): no build is
    /// started, and no bucket read made, until the log went
    /// `--region-checkpoint-objects` past it.
    pub(super) stood: Vec<Option<(u64, u64)>>,
    /// The epoch each build under way was started in (its checkpoint is
    /// of that tenure, whatever the partition's epoch when it ends).
    build_epoch: Vec<Option<u64>>,
    /// A partition this origin released and then claimed back (its target
    /// did not claim it: its disk or bucket may be failing) is not released
    /// again before this, so the two do not hand it back and forth.
    keep_until: Vec<Instant>,
    /// The round deleting dead origins' logs under way (partition 0's
    /// owner runs them: `origin_log::collect_dead_logs`), and when the next
    /// may start.
    pub(super) dead_logs: Option<JoinHandle<()>>,
    pub(super) next_dead_logs: Instant,
}

impl RegionOrigin {
    /// The membership loop: look, decide and act for every partition;
    /// until closing.
    pub(super) async fn run(self: Arc<Self>, mut m: Membership) {
        let renew = m.config().renew;
        let n = self.partitions as usize;
        let mut interval = tokio::time::interval(renew);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut closed = self.closing.subscribe();
        let now = Instant::now();
        let mut t = Tending {
            claims: FuturesUnordered::new(),
            claiming: vec![false; n],
            failures: vec![0; n],
            next_claim: vec![now; n],
            keys_read: None,
            building: (0..n).map(|_| None).collect(),
            next_build: vec![now + self.store.region.checkpoint.interval; n],
            stood: vec![None; n],
            build_epoch: vec![None; n],
            keep_until: vec![now; n],
            dead_logs: None,
            next_dead_logs: now,
        };
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = closed.wait_for(|c| *c) => break,
                // A claim that finishes is served at once, not at the next tick.
                Some(done) = t.claims.next(), if !t.claims.is_empty() => {
                    self.claim_done(&mut t, done, renew);
                    continue;
                }
            }
            if !self.pin_partitions().await {
                continue;
            }
            m.set_tenures(self.one_wal());
            // Claims name their feed by it (read at start unless the
            // bucket did not answer then): no claim without it, or the
            // partition's feed would go on unlogged under a name of its own
            // and the next owner resume the last logged one past changes
            // no edge heard of (decision 0017). Meanwhile it follows, and
            // stands aside so no partition is handed to it.
            let keyed = self.peer_key().await.is_some();
            if !self.look(&mut m).await {
                continue;
            }
            self.tend_served(&mut t).await;
            self.refresh_keys(&mut t).await;
            self.decide(&mut t, &mut m, keyed).await;
            let aside = !keyed || t.failures.iter().any(|f| *f >= STAND_ASIDE_AFTER);
            self.standing_aside.store(aside, Relaxed);
        }
        self.builds_stop.store(true, Relaxed);
        // Claims still replaying finish, and their stores stop at once.
        while let Some((_, dir, outcome)) = t.claims.next().await {
            if let Ok(Ok(state)) = outcome {
                state.store.shutdown().await;
            }
            remove_later(dir);
        }
        for state in self.serving() {
            let _ = state.closing.send(true);
        }
    }

    /// A claim ended: served, or backed off (a renewal, doubling up to
    /// 30 s); claims that keep failing make this origin stand aside (the
    /// others see it leaving and take over).
    fn claim_done(
        self: &Arc<Self>,
        t: &mut Tending,
        (p, dir, outcome): ClaimDone,
        renew: Duration,
    ) {
        let i = p as usize;
        t.claiming[i] = false;
        let took_back = self.released.lock().iter().any(|(r, _)| r.partition == p);
        if self.claimed(p, dir, outcome) {
            t.failures[i] = 0;
            if p == 0 {
                self.start_subscriptions();
            }
            if took_back {
                t.keep_until[i] = Instant::now() + TAKEN_BACK_KEPT;
            }
        } else {
            t.failures[i] = t.failures[i].saturating_add(1);
            let wait = renew
                .saturating_mul(1u32 << t.failures[i].min(5))
                .min(Duration::from_secs(30));
            t.next_claim[i] = Instant::now() + wait;
        }
        let aside = t.failures.iter().any(|f| *f >= STAND_ASIDE_AFTER);
        self.standing_aside.store(aside, Relaxed);
    }

    /// Whether the bucket's partition count is this origin's (checked once;
    /// false until it could be, and for good on a mismatch).
    async fn pin_partitions(&self) -> bool {
        if self.pinned.load(Relaxed) {
            return true;
        }
        let objects = self.objects.get().expect("set before the loop");
        if !self.read_layout(&**objects).await {
            return false;
        }
        let pin = crate::region::pin::partitions(&**objects, self.partitions, self.one_wal());
        match tokio::time::timeout(self.patience(), pin).await {
            Ok(Ok(())) => {
                self.pinned.store(true, Relaxed);
                true
            }
            Ok(Err(crate::region::pin::PinError::Mismatch(why))) => {
                // Found only now: stay out of the region.
                tracing::error!(%why, "this origin does not join the region");
                false
            }
            _ => false,
        }
    }

    /// Reads the region's heartbeats; false when the bucket did not answer.
    async fn look(&self, m: &mut Membership) -> bool {
        match m.look(self.patience()).await {
            Some(live) => {
                self.metrics.live_nodes.store(live as i64, Relaxed);
                if m.conflict() {
                    self.metrics.node_id_conflicts.fetch_add(1, Relaxed);
                }
                true
            }
            None => {
                self.metrics.heartbeat_failures.fetch_add(1, Relaxed);
                false
            }
        }
    }

    /// The partitions served here: step down from one whose store stopped,
    /// publish the keys from partition 0's, start and reap checkpoint builds.
    async fn tend_served(self: &Arc<Self>, t: &mut Tending) {
        for p in 0..self.partitions {
            let i = p as usize;
            if t.claiming[i] {
                continue;
            }
            let Current::Serving { state, .. } = self.current(p) else {
                continue;
            };
            if state.store.is_stopped() || self.log_stopped() {
                // Its writer stopped (fenced, or a put failed): nothing
                // more is acknowledged; claim again or follow.
                tracing::warn!(
                    partition = p,
                    "this origin's store stopped writing; it steps down"
                );
                self.step_down(p, Current::Joining);
                continue;
            }
            if p == 0 {
                self.publish_keys(&state).await;
                self.tend_dead_logs(t);
            }
            if t.building[i].as_ref().is_some_and(|b| b.is_finished()) {
                let outcome = t.building[i].take().expect("finished").await;
                if let (Ok(Ok(Built::Published { number, .. })), Some(epoch)) =
                    (&outcome, t.build_epoch[i].take())
                {
                    t.stood[i] = Some((epoch, *number));
                }
                self.built(p, outcome);
            }
            let now = Instant::now();
            if t.building[i].is_none() && now >= t.next_build[i] {
                t.next_build[i] = now + self.store.region.checkpoint.interval;
                t.build_epoch[i] = state.store.epoch();
                t.building[i] = if self.one_wal() {
                    self.due_in_log(&state, t.stood[i])
                        .then(|| self.build_in_log(p, &state))
                        .flatten()
                } else {
                    self.build_checkpoint(p, &state)
                };
            }
        }
    }

    /// Keys made or revoked on partition 0's owner reach the stores of the
    /// others.
    async fn refresh_keys(&self, t: &mut Tending) {
        let reading = !self.serving().is_empty() || !self.replica_states().is_empty();
        if !reading || matches!(self.current(0), Current::Serving { .. }) {
            return;
        }
        let objects = self.objects.get().expect("set before the loop");
        let refresh = crate::region::auth_sync::refresh(&**objects, &self.data, &mut t.keys_read);
        match tokio::time::timeout(self.patience(), refresh).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not read the region's key store; trying again")
            }
            Err(_) => tracing::warn!("reading the region's key store took too long"),
        }
    }

    /// For every partition not being claimed, what `liveness` decides, and
    /// acting on it: a release, a follow, a claim (a takeover when the
    /// owner went silent).
    async fn decide(self: &Arc<Self>, t: &mut Tending, m: &mut Membership, keyed: bool) {
        // A release is listed until a newer claim of it is seen.
        self.released
            .lock()
            .retain(|(r, _)| m.owner(r.partition).is_some_and(|o| o.epoch == r.epoch));
        let mine: Vec<Released> = self.released.lock().iter().map(|(r, _)| *r).collect();
        let mut held = self.serving().len();
        for p in 0..self.partitions {
            let i = p as usize;
            if t.claiming[i] {
                continue;
            }
            let serving = match self.current(p) {
                Current::Serving { epoch, .. } => Some(epoch),
                _ => None,
            };
            match m.decide(p, serving, &mine, held) {
                Decision::Serve | Decision::Wait => {}
                Decision::Release if Instant::now() < t.keep_until[i] => {}
                Decision::Release => {
                    // One at a time down to the share: the decisions of
                    // this pass saw the count before it.
                    held = held.saturating_sub(1);
                    if p == 0 {
                        // The next owner of the admin API starts from every
                        // key made here.
                        if let Current::Serving { state, .. } = self.current(0) {
                            self.publish_keys(&state).await;
                        }
                    }
                    self.release(p)
                }
                Decision::Follow { url } => {
                    // Another serves it: its failed claims no longer count
                    // against this origin.
                    t.failures[i] = 0;
                    self.follow(p, url)
                }
                Decision::Claim if keyed && Instant::now() >= t.next_claim[i] => {
                    t.claiming[i] = true;
                    let (p, dir, task) = self.claim(p);
                    t.claims.push(Box::pin(async move { (p, dir, task.await) }));
                }
                Decision::Claim => {}
            }
        }
    }
}
