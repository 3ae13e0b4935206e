//! Deleting other origins' logs below what no reader needs: the logs of
//! origins that died or were fenced, which no writer is left to collect
//! (decision 0028, "Deleting a dead log"). The rule is `tenure`'s rule 6,
//! checked by the model (`tenure/tests.rs`, the collector).
//!
//! A collector cannot tell a dead writer from a slow one, so it only ever
//! deletes what the writer's own collection could: it lists the log
//! first, then looks at every tenure at or after each partition's newest
//! checkpoint, and deletes the writer's objects below
//! `tenure::deletion_bound` of what it listed and those tenures. A put the
//! writer still has in flight lies above what was listed, or its tenure
//! was made before the listing and is seen. Fences are never deleted: a
//! writer's put delayed past its fence would otherwise land where the
//! fence was, and be acknowledged. A fence is one small object per
//! takeover.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

use futures::StreamExt;
use object_store::path::Path;
use object_store::ObjectStore;

use super::checkpoint::newest_stand;
use super::format::{decode_tenure, encode_log, LogId, LogObject};
use crate::objects::keys;
use crate::region::bucket::{again, delete_all, get_if_there, list_numbers};
use crate::region::object_wal::{WalError, REPLAY_READS};
use crate::region::tenure::{deletion_bound, InLog, Stand};

/// What one round of collection did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CollectedDead {
    /// Other origins' logs listed.
    pub logs: u64,
    /// Their objects deleted.
    pub deleted: u64,
    /// Fences kept (all of them: see the module documentation).
    pub fences: u64,
}

/// One listed object of a log: its number and size.
struct Listed {
    number: u64,
    size: u64,
}

/// Deletes, in every log of the region but `own`, the writer's objects
/// that no reader of any of the `partitions` needs.
pub async fn collect_dead(
    store: &dyn ObjectStore,
    own: Option<&LogId>,
    partitions: u32,
    stopping: &AtomicBool,
) -> Result<CollectedDead, WalError> {
    // Listed first: what the writer puts after it is not deleted.
    let mut listed: BTreeMap<LogId, Vec<Listed>> = BTreeMap::new();
    for log in list_logs(store, stopping).await? {
        if Some(&log) == own {
            continue;
        }
        let objects = again(stopping, || list_objects(store, &log)).await?;
        listed.insert(log, objects);
    }
    // Then every tenure a reader may still start in.
    let mut in_logs: BTreeMap<LogId, Vec<InLog>> = BTreeMap::new();
    for p in 0..partitions {
        let newest = newest_stand(store, p, stopping).await?.map(|m| m.stand);
        for (tenure, log, from) in tenures_from(store, p, newest, stopping).await? {
            in_logs.entry(log).or_default().push(InLog {
                tenure,
                from,
                newest,
            });
        }
    }
    let fence_bytes = encode_log(&LogObject {
        fence: true,
        put_id: [0; 16],
        sections: Vec::new(),
    })
    .len() as u64;
    let mut done = CollectedDead::default();
    for (log, objects) in listed {
        done.logs += 1;
        let below = objects.last().map_or(0, |o| o.number + 1);
        let bound = deletion_bound(below, in_logs.remove(&log).unwrap_or_default());
        let mut doomed = Vec::new();
        for o in objects.iter().take_while(|o| o.number < bound) {
            // A writer's object holds at least one section; a fence none.
            if o.size <= fence_bytes {
                done.fences += 1;
            } else {
                doomed.push(keys::log_object(&log, o.number));
            }
        }
        done.deleted += delete_all(store, doomed).await;
    }
    Ok(done)
}

/// The logs in the bucket.
async fn list_logs(store: &dyn ObjectStore, stopping: &AtomicBool) -> Result<Vec<LogId>, WalError> {
    let listing = again(stopping, || async {
        Ok(store
            .list_with_delimiter(Some(&Path::from("region/logs")))
            .await?)
    })
    .await?;
    Ok(listing
        .common_prefixes
        .iter()
        .filter_map(|prefix| {
            let name = prefix.filename()?;
            hex::decode(name).ok()?.try_into().ok()
        })
        .collect())
}

async fn list_objects(store: &dyn ObjectStore, log: &LogId) -> Result<Vec<Listed>, WalError> {
    let mut objects = Vec::new();
    let mut listing = store.list(Some(&keys::log(log)));
    while let Some(meta) = listing.next().await {
        let meta = meta?;
        if let Some(number) = keys::numbered(&meta.location) {
            objects.push(Listed {
                number,
                size: meta.size,
            });
        }
    }
    objects.sort_unstable_by_key(|o| o.number);
    Ok(objects)
}

/// Partition `p`'s tenures at or after its newest checkpoint's (older ones
/// need nothing of any log): (tenure, log, first number).
async fn tenures_from(
    store: &dyn ObjectStore,
    p: u32,
    newest: Option<Stand>,
    stopping: &AtomicBool,
) -> Result<Vec<(u64, LogId, u64)>, WalError> {
    let first = newest.map_or(0, |s| s.tenure);
    let prefix = keys::partition_tenures(p);
    let numbers = again(stopping, || list_numbers(store, &prefix)).await?;
    let reads = futures::stream::iter(numbers.into_iter().filter(|&k| k >= first))
        .map(|k| async move {
            let key = keys::partition_tenure(p, k);
            let Some(bytes) = get_if_there(store, &key, stopping).await? else {
                return Ok(None);
            };
            let record = decode_tenure(&bytes).map_err(|source| WalError::Corrupt {
                key: key.to_string(),
                source,
            })?;
            Ok(Some((k, record.log, record.from)))
        })
        .buffered(REPLAY_READS);
    let read: Vec<Result<Option<_>, WalError>> = reads.collect().await;
    read.into_iter().filter_map(Result::transpose).collect()
}
