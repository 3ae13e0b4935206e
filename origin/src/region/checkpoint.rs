//! Checkpoints of a partition in the bucket, and the WAL deleted below
//! them: the bucket holds data, not history, and a claim replays one image
//! and the WAL objects after it, not everything ever written.
//!
//! A checkpoint at `c` is an image of every stream (`store::image`) as the
//! epoch rule replays the WAL numbers below `c`, in parts (WAL-format
//! objects under `images/`), then a manifest at `checkpoints/{c}` made by
//! create once every part is in. So one idle stream with a few unsealed
//! bytes never pins the WAL: its bytes and state are copied into each
//! image. Only a serving owner builds, every `interval`, once the WAL past
//! the newest checkpoint holds `bytes` bytes and at least the newest
//! image's size (so the images written cost at most as much as the WAL
//! itself), or `objects` objects (which bounds what a claim reads one GET
//! at a time, whatever the bytes).
//!
//! A build ([`build`], the rules `fence` states and its model checks):
//! 1. from the newest checkpoint `b` (none: 0), read its image and the WAL
//!    objects from `b` up to the first number missing, and no further than
//!    this owner acknowledged (its own puts in flight may still land);
//! 2. lay them out as a log in a folder of its own and recover it, as a
//!    claim does; write the image's parts;
//! 3. look again: `b` must still be the newest checkpoint (else what it
//!    read may be a fence on a deleted number), and no epoch after the
//!    owner's may exist (else a newer owner may write where it would
//!    delete); else give up;
//! 4. create the manifest (another build's at the same number holds the
//!    same streams: numbers below it never change);
//! 5. delete the WAL objects, manifests and images below it.
//!
//! Why deletes cannot lose an acknowledged commit: a put that lands on a
//! deleted number is acknowledged only after a look that finds no newer
//! epoch (`object_wal`); a claim or a build that read a deleted number
//! (gone, or a fence on it) finds a newer checkpoint when it looks again and
//! starts over. The cost of a build: GETs of what it replays (12 times
//! cheaper than puts), the parts' PUTs, free DELETEs; disk for the replay
//! and memory for the recovered streams, like a claim.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use object_store::ObjectStore;

use super::bucket::{
    create_or_read, delete_all, list_numbers, newer_epoch, newest_checkpoint,
    newest_checkpoint_number, read_image, read_wal,
};
use super::fence::EpochRule;
use super::format::{self, CheckpointManifest, Kind, PutId, WalHeader};
use super::local::LocalLog;
use super::object_wal::Replay;
use super::WalError;
use crate::core::Millis;
use crate::metrics::RegionMetrics;
use crate::objects::keys;
use crate::store::image;

/// When and how a serving owner builds checkpoints (`--region-checkpoint-*`).
#[derive(Clone, Debug)]
pub struct CheckpointConfig {
    /// Build once this many WAL objects are past the newest checkpoint...
    pub objects: u64,
    /// ...or this many bytes of them (and, either way, at least as many
    /// bytes as the newest image, or `objects` of them).
    pub bytes: u64,
    /// How often the owner looks.
    pub interval: Duration,
    /// An image part holds about this much.
    pub part_bytes: usize,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            objects: 4096,
            bytes: 64 << 20,
            interval: Duration::from_secs(10),
            part_bytes: 8 << 20,
        }
    }
}

/// Whether the WAL past the newest checkpoint (`objects`, `bytes`) is due
/// for a new one, whose last image was `image_bytes`.
pub fn due(config: &CheckpointConfig, objects: u64, bytes: u64, image_bytes: u64) -> bool {
    objects > 0
        && (objects >= config.objects || bytes >= config.bytes)
        && (bytes >= image_bytes || objects >= config.objects)
}

/// What a build did.
#[derive(Debug, PartialEq, Eq)]
pub enum Built {
    /// The WAL is not due yet.
    NotYet,
    /// Published (or found published by another build) at `number`.
    Published {
        number: u64,
        streams: u64,
        bytes: u64,
        parts: u32,
        deleted: u64,
    },
    /// A look said the partition moved on (see the module docs): nothing
    /// published; the next build starts afresh.
    GaveUp(&'static str),
}

/// Where a build starts: the partition's WAL as listed.
struct Listing {
    base: Option<CheckpointManifest>,
    /// The first number missing from the base on, capped.
    upto: u64,
    objects: u64,
    bytes: u64,
    /// Every WAL number listed below `upto` (stragglers below the base too).
    below: Vec<u64>,
}

/// A build to run: partition `partition` for its owner at `epoch`, which
/// acknowledged every number below `acknowledged`, in the folder `scratch`
/// (removed after).
pub struct BuildJob {
    pub store: Arc<dyn ObjectStore>,
    pub partition: u32,
    pub epoch: u64,
    pub acknowledged: u64,
    pub scratch: PathBuf,
    /// The clock's time, for the replay's recovery.
    pub now: Millis,
    pub config: CheckpointConfig,
    pub metrics: Arc<RegionMetrics>,
    /// Set to make the build give up where it waits for the bucket (the
    /// origin stops).
    pub stopping: Arc<AtomicBool>,
}

/// Builds a checkpoint (the steps in the module docs). Blocks: run it on a
/// blocking thread.
pub fn build(job: &BuildJob) -> Result<Built, WalError> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(WalError::Local)?;
    let outcome = build_in(&rt, job);
    remove_scratch(&job.scratch);
    outcome
}

