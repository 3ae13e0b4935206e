//! The I/O of `liveness`: this origin's heartbeat object, the others'
//! heartbeats, and the partition's newest epoch claim, read from the
//! bucket. Time is tokio's monotonic clock (paused in tests), never the
//! bucket's or another machine's.
//!
//! ```text
//! region/nodes/{node}                         one origin's heartbeat (JSON)
//! region/partitions/{p:04}/epochs/{e:020}     who claimed p at epoch e
//! ```
//!
//! Cost: every `renew` an origin puts its heartbeat, lists the heartbeats
//! and reads each: with three origins and the default second, five
//! requests a second per origin. Owners come from the heartbeats (each
//! lists what its origin serves); each owner looks its own partitions up
//! (a HEAD of the next claim each), as does every origin for a partition
//! whose owner no other live heartbeat affirms.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::assignment;
use super::format;
use super::liveness::{self, Decision, Heartbeat, Liveness, Owner, Released, Served, Situation};
use crate::objects::keys;

/// How origins find each other and take over (`--lease`, `--lease-renew`).
#[derive(Clone, Debug)]
pub struct MembershipConfig {
    /// An origin whose heartbeat has not changed for this long is dead;
    /// takeover of its partition starts then.
    pub lease: Duration,
    /// How often an origin renews its heartbeat and looks at the others.
    pub renew: Duration,
    /// How much longer each next origin in name order waits before it
    /// claims a dead owner's partition.
    pub stagger: Duration,
    /// Heartbeats observed at most (more are ignored, and logged).
    pub max_nodes: usize,
}

impl Default for MembershipConfig {
    fn default() -> Self {
        MembershipConfig {
            lease: Duration::from_secs(5),
            renew: Duration::from_secs(1),
            stagger: Duration::from_secs(2),
            max_nodes: 256,
        }
    }
}

/// Heartbeats read at once.
const READS: usize = 16;

/// This origin's heartbeat, renewed on a task of its own (so a slow look
/// or a long claim never delays it).
pub struct Heartbeater {
    store: Arc<dyn ObjectStore>,
    beat: parking_lot::Mutex<Heartbeat>,
}

impl Heartbeater {
    pub fn new(store: Arc<dyn ObjectStore>, node: &str, url: &str) -> Heartbeater {
        Heartbeater {
            store,
            beat: parking_lot::Mutex::new(Heartbeat {
                node: node.to_owned(),
                url: url.to_owned(),
                // A restart's sequence differs from its last life's.
                seq: u64::from(rand::random::<u32>()) << 16,
                leaving: false,
                released: Vec::new(),
                serving: Vec::new(),
            }),
        }
    }

    /// Renews the heartbeat; `leaving` tells the others to take over now
    /// (a clean stop, or an origin whose claims keep failing), `released`
    /// which partitions they may take at once, `serving` what it owns.
    pub async fn beat(
        &self,
        leaving: bool,
        released: Vec<Released>,
        serving: Vec<Served>,
    ) -> object_store::Result<()> {
        let (key, bytes) = {
            let mut beat = self.beat.lock();
            beat.seq += 1;
            beat.leaving = leaving;
            beat.released = released;
            beat.serving = serving;
            (keys::node_heartbeat(&beat.node), beat.encode())
        };
        self.store
            .put(&key, PutPayload::from(bytes))
            .await
            .map(|_| ())
    }
}

/// One origin's view of its region.
pub struct Membership {
    store: Arc<dyn ObjectStore>,
    config: MembershipConfig,
    partitions: u32,
    me: String,
    /// This origin's advertised URL: a heartbeat under its name with
    /// another is a second origin started with the same `--node-id`.
    url: String,
    /// Whether the last look saw such a heartbeat.
    conflict: bool,
    liveness: Liveness,
    /// Each partition's newest claim.
    owners: Vec<Option<Owner>>,
    /// Each partition's origin by the spread over the live origins.
    targets: Vec<Option<String>>,
    /// Since when each partition was seen with no claim at all.
    unclaimed_since: Vec<Option<Duration>>,
    /// Since when this origin serves each partition against the spread
    /// while it holds more than its share.
    misplaced_since: Vec<Option<Duration>>,
    /// The live origins at the last look.
    live: usize,
    started: tokio::time::Instant,
    /// When the last look failed (None: it did not).
    blind_since: Option<Duration>,
    /// One WAL per origin: a partition's owner is its newest tenure's
    /// (tenure k as epoch k + 1), not its newest epoch claim's.
    tenures: bool,
}

