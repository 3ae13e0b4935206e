//! Partition checkpoints in one WAL per origin, and an origin's log
//! deleted below them (decision 0028; the rules and the deletion bound are
//! `tenure`'s, model-checked there): the bucket holds data, not history,
//! and a claim reads one image and the log objects after it.
//!
//! A partition's owner builds a checkpoint standing at its own tenure and
//! a number of its log below which it acknowledged every put ([`build`]):
//! 1. from the partition's newest checkpoint (the highest stand), read its
//!    image and the tenures after it up to the stand, handing the frames
//!    to an [`Imager`] (the store lays them out and exports its state; a
//!    test keeps the frames);
//! 2. put the image's parts, each by create under a fresh put id;
//! 3. look again: the newest checkpoint must still be the one it read
//!    from (else what it read may have been deleted under it), or it
//!    gives up;
//! 4. create the manifest at the stand's key (another build's at the same
//!    stand holds the same frames: the objects below it never change);
//! 5. delete the older checkpoints of the partition and their images.
//!
//! A log's writer deletes its objects below [`tenure::deletion_bound`]
//! ([`collect_log`]): below what it acknowledged and below where, for each
//! tenure in the log, a reader may still start. A reader that started
//! from an older checkpoint and meets a deleted number (or a deleted
//! image part) reads again ([`WalError::Moved`]); a claim looks at the
//! newest checkpoint again before it makes its tenure (rule 5).

use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::ObjectStore;

use super::format::{decode_stand, encode_stand, LogId, StandManifest};
use super::read::{read_tenures, successor_end, walk, AtOpen, End, History, Reading};
use crate::objects::keys;
use crate::region::bucket::{
    again, create_or_read, delete_all, get_if_there, list_numbers, read_object,
};
use crate::region::format::{self as wal_format, Kind, PutId, WalHeader};
use crate::region::object_wal::{Replay, WalError, CLAIM_TRIES, REPLAY_READS};
use crate::region::tenure::{deletion_bound, InLog, Stand};

/// What turns a partition's history into an image: it takes the history's
/// frames in order, then gives the image's parts, each a run of frames
/// that, replayed in order, rebuild the same state.
pub trait Imager: Send {
    /// The next of the history ([`Replay::Begin`]: from the start again).
    fn take(&mut self, replay: Replay) -> std::io::Result<()>;
    /// The image's next part, once the history is taken; None after the
    /// last.
    fn next_part(&mut self) -> std::io::Result<Option<Bytes>>;
}

/// A build: partition `partition`, whose tenure `tenure` is this origin's,
/// which acknowledged every number of its log below `acknowledged`.
pub struct BuildJob<'a> {
    pub store: &'a dyn ObjectStore,
    pub partition: u32,
    pub tenure: u64,
    pub acknowledged: u64,
    /// Build only once this many numbers of the tenure lie past the newest
    /// checkpoint (what a claim would read one GET at a time).
    pub min_objects: u64,
    pub stopping: &'a AtomicBool,
}

