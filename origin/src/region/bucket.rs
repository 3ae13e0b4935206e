//! Reads and create-only writes of a partition's objects in the bucket,
//! shared by a claim (`object_wal`), a checkpoint build (`checkpoint`) and
//! the owner's word on its answers (`vouch`). Passing failures of the
//! bucket (a refused connection, a 5xx, a timeout) are tried again with
//! backoff until the operation settles or the store stops; a put whose
//! outcome is unknown is settled by reading it back, never guessed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode};

use super::fence::EpochRule;
use super::format;
use super::object_wal::{Replay, WalError, CLAIM_TRIES, REPLAY_READS, RETRY_MAX};
use crate::metrics::Metrics;
use crate::objects::keys;

/// Hands on the parts of `base`'s image in order; returns how many.
pub(crate) async fn read_image(
    store: &dyn ObjectStore,
    p: u32,
    base: &format::CheckpointManifest,
    replay: &mut (dyn FnMut(Replay) -> std::io::Result<()> + Send),
) -> Result<usize, WalError> {
    let reads = futures::stream::iter(0..base.parts)
        .map(|k| {
            let key = keys::partition_image_part(p, base.number, &base.put_id, k);
            async move { read_object(store, &key).await }
        })
        .buffered(REPLAY_READS);
    futures::pin_mut!(reads);
    let mut parts = 0;
    while let Some(object) = reads.next().await {
        replay(Replay::Frames(object?.frames)).map_err(WalError::Local)?;
        parts += 1;
    }
    Ok(parts)
}

/// Hands on the frames of every object in `numbers` that the epoch rule
/// replays; returns how many. A number not there means a newer checkpoint
/// deleted it ([`WalError::Moved`]).
pub(crate) async fn read_wal(
    store: &dyn ObjectStore,
    p: u32,
    numbers: std::ops::Range<u64>,
    rule: &mut EpochRule,
    replay: &mut (dyn FnMut(Replay) -> std::io::Result<()> + Send),
) -> Result<usize, WalError> {
    let reads = futures::stream::iter(numbers)
        .map(|n| {
            let key = keys::partition_wal_object(p, n);
            async move { read_object(store, &key).await }
        })
        .buffered(REPLAY_READS);
    futures::pin_mut!(reads);
    let mut replayed = 0;
    while let Some(object) = reads.next().await {
        let object = object?;
        if rule.replays(&object.header) {
            replay(Replay::Frames(object.frames)).map_err(WalError::Local)?;
            replayed += 1;
        }
    }
    Ok(replayed)
}

/// One WAL object (or image part); gone means [`WalError::Moved`].
pub(crate) async fn read_object(
    store: &dyn ObjectStore,
    key: &Path,
) -> Result<format::WalObject, WalError> {
    let bytes = match store.get(key).await {
        Ok(found) => found.bytes().await?,
        Err(object_store::Error::NotFound { .. }) => return Err(WalError::Moved),
        Err(e) => return Err(e.into()),
    };
    format::decode_wal(&bytes).map_err(|source| WalError::Corrupt {
        key: key.to_string(),
        source,
    })
}

/// The number of the newest checkpoint of `p`, if any.
pub(crate) async fn newest_checkpoint_number(
    store: &dyn ObjectStore,
    p: u32,
) -> Result<Option<u64>, WalError> {
    Ok(list_numbers(store, &keys::partition_checkpoints(p))
        .await?
        .last()
        .copied())
}

