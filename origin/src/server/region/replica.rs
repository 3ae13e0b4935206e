//! Replicas of the partitions this origin follows (decision 0018): each
//! is a store of its own under `DATA/region/replica-{n}`, laid out from
//! the bucket and kept up by rounds of the owner's WAL objects
//! (`region::replica`, by `region::follow`'s rules), and it answers the
//! reads a copy that may lag cannot get wrong: `consistency=local`
//! catch-up reads below its tail, complete chunks, and the stream's latest
//! snapshot by its cacheable URL. Everything else
//! is forwarded to the owner, as before.
//!
//! A replica runs while its partition is followed or joining (so reads
//! go on while an owner that stopped is replaced), and stops when this
//! origin claims the partition or stops.
//!
//! **Read your writes through one origin.** A write this origin forwarded
//! is remembered by its stream's path (at most `--region-replica-written`
//! of them, the oldest forgotten first) with the time its answer came;
//! that stream's reads are forwarded until a round that began after it
//! read everything the owner had acknowledged (up to a number not there)
//! and its look let it stand. The owner acknowledges commits in number
//! order, so such a round holds every append acknowledged before it began.
//!
//! **Read your writes through any origin** (decision 0025). A read with
//! `min_next_offset` (the `Stream-Next-Offset` its client's write was
//! answered with, through whichever origin) is answered here only once the
//! replica holds the stream up to it: the follower waits for the replica's
//! rounds up to `--region-replica-floor-wait`, and forwards the read to the
//! owner, which has the write, past it.

use std::collections::HashMap;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::time::Duration;

use axum::http::Method;
use parking_lot::{Mutex, RwLock};
use shared::offset::{Offset, ReadFrom, CHUNK_BYTES};
use shared::params::{Consistency, Live};
use shared::paths::Target;
use tokio::sync::watch;
use tokio::time::Instant;

use super::{remove_later, RegionOrigin};
use crate::core::config::Expiry;
use crate::http::Shared;
use crate::region::log_replica;
use crate::region::replica::{self as bucket, Ended, IDLE_LOOK};

mod place;
use place::Place;

/// One partition's replica as this origin keeps it.
pub(super) struct Replica {
    /// Its store, once laid out and open (none while it is being built).
    state: Arc<RwLock<Option<Shared>>>,
    /// When the last round that read all its owner had acknowledged (and
    /// stood) began.
    caught_up: Arc<Mutex<Option<Instant>>>,
    /// Counts what changed the replica's streams (a round's commits
    /// applied, a store built again): reads waiting for a floor look again.
    applied: Arc<watch::Sender<u64>>,
    /// Asks for a round with a look at the checkpoints now (one that can
    /// catch up), not at the next interval.
    hurry: Arc<tokio::sync::Notify>,
    stop: watch::Sender<bool>,
}

impl Replica {
    /// Starts keeping a replica of partition `p`.
    pub(super) fn start(me: &Arc<RegionOrigin>, p: u32) -> Replica {
        let replica = Replica {
            state: Arc::default(),
            caught_up: Arc::default(),
            applied: Arc::new(watch::Sender::new(0)),
            hurry: Arc::default(),
            stop: watch::Sender::new(false),
        };
        tokio::spawn(keep(
            Arc::clone(me),
            p,
            Kept {
                slot: Arc::clone(&replica.state),
                caught_up: Arc::clone(&replica.caught_up),
                applied: Arc::clone(&replica.applied),
                hurry: Arc::clone(&replica.hurry),
            },
            replica.stop.subscribe(),
        ));
        replica
    }

    /// How long ago it last caught up, if it did.
    pub(super) fn lag(&self) -> Option<Duration> {
        self.caught_up.lock().map(|at| at.elapsed())
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        // Its task stops its store and removes its folder.
        self.stop.send_replace(true);
    }
}

/// How long a replica answers after it last caught up: past it (the bucket
/// does not answer this origin, or a round keeps failing) its reads are
/// forwarded, so `consistency=local` is never older than this. An idle
/// partition's replica catches up at every look, every [`IDLE_LOOK`].
pub const FRESH_FOR: Duration = Duration::from_secs(15);