fn build_in(rt: &tokio::runtime::Runtime, job: &BuildJob) -> Result<Built, WalError> {
    let (store, p, epoch) = (&*job.store, job.partition, job.epoch);
    let (config, metrics) = (&job.config, &*job.metrics);
    let listing = rt.block_on(list(store, p, job.acknowledged))?;
    let image_bytes = listing.base.as_ref().map_or(0, |b| b.bytes);
    if !due(config, listing.objects, listing.bytes, image_bytes) {
        return Ok(Built::NotYet);
    }
    // 1, 2: the replay, laid out and recovered.
    let Some(rule) = replay(rt, job, &listing)? else {
        return Ok(Built::GaveUp("a newer checkpoint deleted what it read"));
    };
    let put_id: PutId = rand::random();
    let stopping = &*job.stopping;
    let (stats, parts) = put_image(rt, job, &listing, put_id)?;
    // 3: the looks.
    let looked = rt.block_on(async {
        if newest_checkpoint_number(store, p).await? != listing.base.as_ref().map(|b| b.number) {
            return Ok(Some("a newer checkpoint came meanwhile"));
        }
        if newer_epoch(store, p, epoch, stopping).await? {
            return Ok(Some("a newer owner claimed the partition"));
        }
        Ok::<_, WalError>(None)
    })?;
    if let Some(why) = looked {
        rt.block_on(delete_all(
            store,
            images_of(p, listing.upto, &put_id, parts),
        ));
        return Ok(Built::GaveUp(why));
    }
    // 4: the manifest.
    let manifest = CheckpointManifest {
        number: listing.upto,
        epoch: rule.highest(),
        put_id,
        parts,
        streams: stats.streams,
        bytes: stats.bytes,
    };
    let key = keys::partition_checkpoint(p, manifest.number);
    let ours = |bytes| {
        format::decode_checkpoint(&bytes)
            .map(|found| found.put_id == put_id)
            .map_err(|source| WalError::Corrupt {
                key: key.to_string(),
                source,
            })
    };
    let body = format::encode_checkpoint(&manifest);
    let published = rt.block_on(create_or_read(store, &key, body, stopping, None, ours))?;
    if !published {
        // Another build's, of the same numbers: ours goes.
        rt.block_on(delete_all(
            store,
            images_of(p, listing.upto, &put_id, parts),
        ));
    }
    metrics.checkpoints.fetch_add(1, Relaxed);
    metrics
        .checkpoint_number
        .store(manifest.number as i64, Relaxed);
    metrics
        .checkpoint_bytes
        .store(manifest.bytes as i64, Relaxed);
    // 5: what is below it.
    let deleted = rt.block_on(collect(store, p, &listing.below, manifest.number))?;
    metrics.checkpoint_deleted.fetch_add(deleted, Relaxed);
    Ok(Built::Published {
        number: manifest.number,
        streams: stats.streams,
        bytes: stats.bytes,
        parts,
        deleted,
    })
}

/// Lays out the partition's history up to `listing.upto` in the job's
/// scratch folder as a local log: the epoch rule it ended with, or None
/// when a newer checkpoint deleted what it read.
fn replay(
    rt: &tokio::runtime::Runtime,
    job: &BuildJob,
    listing: &Listing,
) -> Result<Option<EpochRule>, WalError> {
    let (store, p) = (&*job.store, job.partition);
    let start = listing.base.as_ref().map_or(0, |b| b.number);
    let mut log = LocalLog::begin(&job.scratch).map_err(WalError::Local)?;
    let mut rule = EpochRule::after(listing.base.as_ref().map_or(0, |b| b.epoch));
    let read = {
        let mut push = |r: Replay| match r {
            Replay::Begin => Ok(()),
            Replay::Frames(frames) => log.push(&frames),
        };
        rt.block_on(async {
            if let Some(b) = &listing.base {
                read_image(store, p, b, &mut push).await?;
            }
            read_wal(store, p, start..listing.upto, &mut rule, &mut push).await
        })
    };
    match read {
        Ok(_) => {}
        Err(WalError::Moved) => return Ok(None),
        Err(e) => return Err(e),
    }
    log.finish().map_err(WalError::Local)?;
    Ok(Some(rule))
}