/// The newest checkpoint of `p`, if any (one deleted between the listing
/// and the read was replaced by a newer one: look again).
pub(crate) async fn newest_checkpoint(
    store: &dyn ObjectStore,
    p: u32,
) -> Result<Option<format::CheckpointManifest>, WalError> {
    for _ in 0..CLAIM_TRIES {
        let Some(n) = newest_checkpoint_number(store, p).await? else {
            return Ok(None);
        };
        let key = keys::partition_checkpoint(p, n);
        match store.get(&key).await {
            Ok(found) => {
                let bytes = found.bytes().await?;
                return format::decode_checkpoint(&bytes)
                    .map(Some)
                    .map_err(|source| WalError::Corrupt {
                        key: key.to_string(),
                        source,
                    });
            }
            Err(object_store::Error::NotFound { .. }) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(WalError::Moved)
}

/// `op` until it succeeds or fails for a reason other than the bucket
/// (passing failures, a refused connection or a 5xx, are tried again with
/// backoff, as puts are), or `stopping` is set.
pub(crate) async fn again<T, F, Fut>(stopping: &AtomicBool, mut op: F) -> Result<T, WalError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, WalError>>,
{
    let mut wait = Duration::from_millis(10);
    loop {
        if stopping.load(Ordering::Acquire) {
            return Err(WalError::Stopped);
        }
        match op().await {
            Err(WalError::Store(e)) => {
                tracing::warn!(error = %e, "a read of the bucket failed; trying again");
            }
            other => return other,
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RETRY_MAX);
    }
}

/// Whether an epoch after `epoch` was claimed. Epochs are taken in order,
/// each one more than the highest listed, so the next one's key answers for
/// every later one. Passing failures are tried again.
pub(crate) async fn newer_epoch(
    store: &dyn ObjectStore,
    p: u32,
    epoch: u64,
    stopping: &AtomicBool,
) -> Result<bool, WalError> {
    exists(store, &keys::partition_epoch(p, epoch + 1), stopping).await
}

/// Whether `key` exists (one HEAD). Passing failures are tried again.
pub(crate) async fn exists(
    store: &dyn ObjectStore,
    key: &Path,
    stopping: &AtomicBool,
) -> Result<bool, WalError> {
    again(stopping, || async {
        match store.head(key).await {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(e.into()),
        }
    })
    .await
}

/// Creates `key` with `body`; when the key is taken (or the outcome of a
/// try is unknown and a later try finds it taken), reads it back and asks
/// `read_back` whether it is this put. Passing failures are tried again
/// until the put settles or `stopping` is set. Returns whether the put is
/// the object at `key` (created now, or found by `read_back`).
pub(crate) async fn create_or_read(
    store: &dyn ObjectStore,
    key: &Path,
    body: Bytes,
    stopping: &AtomicBool,
    metrics: Option<&Metrics>,
    mut read_back: impl FnMut(Bytes) -> Result<bool, WalError>,
) -> Result<bool, WalError> {
    let mut wait = Duration::from_millis(10);
    loop {
        if stopping.load(Ordering::Acquire) {
            return Err(WalError::Stopped);
        }
        let outcome = match store
            .put_opts(key, body.clone().into(), PutMode::Create.into())
            .await
        {
            Ok(_) => return Ok(true),
            // Taken (or, as object_store maps S3's 409, a conditional put
            // racing ours): whose is it?
            Err(object_store::Error::AlreadyExists { .. })
            | Err(object_store::Error::Precondition { .. }) => match store.get(key).await {
                Ok(found) => match found.bytes().await {
                    Ok(bytes) => return read_back(bytes),
                    Err(e) => e,
                },
                // A racing put that had not landed: try ours again.
                Err(e @ object_store::Error::NotFound { .. }) => e,
                Err(e) => e,
            },
            Err(e @ object_store::Error::NotImplemented { .. }) => return Err(e.into()),
            Err(e) => e,
        };
        tracing::warn!(key = %key, error = %outcome, "a WAL put did not settle; trying again");
        if let Some(m) = metrics {
            m.object_wal_retries.fetch_add(1, Ordering::Relaxed);
        }
        tokio::time::sleep(wait).await;
        wait = (wait * 2).min(RETRY_MAX);
    }
}

/// The numbers of the numbered keys under `prefix`, sorted.
pub(crate) async fn list_numbers(
    store: &dyn ObjectStore,
    prefix: &Path,
) -> Result<Vec<u64>, WalError> {
    let mut numbers = Vec::new();
    let mut listing = store.list(Some(prefix));
    while let Some(meta) = listing.next().await {
        if let Some(n) = keys::numbered(&meta?.location) {
            numbers.push(n);
        }
    }
    numbers.sort_unstable();
    Ok(numbers)
}

/// Deletes `keys`, some at once; returns how many went (gone already
/// counts). Failures are logged: the next checkpoint build or collection
/// lists them again.
pub(crate) async fn delete_all(store: &dyn ObjectStore, keys: Vec<Path>) -> u64 {
    let results = futures::stream::iter(keys)
        .map(|key| async move {
            match store.delete(&key).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => true,
                Err(e) => {
                    tracing::warn!(key = %key, error = %e, "could not delete below a checkpoint; the next build tries again");
                    false
                }
            }
        })
        .buffer_unordered(16)
        .collect::<Vec<bool>>()
        .await;
    results.into_iter().filter(|ok| *ok).count() as u64
}

/// The object at `key`, or None when nothing is there. Passing failures
/// are tried again.
pub(crate) async fn get_if_there(
    store: &dyn ObjectStore,
    key: &Path,
    stopping: &AtomicBool,
) -> Result<Option<Bytes>, WalError> {
    again(stopping, || async {
        match store.get(key).await {
            Ok(found) => Ok(Some(found.bytes().await?)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e.into()),
        }
    })
    .await
}