/// What a build did.
#[derive(Debug, PartialEq, Eq)]
pub enum Built {
    /// Not due: too little past the newest checkpoint.
    NotYet,
    /// Published at `stand` (or found published there by another build),
    /// older checkpoints and images deleted (`deleted` objects).
    Published {
        stand: Stand,
        parts: u32,
        bytes: u64,
        deleted: u64,
    },
    /// The newest checkpoint moved under the build: nothing published.
    GaveUp(&'static str),
}

/// Builds a checkpoint of `job.partition` (the steps in the module docs).
pub async fn build(job: &BuildJob<'_>, imager: &mut dyn Imager) -> Result<Built, WalError> {
    let (store, p, stopping) = (job.store, job.partition, job.stopping);
    let base = newest_stand(store, p, stopping).await?;
    let tenures = read_tenures(store, p, stopping).await?;
    let ours = tenures
        .get(job.tenure as usize)
        .ok_or(WalError::NotServing { partition: p })?;
    let stand = Stand {
        tenure: job.tenure,
        number: job.acknowledged.max(ours.from),
    };
    let since = match &base {
        Some(b) if b.stand >= stand => return Ok(Built::NotYet),
        Some(b) if b.stand.tenure == job.tenure => b.stand.number.max(ours.from),
        _ => ours.from,
    };
    // A first checkpoint of a new tenure is due at once: until one stands
    // in it, the logs of the tenures before it cannot be deleted, and
    // every claim reads them.
    let older = base
        .as_ref()
        .map_or(job.tenure > 0, |b| b.stand.tenure < job.tenure);
    if !older && stand.number.saturating_sub(since) < job.min_objects.max(1) {
        return Ok(Built::NotYet);
    }
    // 1: the history up to the stand.
    match replay_to(job, base.as_ref(), &tenures, stand, imager).await {
        Err(WalError::Moved) => {
            return Ok(Built::GaveUp("a newer checkpoint deleted what it read"))
        }
        Err(e) => return Err(e),
        Ok(()) => {}
    }
    // 2: the parts.
    let put_id: PutId = rand::random();
    let (parts, bytes) = put_parts(job, stand, put_id, imager).await?;
    // 3: the look.
    let now = newest_stand(store, p, stopping).await?.map(|m| m.stand);
    if now != base.as_ref().map(|b| b.stand) {
        delete_all(store, image_keys(p, stand, &put_id, parts)).await;
        return Ok(Built::GaveUp("a newer checkpoint came meanwhile"));
    }
    // 4: the manifest.
    let manifest = StandManifest {
        stand,
        put_id,
        parts,
        bytes,
    };
    let key = keys::partition_stand(p, stand.tenure, stand.number);
    let published = create_or_read(store, &key, encode_stand(&manifest), stopping, None, |b| {
        decode_stand(&b)
            .map(|found| found.put_id == put_id)
            .map_err(|source| WalError::Corrupt {
                key: key.to_string(),
                source,
            })
    })
    .await?;
    if !published {
        // Another build's, of the same frames: ours goes.
        delete_all(store, image_keys(p, stand, &put_id, parts)).await;
    }
    // 5: what is below it.
    let deleted = collect_checkpoints(store, p, stand, stopping).await?;
    Ok(Built::Published {
        stand,
        parts,
        bytes,
        deleted,
    })
}

/// Hands the partition's history up to `stand` to `imager`: the base's
/// image, the closed tenures after it, and this origin's own up to what it
/// acknowledged (every number there is its own landed put).
async fn replay_to(
    job: &BuildJob<'_>,
    base: Option<&StandManifest>,
    tenures: &[super::format::TenureRecord],
    stand: Stand,
    imager: &mut dyn Imager,
) -> Result<(), WalError> {
    let (store, p) = (job.store, job.partition);
    let mut take = |r: Replay| imager.take(r);
    take(Replay::Begin).map_err(WalError::Local)?;
    if let Some(b) = base {
        read_stand_image(store, p, b, &mut take).await?;
    }
    let mut history = History::default();
    let first = base.map_or(0, |b| b.stand.tenure);
    for k in first..=stand.tenure {
        let tenure = &tenures[k as usize];
        let below = if k == stand.tenure {
            Some(stand.number)
        } else {
            successor_end(p, tenures, k as usize)?
        };
        let start = match base {
            Some(b) if b.stand.tenure == k => b.stand.number,
            _ => tenure.from,
        };
        let reading = Reading {
            start,
            below,
            at_open: AtOpen::Stop,
            most: u64::MAX,
            shared: None,
        };
        let end = walk(
            store,
            p,
            tenure,
            reading,
            job.stopping,
            &mut take,
            &mut history,
        )
        .await?;
        if k == stand.tenure && end != End::Ended(stand.number) {
            // Its own tenure ended before what it acknowledged: never, as
            // every number below that is its own landed put.
            return Err(WalError::Moved);
        }
    }
    Ok(())
}

/// Puts the image's parts as the imager gives them: how many, and their
/// bytes.
async fn put_parts(
    job: &BuildJob<'_>,
    stand: Stand,
    put_id: PutId,
    imager: &mut dyn Imager,
) -> Result<(u32, u64), WalError> {
    let header = WalHeader {
        kind: Kind::Data,
        epoch: 0,
        put_id,
    };
    let (mut parts, mut bytes) = (0u32, 0u64);
    while let Some(part) = imager.next_part().map_err(WalError::Local)? {
        let key =
            keys::partition_stand_image(job.partition, stand.tenure, stand.number, &put_id, parts);
        let body = wal_format::encode_wal(&header, &part);
        bytes = bytes.saturating_add(body.len() as u64);
        create_or_read(job.store, &key, body, job.stopping, None, |found| {
            wal_format::decode_wal(&found)
                .map(|o| o.header.put_id == put_id)
                .map_err(|source| WalError::Corrupt {
                    key: key.to_string(),
                    source,
                })
        })
        .await?;
        parts += 1;
    }
    Ok((parts, bytes))
}

/// The newest checkpoint of `p` (the highest stand), if any. One deleted
/// between the listing and its read was replaced by a newer one: look
/// again.
pub async fn newest_stand(
    store: &dyn ObjectStore,
    p: u32,
    stopping: &AtomicBool,
) -> Result<Option<StandManifest>, WalError> {
    for _ in 0..CLAIM_TRIES {
        let Some(newest) = stands(store, p, stopping).await?.pop() else {
            return Ok(None);
        };
        let key = keys::partition_stand(p, newest.tenure, newest.number);
        if let Some(bytes) = get_if_there(store, &key, stopping).await? {
            return decode_stand(&bytes)
                .map(Some)
                .map_err(|source| WalError::Corrupt {
                    key: key.to_string(),
                    source,
                });
        }
    }
    Err(WalError::Moved)
}

/// The stands of `p`'s checkpoints, lowest first.
async fn stands(
    store: &dyn ObjectStore,
    p: u32,
    stopping: &AtomicBool,
) -> Result<Vec<Stand>, WalError> {
    let prefix = keys::partition_stands(p);
    let mut found: Vec<Stand> = again(stopping, || async {
        let mut out = Vec::new();
        let mut listing = store.list(Some(&prefix));
        while let Some(meta) = listing.next().await {
            if let Some((tenure, number)) = keys::stand_of(&meta?.location) {
                out.push(Stand { tenure, number });
            }
        }
        Ok(out)
    })
    .await?;
    found.sort_unstable();
    Ok(found)
}

/// Hands on the parts of `base`'s image in order. A part gone means a
/// newer checkpoint replaced it ([`WalError::Moved`]).
pub(super) async fn read_stand_image(
    store: &dyn ObjectStore,
    p: u32,
    base: &StandManifest,
    replay: &mut (dyn FnMut(Replay) -> std::io::Result<()> + Send),
) -> Result<(), WalError> {
    let (tenure, number) = (base.stand.tenure, base.stand.number);
    let reads = futures::stream::iter(0..base.parts)
        .map(|k| {
            let key = keys::partition_stand_image(p, tenure, number, &base.put_id, k);
            async move { read_object(store, &key).await }
        })
        .buffered(REPLAY_READS);
    futures::pin_mut!(reads);
    while let Some(object) = reads.next().await {
        replay(Replay::Frames(object?.frames)).map_err(WalError::Local)?;
    }
    Ok(())
}

/// Deletes `p`'s checkpoints below `newest` and every image but the
/// newest's; returns how many objects went.
async fn collect_checkpoints(
    store: &dyn ObjectStore,
    p: u32,
    newest: Stand,
    stopping: &AtomicBool,
) -> Result<u64, WalError> {
    let mut doomed: Vec<Path> = stands(store, p, stopping)
        .await?
        .into_iter()
        .filter(|s| *s < newest)
        .map(|s| keys::partition_stand(p, s.tenure, s.number))
        .collect();
    let mut images = store.list(Some(&keys::partition_stand_images(p)));
    while let Some(meta) = images.next().await {
        let key = meta?.location;
        if keys::stand_of(&key).is_some_and(|(t, n)| {
            Stand {
                tenure: t,
                number: n,
            } < newest
        }) {
            doomed.push(key);
        }
    }
    Ok(delete_all(store, doomed).await)
}

/// The tenures one log holds: (partition, tenure, its first number).
pub type TenuresInLog = [(u32, u64, u64)];

/// Deletes `log`'s objects below [`deletion_bound`]: `acknowledged` and,
/// for each of its `tenures`, where a reader of that partition may still
/// start. Returns the bound and how many objects went.
pub async fn collect_log(
    store: &dyn ObjectStore,
    log: &LogId,
    tenures: &TenuresInLog,
    acknowledged: u64,
    stopping: &AtomicBool,
) -> Result<(u64, u64), WalError> {
    let mut in_log = Vec::with_capacity(tenures.len());
    for &(p, tenure, from) in tenures {
        let newest = newest_stand(store, p, stopping).await?.map(|m| m.stand);
        in_log.push(InLog {
            tenure,
            from,
            newest,
        });
    }
    let bound = deletion_bound(acknowledged, in_log);
    let doomed: Vec<Path> = list_numbers(store, &keys::log(log))
        .await?
        .into_iter()
        .take_while(|&n| n < bound)
        .map(|n| keys::log_object(log, n))
        .collect();
    Ok((bound, delete_all(store, doomed).await))
}

fn image_keys(p: u32, stand: Stand, put_id: &PutId, parts: u32) -> Vec<Path> {
    (0..parts)
        .map(|k| keys::partition_stand_image(p, stand.tenure, stand.number, put_id, k))
        .collect()
}