/// Exports the laid-out state as image parts, each put by create under
/// `put_id`: the export's figures and the parts put.
fn put_image(
    rt: &tokio::runtime::Runtime,
    job: &BuildJob,
    listing: &Listing,
    put_id: PutId,
) -> Result<(image::ImageStats, u32), WalError> {
    let (store, p) = (&*job.store, job.partition);
    let header = WalHeader {
        kind: Kind::Data,
        epoch: job.epoch,
        put_id,
    };
    let mut parts = 0u32;
    let stats = image::export(&job.scratch, job.now, job.config.part_bytes, &mut |part| {
        let key = keys::partition_image_part(p, listing.upto, &put_id, parts);
        let body = format::encode_wal(&header, &part);
        let ours = |bytes| {
            format::decode_wal(&bytes)
                .map(|found| found.header.put_id == put_id)
                .map_err(|source| WalError::Corrupt {
                    key: key.to_string(),
                    source,
                })
        };
        rt.block_on(create_or_read(store, &key, body, &job.stopping, None, ours))
            .map_err(std::io::Error::other)?;
        parts += 1;
        Ok(())
    })
    .map_err(WalError::Local)?;
    Ok((stats, parts))
}

/// The newest checkpoint and the WAL from it: up to the first number
/// missing, at most `acknowledged`.
async fn list(store: &dyn ObjectStore, p: u32, acknowledged: u64) -> Result<Listing, WalError> {
    let base = newest_checkpoint(store, p).await?;
    let start = base.as_ref().map_or(0, |b| b.number);
    let mut sizes = std::collections::BTreeMap::new();
    let mut listing = store.list(Some(&keys::partition_wal(p)));
    while let Some(meta) = listing.next().await {
        let meta = meta?;
        if let Some(n) = keys::numbered(&meta.location) {
            sizes.insert(n, meta.size);
        }
    }
    let mut upto = start;
    let mut bytes = 0;
    while upto < acknowledged {
        match sizes.get(&upto) {
            Some(size) => bytes += size,
            None => break,
        }
        upto += 1;
    }
    Ok(Listing {
        objects: upto - start,
        below: sizes.range(..upto).map(|(n, _)| *n).collect(),
        base,
        upto,
        bytes,
    })
}

/// Deletes what the checkpoint at `number` replaces: the WAL numbers
/// listed below it, older manifests and every image but its own. Returns
/// how many objects went. A delete that fails is left for the next build.
async fn collect(
    store: &dyn ObjectStore,
    p: u32,
    wal: &[u64],
    number: u64,
) -> Result<u64, WalError> {
    let mut doomed: Vec<object_store::path::Path> = wal
        .iter()
        .map(|&n| keys::partition_wal_object(p, n))
        .collect();
    for n in list_numbers(store, &keys::partition_checkpoints(p)).await? {
        if n < number {
            doomed.push(keys::partition_checkpoint(p, n));
        }
    }
    let keep = newest_checkpoint(store, p).await?;
    let mut images = store.list(Some(&keys::partition_images(p)));
    while let Some(meta) = images.next().await {
        let key = meta?.location;
        let kept = keep.as_ref().is_some_and(|k| {
            let own = keys::partition_image_part(p, k.number, &k.put_id, 0);
            let prefix = own.as_ref().rsplit_once('/').map_or("", |(d, _)| d);
            key.as_ref().starts_with(prefix)
        });
        if keys::image_number(&key).is_some_and(|n| n <= number) && !kept {
            doomed.push(key);
        }
    }
    Ok(delete_all(store, doomed).await)
}

/// The keys of a build's image parts.
fn images_of(p: u32, number: u64, put_id: &PutId, parts: u32) -> Vec<object_store::path::Path> {
    (0..parts)
        .map(|k| keys::partition_image_part(p, number, put_id, k))
        .collect()
}

/// Removes a build's folder (gone already is fine; a failure is logged).
pub fn remove_scratch(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            tracing::warn!(folder = %dir.display(), error = %e, "could not remove a checkpoint's folder");
        }
    }
}

/// A build's folder under the origin's data directory.
pub fn scratch_dir(data: &Path, n: u64) -> PathBuf {
    data.join("region").join(format!("checkpoint-{n}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_build_is_due_by_objects_or_bytes_and_never_before_the_last_image_size() {
        let c = CheckpointConfig {
            objects: 100,
            bytes: 1000,
            ..CheckpointConfig::default()
        };
        assert!(!due(&c, 0, 0, 0));
        assert!(!due(&c, 99, 999, 0));
        assert!(due(&c, 100, 10, 0));
        assert!(due(&c, 1, 1000, 0));
        // A large image is rewritten only after as much WAL, or when the
        // objects alone (a claim's reads) say so.
        assert!(!due(&c, 5, 1000, 5000));
        assert!(due(&c, 5, 5000, 5000));
        assert!(due(&c, 100, 10, 5000));
    }
}