/// Whether a replica that last caught up at `caught_up` may answer at `now`.
fn fresh(caught_up: Option<Instant>, now: Instant) -> bool {
    caught_up.is_some_and(|c| now.saturating_duration_since(c) <= FRESH_FOR)
}

/// Builds the replica, follows its owner's commits, and builds it again
/// whenever its rounds say so; until stopped. While a new one is built the
/// old one goes on answering (it holds an older state the owner had), as
/// long as it is fresh enough.
/// What a replica's task keeps up to date for the readers.
struct Kept {
    slot: Arc<RwLock<Option<Shared>>>,
    caught_up: Arc<Mutex<Option<Instant>>>,
    applied: Arc<watch::Sender<u64>>,
    hurry: Arc<tokio::sync::Notify>,
}

async fn keep(me: Arc<RegionOrigin>, p: u32, kept: Kept, mut stop: watch::Receiver<bool>) {
    let Kept {
        caught_up,
        applied,
        hurry,
        ..
    } = &kept;
    let Some(objects) = me.objects.get().cloned() else {
        return;
    };
    let mut failures = 0u32;
    // The replica answering now, and its folder.
    let mut current: Option<(Shared, std::path::PathBuf)> = None;
    while !*stop.borrow() {
        let n = me.incarnations.fetch_add(1, Relaxed) + 1;
        let dir = me.data.join("region").join(format!("replica-{n}"));
        let began = Instant::now();
        // Not cancelled by a stop: a store half opened would be left running.
        let opened = open(&me, p, Arc::clone(&objects), dir.clone()).await;
        if *stop.borrow() {
            if let Ok((state, _)) = opened {
                state.store.shutdown().await;
            }
            remove_later(dir);
            break;
        }
        let (state, follow) = match opened {
            Ok(done) => done,
            Err(e) => {
                me.metrics.replica_failures.fetch_add(1, Relaxed);
                tracing::warn!(partition = p, error = %e, "could not build the partition's replica; trying again");
                remove_later(dir);
                failures = failures.saturating_add(1);
                let wait = Duration::from_millis(250)
                    .saturating_mul(1 << failures.min(7))
                    .min(Duration::from_secs(30));
                tokio::select! {
                    _ = tokio::time::sleep(wait) => continue,
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
        };
        failures = 0;
        tracing::info!(
            partition = p,
            streams = state.store.stream_count(),
            at = ?follow,
            "following the partition with a replica"
        );
        // The lay-out read up to a number not there and its look stood:
        // it holds every append acknowledged before it began.
        swap(&me, &kept, Some((&state, began)), &current);
        match current.replace((Arc::clone(&state), dir)) {
            Some((old, old_dir)) => retire(old, old_dir),
            None => {
                me.metrics.replicas.fetch_add(1, Relaxed);
            }
        }
        follow_rounds(
            &me,
            p,
            &*objects,
            &state,
            follow,
            (caught_up, applied, hurry),
            &mut stop,
        )
        .await;
        if !*stop.borrow() {
            me.metrics.replica_rebuilds.fetch_add(1, Relaxed);
        }
    }
    swap(&me, &kept, None, &current);
    if let Some((old, old_dir)) = current {
        me.metrics.replicas.fetch_sub(1, Relaxed);
        retire(old, old_dir);
    }
}

/// Puts `next` (a store, and when it caught up) in the slot in place of
/// `old`, under the scrape lock with the old one's counts folded into the
/// retired ones, so no scrape sees them twice or not at all.
fn swap(
    me: &RegionOrigin,
    kept: &Kept,
    next: Option<(&Shared, Instant)>,
    old: &Option<(Shared, std::path::PathBuf)>,
) {
    if let Some((state, _)) = next {
        // The subscriptions hear of its creates and appends from now on,
        // and look at every stream again for what came before.
        me.relay.watch(&state.store);
    }
    let _scrape = me.scrape.lock();
    *kept.slot.write() = next.map(|(state, _)| Arc::clone(state));
    *kept.caught_up.lock() = next.map(|(_, at)| at);
    kept.applied.send_modify(|n| *n += 1);
    if let Some((old, _)) = old {
        me.retired.absorb(&old.metrics);
    }
}

/// Stops a replica's store in the background and removes its folder.
fn retire(state: Shared, dir: std::path::PathBuf) {
    tokio::spawn(async move {
        state.store.shutdown().await;
        drop(state);
        remove_later(dir);
    });
}

/// Lays the replica out and opens its store, on a blocking thread (the
/// lay-out writes and syncs the local log).
async fn open(
    me: &Arc<RegionOrigin>,
    p: u32,
    objects: Arc<dyn object_store::ObjectStore>,
    dir: std::path::PathBuf,
) -> std::io::Result<(Shared, Place)> {
    // Bounded, so a slow bucket does not hold a claim's fetch behind it
    // (the renewal's refresh brings the keys later).
    match tokio::time::timeout(me.patience(), me.fetch_keys()).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => tracing::warn!(partition = p, error = %e, "a replica could not fetch the region's keys; they follow at the next renewal"),
        Err(_) => tracing::warn!(partition = p, "fetching the region's keys for a replica took too long; they follow at the next renewal"),
    }
    let mut config = me.partition_config(p, dir.clone());
    config.region.replica = true;
    config.region.feed = None;
    let open = me.opener(config);
    let runtime = tokio::runtime::Handle::current();
    let one_wal = me.one_wal();
    tokio::task::spawn_blocking(move || {
        let follow = runtime
            .block_on(async {
                if one_wal {
                    log_replica::lay_out(&*objects, p, &dir)
                        .await
                        .map(Place::Log)
                } else {
                    bucket::lay_out(&*objects, p, &dir).await.map(Place::Wal)
                }
            })
            .map_err(std::io::Error::other)?;
        Ok((open()?, follow))
    })
    .await
    .map_err(std::io::Error::other)?
}

/// Rounds every `--region-replica-interval` (at once again after one that
/// spent its budget) until stopped or the replica must be built again.
async fn follow_rounds(
    me: &RegionOrigin,
    p: u32,
    objects: &dyn object_store::ObjectStore,
    state: &Shared,
    mut follow: Place,
    (caught_up, applied, hurry): (
        &Mutex<Option<Instant>>,
        &watch::Sender<u64>,
        &tokio::sync::Notify,
    ),
    stop: &mut watch::Receiver<bool>,
) {
    // On the region origin's beat, not this replica's: the rounds of every
    // replica of one log read its next number together (`SharedReads`).
    let period = me.store.region.replica_interval;
    let since = me.rounds_from.elapsed().as_nanos();
    let step = period.as_nanos().max(1);
    let wait = u64::try_from(step - since % step).unwrap_or(0);
    let mut interval = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_nanos(wait),
        period,
    );
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut last_look: Option<Instant> = None;
    let mut more = false;
    loop {
        let mut hurried = false;
        if !more {
            tokio::select! {
                _ = interval.tick() => {}
                () = hurry.notified() => hurried = true,
                _ = stop.wait_for(|s| *s) => return,
            }
        }
        if *stop.borrow() {
            return;
        }
        let began = Instant::now();
        // Nothing new: the checkpoints are looked at now and then only (a
        // newer one may have deleted the number this replica waits at).
        let look_due = hurried || last_look.is_none_or(|at| at.elapsed() >= IDLE_LOOK);
        let (next, read) = match follow
            .read_next(objects, p, look_due, &me.shared_reads)
            .await
        {
            Ok(Some(done)) => done,
            Ok(None) => {
                more = false;
                continue;
            }
            Err(crate::region::WalError::Moved) => {
                tracing::info!(
                    partition = p,
                    "the partition's history moved under the replica; building it again"
                );
                return;
            }
            Err(e) => {
                me.metrics.replica_failures.fetch_add(1, Relaxed);
                tracing::debug!(partition = p, error = %e, "a replica's round could not read the bucket");
                more = false;
                continue;
            }
        };
        last_look = Some(began);
        if !follow.finish(next) {
            tracing::info!(
                partition = p,
                "a newer checkpoint moved the partition's start; building the replica again"
            );
            return;
        }
        if !read.frames.is_empty() {
            if let Err(e) = state.store.replicate(read.frames).await {
                tracing::warn!(partition = p, error = %e, "the replica could not take its owner's commits; building it again");
                return;
            }
            applied.send_modify(|n| *n += 1);
        }
        me.metrics
            .replica_objects
            .fetch_add(read.objects as u64, Relaxed);
        more = read.ended == Ended::Budget;
        if read.ended == Ended::Missing {
            *caught_up.lock() = Some(began);
            // Those waiting for a round that began after them look again.
            applied.send_modify(|n| *n += 1);
        }
    }
}