impl Membership {
    pub fn new(
        store: Arc<dyn ObjectStore>,
        config: MembershipConfig,
        node: &str,
        url: &str,
        partitions: u32,
    ) -> Membership {
        let n = partitions as usize;
        Membership {
            store,
            liveness: Liveness::new(config.lease, config.max_nodes),
            config,
            partitions,
            me: node.to_owned(),
            url: url.to_owned(),
            conflict: false,
            owners: vec![None; n],
            targets: vec![None; n],
            unclaimed_since: vec![None; n],
            misplaced_since: vec![None; n],
            live: 0,
            started: tokio::time::Instant::now(),
            blind_since: None,
            tenures: false,
        }
    }

    /// Owners read from the partitions' tenures (one WAL per origin,
    /// decision 0028).
    pub fn with_tenures(mut self, tenures: bool) -> Membership {
        self.tenures = tenures;
        self
    }

    /// [`Membership::with_tenures`], once the layout was read from the
    /// bucket (`--region-wal auto`).
    pub fn set_tenures(&mut self, tenures: bool) {
        self.tenures = tenures;
    }

    fn now(&self) -> Duration {
        self.started.elapsed()
    }

    pub fn config(&self) -> &MembershipConfig {
        &self.config
    }

    /// Whether the last look saw another origin under this one's name.
    pub fn conflict(&self) -> bool {
        self.conflict
    }

    /// The newest claim of partition `p` known.
    pub fn owner(&self, p: u32) -> Option<&Owner> {
        self.owners.get(p as usize)?.as_ref()
    }

