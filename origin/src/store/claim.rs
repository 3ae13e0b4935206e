//! Where a partition is claimed, with object durability: the store's
//! partition made this origin's, its history replayed from the bucket and
//! laid out as the local log before recovery reads it. With a WAL per
//! partition (`region::object_wal`) the claim takes a new epoch; with one
//! WAL per origin (`region::origin_wal`, decision 0028) it makes the
//! partition's next tenure in this origin's log.

use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use super::StoreConfig;
use crate::metrics::Metrics;
use crate::region::commit_log::{CommitLog, PartitionLog};
use crate::region::local::LocalLog;
use crate::region::vouch::Vouch;
use crate::region::{ObjectWal, Replay};

/// A claim that has not finished by then (object storage unreachable)
/// fails the store's start.
const CLAIM_TIMEOUT: Duration = Duration::from_secs(60);

/// What a claim hands the store.
pub(super) struct Claim {
    /// Where the writer puts its commits.
    pub log: Box<dyn CommitLog>,
    /// The epoch claimed (with one WAL per origin, its tenure plus one).
    pub epoch: u64,
    /// With a WAL per partition: every number below it is acknowledged.
    pub acknowledged: Option<Arc<AtomicU64>>,
    pub vouch: Arc<Vouch>,
    /// Set to make waits on the bucket give up (the store stops).
    pub stopper: Arc<AtomicBool>,
}

/// Claims the store's partition and lays the replay out as the local log.
pub(super) fn claim_partition(
    config: &StoreConfig,
    metrics: Arc<Metrics>,
) -> std::io::Result<Claim> {
    let mut local = None;
    let mut lay_out = |replay: Replay| match replay {
        // (Again) from the start: what was laid out goes.
        Replay::Begin => {
            local = Some(LocalLog::begin(&config.data)?);
            Ok(())
        }
        Replay::Frames(frames) => local.as_mut().expect("a replay begins first").push(&frames),
    };
    let (claim, replayed) = match &config.region.origin_wal {
        Some(shared) => in_origin_log(config, &shared.0, metrics, &mut lay_out)?,
        None => in_partition_wal(config, metrics, &mut lay_out)?,
    };
    let bytes = match local {
        Some(log) => log.finish()?,
        None => LocalLog::begin(&config.data)?.finish()?,
    };
    tracing::info!(
        bytes,
        objects = replayed,
        "rebuilt the local log from object storage"
    );
    Ok(claim)
}

type LayOut<'a> = dyn FnMut(Replay) -> std::io::Result<()> + Send + 'a;

/// A new epoch of the partition's own WAL (with its own client).
fn in_partition_wal(
    config: &StoreConfig,
    metrics: Arc<Metrics>,
    lay_out: &mut LayOut<'_>,
) -> std::io::Result<(Claim, usize)> {
    let Some(url) = &config.object_store else {
        return Err(std::io::Error::other(
            "object durability needs object storage (--object-store)",
        ));
    };
    let settings: Vec<(&str, &str)> = config
        .object_store_settings
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let store = crate::objects::open_with(url, &settings).map_err(std::io::Error::other)?;
    let store = crate::objects::faults::Faults::delaying_puts(store, config.object_put_delay);
    let claimed = ObjectWal::claim_into(store, &config.region, metrics, lay_out)
        .map_err(std::io::Error::other)?;
    let wal = claimed.wal;
    let claim = Claim {
        epoch: wal.epoch(),
        acknowledged: Some(wal.acknowledged()),
        vouch: wal.vouch(),
        stopper: wal.stopper(),
        log: Box::new(wal),
    };
    Ok((claim, claimed.replayed))
}

/// The partition's next tenure in this origin's log. Runs the claim on a
/// thread of its own, driven by the origin's runtime (where the log's
/// writer runs): the caller may be inside that runtime.
fn in_origin_log(
    config: &StoreConfig,
    wal: &Arc<crate::region::origin_wal::OriginWal>,
    metrics: Arc<Metrics>,
    lay_out: &mut LayOut<'_>,
) -> std::io::Result<(Claim, usize)> {
    let p = config.region.partition;
    let runtime = tokio::runtime::Handle::current();
    let claimed = std::thread::scope(|s| {
        s.spawn(|| {
            runtime.block_on(async {
                tokio::time::timeout(CLAIM_TIMEOUT, wal.claim(p, lay_out)).await
            })
        })
        .join()
        .expect("the claim does not panic")
    })
    .map_err(|_| {
        std::io::Error::other(format!("the claim did not finish within {CLAIM_TIMEOUT:?}"))
    })?
    .map_err(std::io::Error::other)?;
    let stopper = Arc::new(AtomicBool::new(false));
    let log = PartitionLog::new(
        Arc::clone(wal),
        p,
        claimed.tenure,
        runtime,
        Arc::clone(&stopper),
        metrics,
    );
    tracing::info!(
        partition = p,
        tenure = claimed.tenure,
        from = claimed.from,
        checkpoint = ?claimed.history.base,
        fences = claimed.history.fences,
        "claimed the partition in this origin's log"
    );
    let claim = Claim {
        // Tenure k is the region's epoch k + 1 (`region::membership`):
        // epoch 0 is no owner.
        epoch: claimed.tenure + 1,
        acknowledged: None,
        vouch: log.vouch(),
        stopper,
        log: Box::new(log),
    };
    Ok((claim, claimed.history.replayed))
}