/// The writes this origin forwarded, by stream path (a 64-bit hash of it:
/// two paths that collide only forward more reads): when each answer came,
/// the least recently written forgotten first past `max`.
pub(super) struct Written {
    at: HashMap<u64, (Instant, u64)>,
    /// Each remembered stream by the turn of its last write.
    order: std::collections::BTreeMap<u64, u64>,
    turn: u64,
    max: usize,
}

fn path_key(path: &str) -> u64 {
    use std::hash::{BuildHasher, Hasher};
    static SEED: std::sync::OnceLock<std::collections::hash_map::RandomState> =
        std::sync::OnceLock::new();
    let mut h = SEED.get_or_init(Default::default).build_hasher();
    h.write(path.as_bytes());
    h.finish()
}

impl Written {
    pub(super) fn new(max: usize) -> Written {
        Written {
            at: HashMap::new(),
            order: std::collections::BTreeMap::new(),
            turn: 0,
            max,
        }
    }

    /// A write of `path` was answered at `when`.
    pub(super) fn note(&mut self, path: &str, when: Instant) {
        if self.max == 0 {
            return;
        }
        let key = path_key(path);
        self.turn += 1;
        if let Some((_, turn)) = self.at.insert(key, (when, self.turn)) {
            self.order.remove(&turn);
        }
        self.order.insert(self.turn, key);
        while self.at.len() > self.max {
            let Some((_, oldest)) = self.order.pop_first() else {
                break;
            };
            self.at.remove(&oldest);
        }
    }