    /// Reads the heartbeats and the newest claims. Returns the live origins.
    /// A look that fails leaves this origin blind until one succeeds; if
    /// that took longer than a renewal, every lease starts afresh
    /// ([`Liveness::after_blind`]): an outage of the bucket is not a death.
    /// It gives up after `patience` (counted as failed).
    pub async fn look(&mut self, patience: Duration) -> Option<usize> {
        let started = self.now();
        let looked = match tokio::time::timeout(patience, self.look_once()).await {
            Ok(Ok(live)) => Some(live),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not read the region's membership");
                None
            }
            Err(_) => {
                tracing::warn!(?patience, "reading the region's membership took too long");
                None
            }
        };
        match (looked, self.blind_since) {
            (None, None) => self.blind_since = Some(started),
            (Some(_), Some(since)) => {
                self.blind_since = None;
                if self.now().saturating_sub(since) > self.config.renew {
                    self.liveness.after_blind(self.now());
                }
            }
            _ => {}
        }
        looked
    }

    async fn look_once(&mut self) -> object_store::Result<usize> {
        let listed: Vec<Path> = self
            .store
            .list(Some(&keys::node_heartbeats()))
            .map_ok(|meta| meta.location)
            .take(self.config.max_nodes.saturating_add(1))
            .try_collect()
            .await?;
        if listed.len() > self.config.max_nodes {
            tracing::warn!(
                max = self.config.max_nodes,
                "more heartbeat objects than the region observes; the rest are ignored"
            );
        }
        let store = &self.store;
        let beats: Vec<Heartbeat> = futures::stream::iter(listed)
            .map(|key| async move {
                match store.get(&key).await {
                    Ok(got) => got.bytes().await.map(|b| Heartbeat::decode(&b)),
                    // Gone between the listing and the read.
                    Err(object_store::Error::NotFound { .. }) => Ok(None),
                    Err(e) => Err(e),
                }
            })
            .buffer_unordered(READS)
            .try_filter_map(|b| async move { Ok(b) })
            .try_collect()
            .await?;
        let now = self.now();
        self.conflict = beats.iter().any(|b| b.node == self.me && b.url != self.url);
        if self.conflict {
            tracing::error!(
                node = %self.me,
                "another origin heartbeats under this origin's --node-id with another URL: give each origin of a region its own name (ownership stays safe, but the two take partitions from each other)"
            );
        }
        self.liveness.observe(&beats, now);
        let unsure = self.owners_from(&beats, now);
        let newest: Vec<(u32, Option<Owner>)> = {
            let me = &*self;
            futures::stream::iter(unsure)
                .map(
                    |p| async move { Ok::<_, object_store::Error>((p, me.newest_claim(p).await?)) },
                )
                .buffer_unordered(READS)
                .try_collect()
                .await?
        };
        for (p, owner) in newest {
            if let Some(owner) = owner {
                self.owners[p as usize] = Some(owner);
            }
        }
        // The owners named are noted (an owner never seen beating is dead
        // a lease after it was first named).
        let owners: std::collections::BTreeSet<&str> = self
            .owners
            .iter()
            .flatten()
            .map(|o| o.node.as_str())
            .collect();
        self.liveness.note(owners.iter().copied(), now);
        for (p, owner) in self.owners.iter().enumerate() {
            let since = &mut self.unclaimed_since[p];
            match owner {
                None => {
                    since.get_or_insert(now);
                }
                Some(_) => *since = None,
            }
        }
        let live: Vec<&str> = self.liveness.live(now).collect();
        let count = live.len();
        self.live = count;
        self.targets = assignment::spread(self.partitions, &live)
            .into_iter()
            .map(|t| t.map(str::to_owned))
            .collect();
        Ok(count)
    }

    /// Takes the owners the heartbeats name (the highest epoch each
    /// partition is served at, if newer than the one known), and returns
    /// the partitions whose owner no other live origin's heartbeat
    /// affirms: only those are looked up in the bucket (one request each),
    /// so with every owner alive and beating each partition is looked up
    /// by its owner alone, once a renewal. A claim not yet in its maker's
    /// heartbeat is seen at its next renewal; a claim is what owns, so a
    /// late view only delays a decision.
    fn owners_from(&mut self, beats: &[Heartbeat], now: Duration) -> Vec<u32> {
        let live: std::collections::BTreeSet<&str> = self.liveness.live(now).collect();
        let mut affirmed = vec![false; self.owners.len()];
        for beat in beats {
            for &Served { partition, epoch } in &beat.serving {
                let Some(known) = self.owners.get_mut(partition as usize) else {
                    continue;
                };
                if known.as_ref().is_none_or(|o| o.epoch < epoch) {
                    *known = Some(Owner {
                        epoch,
                        node: beat.node.clone(),
                        url: beat.url.clone(),
                    });
                }
                // Never this origin's own word: it looks its own
                // partitions up (one request each a renewal), so a newer
                // claim whose maker died before it beat is still seen.
                if known
                    .as_ref()
                    .is_some_and(|o| o.epoch == epoch && o.node == beat.node)
                    && beat.node != self.me
                    && live.contains(beat.node.as_str())
                {
                    affirmed[partition as usize] = true;
                }
            }
        }
        (0..self.partitions)
            .filter(|&p| !affirmed[p as usize])
            .collect()
    }

    /// The highest number of the keys under `prefix`, which are made in
    /// order without gaps. With `around` (the key known, the one after
    /// it), one HEAD of the next says whether a listing is needed at all
    /// (a HEAD costs a twelfth of a LIST, and this runs for every partition
    /// each renewal); the listing then starts at the known one.
    async fn newest_number(
        &self,
        prefix: &Path,
        around: Option<(Path, Path)>,
    ) -> object_store::Result<Option<u64>> {
        if let Some((_, next)) = &around {
            match self.store.head(next).await {
                Ok(_) => {}
                Err(object_store::Error::NotFound { .. }) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
        let listing = match &around {
            Some((known, _)) => self.store.list_with_offset(Some(prefix), known),
            None => self.store.list(Some(prefix)),
        };
        listing
            .try_fold(None::<u64>, |max, meta| async move {
                Ok(keys::numbered(&meta.location).map_or(max, |n| max.max(Some(n))))
            })
            .await
    }

    /// Partition `p`'s newest tenure past the one known, as an owner of
    /// epoch `k + 1` (None: none newer).
    async fn newest_tenure(&self, p: u32) -> object_store::Result<Option<Owner>> {
        let prefix = keys::partition_tenures(p);
        let known = self.owner(p).map(|o| o.epoch).filter(|e| *e > 0);
        // Tenure k is epoch k + 1: the next after epoch e is tenure e.
        let around = known.map(|e| {
            (
                keys::partition_tenure(p, e - 1),
                keys::partition_tenure(p, e),
            )
        });
        let newest = self.newest_number(&prefix, around).await?;
        let Some(k) = newest.filter(|k| Some(*k + 1) > known) else {
            return Ok(None);
        };
        let bytes = self
            .store
            .get(&keys::partition_tenure(p, k))
            .await?
            .bytes()
            .await?;
        match super::origin_wal::format::decode_tenure(&bytes) {
            Ok(t) => Ok(Some(Owner {
                epoch: k + 1,
                node: t.node,
                url: t.url,
            })),
            Err(e) => {
                tracing::error!(partition = p, tenure = k, error = %e, "a tenure is not of this protocol");
                Ok(None)
            }
        }
    }

    /// Partition `p`'s newest epoch claim past the one known (None: none newer).
    async fn newest_claim(&self, p: u32) -> object_store::Result<Option<Owner>> {
        if self.tenures {
            return self.newest_tenure(p).await;
        }
        let prefix = keys::partition_epochs(p);
        let known = self.owner(p).map(|o| o.epoch);
        let around = known.map(|e| (keys::partition_epoch(p, e), keys::partition_epoch(p, e + 1)));
        let newest = self.newest_number(&prefix, around).await?;
        let Some(epoch) = newest.filter(|e| Some(*e) > known) else {
            return Ok(None);
        };
        let bytes = self
            .store
            .get(&keys::partition_epoch(p, epoch))
            .await?
            .bytes()
            .await?;
        match format::decode_claim(&bytes) {
            Ok(claim) => Ok(Some(Owner {
                epoch: claim.epoch,
                node: claim.node,
                url: claim.url,
            })),
            Err(e) => {
                tracing::error!(partition = p, epoch, error = %e, "an epoch claim is not of this protocol");
                Ok(None)
            }
        }
    }

    /// What to do about partition `p`, serving `serving` (its epoch) or
    /// nothing, having released `mine` (this origin's own releases), and
    /// serving `held` partitions in all. A partition the spread gives to
    /// another is released only while this origin holds more than its
    /// share (`⌈P/N⌉`): the region needs balance, not the spread itself,
    /// and every hand-off costs its partition a moment of 503s.
    pub fn decide(
        &mut self,
        p: u32,
        serving: Option<u64>,
        mine: &[Released],
        held: usize,
    ) -> Decision {
        let now = self.now();
        let i = p as usize;
        let owner = self.owners[i].as_ref();
        let target = self.targets[i].as_deref();
        let share = (self.partitions as usize).div_ceil(self.live.max(1));
        let misplaced = serving.is_some() && held > share && target.is_some_and(|t| t != self.me);
        let misplaced_for = if misplaced {
            Some(now.saturating_sub(*self.misplaced_since[i].get_or_insert(now)))
        } else {
            self.misplaced_since[i] = None;
            None
        };
        let released_by_me = owner.is_some_and(|o| {
            o.node == self.me
                && mine.contains(&Released {
                    partition: p,
                    epoch: o.epoch,
                })
        });
        let vacant_for = self
            .liveness
            .vacant_for(&self.me, p, owner, self.unclaimed_since[i], now);
        let situation = Situation {
            me: &self.me,
            serving,
            owner,
            target,
            vacant_for,
            released_by_me,
            misplaced_for,
        };
        liveness::decide(&situation, &self.liveness, self.config.stagger, now)
    }
}
