//! Deleting other origins' logs below what no reader needs: the logs of
//! origins that died or were fenced, which no writer is left to collect
//! (decision 0028, "Deleting a dead log"). The rule is `tenure`'s rule 6,
//! checked by the model (`tenure/tests.rs`, the collector).
//!
//! A collector cannot tell a dead writer from a slow one, so it first
//! makes sure the writer acknowledges nothing more: it lists the log and
//! puts a fence where the listing ended (create-only; the writer's put
//! there then fails and its log stops). Only then does it look at every
//! tenure at or after each partition's newest checkpoint, and delete the
//! writer's objects below `tenure::deletion_bound` of what it listed and
//! those tenures. A put the writer still has in flight lies past the
//! fence, or before the last object listed, which was put after it, so
//! its tenure was made before the listing and is seen; a claim in
//! progress (its first number taken, its tenure not made yet) holds
//! nothing acknowledged once the fence stands. Fences are never deleted: a
//! writer's put delayed past its fence would otherwise land where the
//! fence was, and be acknowledged. A fence is one small object per
//! takeover or collection.
//!
//! So as not to stop a live origin's log, only logs that no partition's
//! newest tenure names, and whose newest object is older than `quiet`,
//! are fenced and collected (a guess from the bucket's clock: safety does
//! not rest on it).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;

use futures::StreamExt;
use object_store::path::Path;
use object_store::ObjectStore;

use super::checkpoint::newest_stand;
use super::format::{encode_log, LogId, LogObject};
use super::read::{fence, read_tenure};
use crate::objects::keys;
use crate::region::bucket::{again, delete_all, list_numbers};
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

/// One listed object of a log: its number, size and when it was put.
struct Listed {
    number: u64,
    size: u64,
    modified: std::time::SystemTime,
}

/// Deletes, in every quiet log of the region but `own` that no
/// partition's newest tenure names, the writer's objects that no reader
/// of any of the `partitions` needs.
pub async fn collect_dead(
    store: &dyn ObjectStore,
    own: Option<&LogId>,
    partitions: u32,
    quiet: std::time::Duration,
    stopping: &AtomicBool,
) -> Result<CollectedDead, WalError> {
    let mut named = std::collections::BTreeSet::new();
    for p in 0..partitions {
        if let Some(log) = newest_tenure_log(store, p, stopping).await? {
            named.insert(log);
        }
    }
    let now = std::time::SystemTime::now();
    let quiet_since = now.checked_sub(quiet).unwrap_or(now);
    // Listed, then fenced where the listing ended: the writer acknowledges
    // nothing from there on.
    let mut listed: BTreeMap<LogId, Vec<Listed>> = BTreeMap::new();
    for log in list_logs(store, stopping).await? {
        if Some(&log) == own || named.contains(&log) {
            continue;
        }
        let objects = again(stopping, || list_objects(store, &log)).await?;
        let Some(last) = objects.last() else { continue };
        if last.modified > quiet_since {
            continue;
        }
        let at = last.number + 1;
        if !fence(store, &log, at, stopping).await?.fence {
            continue; // the writer put there first: it is alive
        }
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
                modified: meta.last_modified.into(),
            });
        }
    }
    objects.sort_unstable_by_key(|o| o.number);
    Ok(objects)
}

/// The log partition `p`'s newest tenure is in, if it has one.
async fn newest_tenure_log(
    store: &dyn ObjectStore,
    p: u32,
    stopping: &AtomicBool,
) -> Result<Option<LogId>, WalError> {
    let prefix = keys::partition_tenures(p);
    let numbers = again(stopping, || list_numbers(store, &prefix)).await?;
    let Some(&k) = numbers.last() else {
        return Ok(None);
    };
    Ok(read_tenure(store, p, k, stopping).await?.map(|t| t.log))
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
            let record = read_tenure(store, p, k, stopping).await?;
            Ok(record.map(|t| (k, t.log, t.from)))
        })
        .buffered(REPLAY_READS);
    let read: Vec<Result<Option<_>, WalError>> = reads.collect().await;
    read.into_iter().filter_map(Result::transpose).collect()
}