    /// When the last write of `path` this origin forwarded was answered.
    pub(super) fn last(&self, path: &str) -> Option<Instant> {
        self.at.get(&path_key(path)).map(|(when, _)| *when)
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.at.len()
    }
}

/// What the replica does with a request now.
enum Local<T = Shared> {
    Answer(T),
    /// It would, but it does not hold the stream up to the read's floor
    /// yet: look again when it applied more (the receiver says when).
    Below(watch::Receiver<u64>),
    Forward,
}

/// How a wait for a replica to reach a read's floor ended.
#[derive(Debug, PartialEq, Eq)]
enum Reached<T> {
    Answer(T),
    Forward,
    /// Past the deadline (or the replica stopped) below the floor.
    TooLate,
}

/// Looks with `look` until it answers or forwards, looking again each
/// time the replica applied more, until `deadline` (the tokio clock, so
/// tests pause it).
async fn until_reached<T>(deadline: Instant, mut look: impl FnMut() -> Local<T>) -> Reached<T> {
    loop {
        match look() {
            Local::Answer(t) => return Reached::Answer(t),
            Local::Forward => return Reached::Forward,
            Local::Below(mut applied) => {
                match tokio::time::timeout_at(deadline, applied.changed()).await {
                    Ok(Ok(())) => {}
                    Ok(Err(_)) | Err(_) => return Reached::TooLate,
                }
            }
        }
    }
}

/// What a request asks that a replica might answer.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Ask<'a> {
    /// A catch-up read (no `live`, `consistency=local`) from `from`, of a
    /// state of the stream that ends at `floor` or past it.
    Read {
        stream: &'a str,
        from: ReadFrom,
        floor: Option<Offset>,
    },
    /// A chunk of the immutable grid.
    Chunk {
        stream: &'a str,
        token: &'a str,
        at: Offset,
    },
    /// A snapshot by its cacheable URL (incarnation and offset).
    Snapshot {
        stream: &'a str,
        token: &'a str,
        at: Offset,
    },
}

impl<'a> Ask<'a> {
    /// The ask in a request, if a replica may answer that kind.
    pub(super) fn of(method: &Method, path: &'a str, query: Option<&str>) -> Option<Ask<'a>> {
        if method != Method::GET {
            return None;
        }
        match shared::paths::classify(path) {
            Target::Stream(stream) => {
                let params = shared::params::parse_read_query(query).ok()?;
                // `offset=now` names the owner's end.
                (params.live == Live::No
                    && params.consistency == Consistency::Local
                    && params.offset != ReadFrom::Now)
                    .then_some(Ask::Read {
                        stream,
                        from: params.offset,
                        floor: params.floor,
                    })
            }
            Target::Chunk {
                stream,
                token,
                offset,
            } => Some(Ask::Chunk {
                stream,
                token,
                at: Offset::parse(offset)?,
            }),
            Target::IncarnationSnapshot {
                stream,
                token,
                offset,
            } => Some(Ask::Snapshot {
                stream,
                token,
                at: Offset::parse(offset)?,
            }),
            _ => None,
        }
    }

    pub(super) fn stream(&self) -> &'a str {
        match self {
            Ask::Read { stream, .. } | Ask::Chunk { stream, .. } | Ask::Snapshot { stream, .. } => {
                stream
            }
        }
    }

    /// Whether a replica holding the stream as `view` (`None`: not at all)
    /// holds it up to the read's floor (decision 0025): below it, the
    /// client's write is not in it yet.
    pub(super) fn floor_reached(&self, view: Option<&crate::store::StreamView>) -> bool {
        match self {
            Ask::Read { floor, .. } => {
                shared::params::floor_reached(*floor, view.map_or(0, |v| v.end().next))
            }
            Ask::Chunk { .. } | Ask::Snapshot { .. } => true,
        }
    }

    /// Whether a replica answers anything of a stream it holds as `view`:
    /// never one whose reads extend its life (only its owner logs that),
    /// nor one deleted.
    fn may_reach(&self, view: &crate::store::StreamView) -> bool {
        view.config.expiry == Expiry::Never && !view.is_soft_deleted() && !view.end().gone
    }

    /// Whether a replica holding the stream as `view` shows answers it
    /// exactly as the owner would (with what the owner had when the
    /// replica caught up): only below its tail (the owner decides whether
    /// there is more), never a stream whose reads extend its life or that
    /// is deleted, and only complete chunks.
    pub(super) fn answerable(&self, view: &crate::store::StreamView) -> bool {
        let tail = view.end();
        if !self.may_reach(view) {
            return false;
        }
        match self {
            Ask::Read { from, .. } => match from {
                ReadFrom::Start => tail.next > tail.retained || tail.closed,
                // Never asked (`Ask::of`): the owner's end.
                ReadFrom::Now => false,
                ReadFrom::At(at) => {
                    at.0 >= tail.retained
                        && (at.0 < tail.next || (tail.closed && at.0 == tail.next))
                }
            },
            Ask::Chunk { token, at, .. } => {
                *token == &*view.incarnation
                    && at.0 >= tail.retained
                    && at.0 % CHUNK_BYTES == 0
                    && at
                        .0
                        .checked_add(CHUNK_BYTES)
                        .is_some_and(|end| end <= tail.next)
            }
            // Its object is in the bucket; only the stream's own latest
            // (a fork's inherited one, or one replaced, the owner answers).
            Ask::Snapshot { token, at, .. } => {
                *token == &*view.incarnation && view.snapshot().is_some_and(|m| m.offset == at.0)
            }
        }
    }
}

impl RegionOrigin {
    /// The replica's store if it answers `req` of partition `p` itself,
    /// after waiting (at most `--region-replica-floor-wait`) for it to
    /// reach the read's floor; `None`: the owner answers.
    pub(super) async fn replica_for(
        &self,
        p: u32,
        method: &Method,
        uri: &axum::http::Uri,
    ) -> Option<Shared> {
        let ask = Ask::of(method, uri.path(), uri.query())?;
        // A read with a floor may wait: only so many at once, the rest go
        // to the owner, which has every write, without waiting.
        let _waiting = if matches!(ask, Ask::Read { floor: Some(_), .. }) {
            let Ok(place) = self.floor_waiting.try_acquire() else {
                self.metrics.floor_forwards.fetch_add(1, Relaxed);
                return None;
            };
            Some(place)
        } else {
            None
        };
        let deadline = Instant::now()
            .checked_add(self.store.region.replica_floor_wait)
            .unwrap_or_else(Instant::now);
        match until_reached(deadline, || self.replica_now(p, &ask)).await {
            Reached::Answer(state) => Some(state),
            Reached::Forward => None,
            Reached::TooLate => {
                self.metrics.floor_forwards.fetch_add(1, Relaxed);
                None
            }
        }
    }

    /// Whether the replica of `p` answers `ask` as it is now.
    fn replica_now(&self, p: u32, ask: &Ask<'_>) -> Local {
        let (state, caught_up, applied) = {
            let replicas = self.replicas[p as usize].lock();
            let Some(replica) = replicas.as_ref() else {
                return Local::Forward;
            };
            // Subscribed before the look: a round that lands after it wakes
            // the wait.
            let applied = replica.applied.subscribe();
            let Some(state) = replica.state.read().clone() else {
                return Local::Forward;
            };
            let caught_up = *replica.caught_up.lock();
            (state, caught_up, applied)
        };
        // A replica that has not caught up for a while (the bucket does not
        // answer it) answers nothing: the owner does.
        if !fresh(caught_up, Instant::now()) {
            return Local::Forward;
        }
        let view = state.store.get(ask.stream());
        if !ask.floor_reached(view.as_deref()) {
            // A stream a replica never answers is the owner's at once.
            return match view {
                Some(v) if !ask.may_reach(&v) => Local::Forward,
                _ => Local::Below(applied),
            };
        }
        let Some(view) = view else {
            return Local::Forward;
        };
        if !ask.answerable(&view) {
            return Local::Forward;
        }
        // This origin forwarded a write of it: not before the replica has it.
        if let Some(wrote) = self.written.lock().last(ask.stream()) {
            if caught_up.is_none_or(|c| c <= wrote) {
                return Local::Forward;
            }
        }
        Local::Answer(state)
    }

    /// The store of this origin's replica of `p`, if it is open and
    /// fresh: what a `consistency=local` listing reads for a partition
    /// followed here (it lags the owner as local reads do; it does not
    /// know this origin's own forwarded writes not yet replicated).
    pub(super) fn fresh_replica(&self, p: u32) -> Option<Shared> {
        let replicas = self.replicas[p as usize].lock();
        let replica = replicas.as_ref()?;
        let state = replica.state.read().clone()?;
        let caught_up = *replica.caught_up.lock();
        fresh(caught_up, Instant::now()).then_some(state)
    }

    /// The store of this origin's replica of `p`, if one is open (fresh
    /// or not).
    pub(super) fn replica_state(&self, p: u32) -> Option<Shared> {
        self.replicas[p as usize]
            .lock()
            .as_ref()?
            .state
            .read()
            .clone()
    }

    /// When the replica of `p` last caught up, and a receiver told of its
    /// next round (subscribed first: a round that lands after the look
    /// is not missed); none without a replica.
    /// `hurry`: a round that can catch up is asked for now.
    pub(super) fn replica_progress(
        &self,
        p: u32,
        hurry: bool,
    ) -> Option<(Option<Instant>, watch::Receiver<u64>)> {
        let replicas = self.replicas[p as usize].lock();
        let replica = replicas.as_ref()?;
        let changed = replica.applied.subscribe();
        if hurry {
            replica.hurry.notify_one();
        }
        let caught_up = *replica.caught_up.lock();
        Some((caught_up, changed))
    }

    /// The stores of the replicas open now.
    pub(super) fn replica_states(&self) -> Vec<Shared> {
        self.replicas
            .iter()
            .filter_map(|r| r.lock().as_ref()?.state.read().clone())
            .collect()
    }

    /// Keeps a replica of `p` (if replicas are on and none is kept yet).
    pub(super) fn keep_replica(self: &Arc<Self>, p: u32) {
        if !self.store.region.replicas {
            return;
        }
        let mut slot = self.replicas[p as usize].lock();
        if slot.is_none() {
            *slot = Some(Replica::start(self, p));
        }
    }

    /// Stops the replica of `p`, if one is kept.
    pub(super) fn drop_replica(&self, p: u32) {
        let replica = self.replicas[p as usize].lock().take();
        drop(replica);
    }

    /// Remembers a write of `path` this origin forwarded, answered now.
    pub(super) fn forwarded_write(&self, path: &str) {
        self.written.lock().note(path, Instant::now());
    }

    /// The least fresh replica's lag, for `/metrics`.
    pub(super) fn replica_lag(&self) -> Duration {
        self.replicas
            .iter()
            .filter_map(|r| r.lock().as_ref().map(|r| r.lag().unwrap_or(Duration::MAX)))
            .max()
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests;
