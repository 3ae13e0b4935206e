//! Reading a partition's history from its tenures, and the create-only
//! puts of log objects (the writer's and a taker's fence). Each number of
//! a log is read once; the walk's rules are `tenure`'s.

use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use futures::StreamExt;
use object_store::{ObjectStore, ObjectStoreExt};

use super::checkpoint::{newest_stand, read_stand_image};
use super::format::{decode_log, decode_tenure, encode_log, LogId, LogObject, TenureRecord};
use super::shared_reads::SharedReads;
use crate::objects::keys;
use crate::region::bucket::{again, create_or_read, get_if_there, list_numbers};
use crate::region::object_wal::{Replay, WalError, REPLAY_READS};
use crate::region::tenure::{Found, Stand, Step, Tenure, Walk};

/// What a walk does at a missing number of the newest tenure.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AtOpen {
    /// Put a fence there (a takeover, rule 3): the tenure ends.
    Fence,
    /// Stop reading: the tenure's writer may still put there (a reader
    /// that does not take over, such as a replica).
    Stop,
}

/// Where the newest tenure's reading stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// It ended before this number (a release or a fence).
    Ended(u64),
    /// Nothing is at this number yet ([`AtOpen::Stop`]).
    Open(u64),
}

/// What a reading of a partition's history found.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// The checkpoint the reading started from (its image handed on
    /// first), if the partition had one.
    pub base: Option<Stand>,
    /// The partition's tenures, oldest first.
    pub tenures: Vec<TenureRecord>,
    /// Where the newest one's reading stopped (none without tenures).
    pub end: Option<End>,
    /// Log objects whose frames were handed on.
    pub replayed: usize,
    /// Fences put.
    pub fences: usize,
}

/// Reads partition `p`'s history from its newest checkpoint (its image
/// first) or, without one, from its first tenure, handing on its frames in
/// order (a [`Replay::Begin`] first). [`WalError::Moved`]: a newer
/// checkpoint deleted what the reading needed; read again.
pub async fn read_history(
    store: &dyn ObjectStore,
    p: u32,
    at_open: AtOpen,
    stopping: &AtomicBool,
    replay: &mut (dyn FnMut(Replay) -> std::io::Result<()> + Send),
) -> Result<History, WalError> {
    let base = newest_stand(store, p, stopping).await?;
    let tenures = read_tenures(store, p, stopping).await?;
    replay(Replay::Begin).map_err(WalError::Local)?;
    let mut history = History {
        base: base.as_ref().map(|b| b.stand),
        ..History::default()
    };
    if let Some(b) = &base {
        read_stand_image(store, p, b, replay).await?;
    }
    let first = base.as_ref().map_or(0, |b| b.stand.tenure);
    if base.is_some() && first as usize >= tenures.len() {
        return Err(corrupt_chain(p, first as usize));
    }
    for (k, tenure) in tenures.iter().enumerate().skip(first as usize) {
        let below = successor_end(p, &tenures, k)?;
        let start = match &base {
            Some(b) if b.stand.tenure == k as u64 => b.stand.number.max(tenure.from),
            _ => tenure.from,
        };
        let end = walk(
            store,
            p,
            tenure,
            Reading {
                start,
                below,
                at_open,
                most: u64::MAX,
                shared: None,
            },
            stopping,
            replay,
            &mut history,
        )
        .await?;
        history.end = Some(end);
    }
    history.tenures = tenures;
    Ok(history)
}

/// Where tenure `k` ends, as its successor names it (None for the newest).
pub(super) fn successor_end(
    p: u32,
    tenures: &[TenureRecord],
    k: usize,
) -> Result<Option<u64>, WalError> {
    match tenures.get(k + 1) {
        Some(next) => Ok(Some(
            next.previous_end.ok_or_else(|| corrupt_chain(p, k + 1))?,
        )),
        None => Ok(None),
    }
}

/// Partition `p`'s tenures, oldest first: numbered `0, 1, …` without gaps.
pub(super) async fn read_tenures(
    store: &dyn ObjectStore,
    p: u32,
    stopping: &AtomicBool,
) -> Result<Vec<TenureRecord>, WalError> {
    let prefix = keys::partition_tenures(p);
    let numbers = again(stopping, || list_numbers(store, &prefix)).await?;
    if numbers.iter().enumerate().any(|(i, &k)| k != i as u64) {
        return Err(corrupt_chain(p, numbers.len()));
    }
    let reads = futures::stream::iter(numbers)
        .map(|k| async move {
            let key = keys::partition_tenure(p, k);
            let bytes = again(stopping, || async {
                Ok(store.get(&key).await?.bytes().await?)
            })
            .await?;
            decode_tenure(&bytes).map_err(|source| WalError::Corrupt {
                key: key.to_string(),
                source,
            })
        })
        .buffered(REPLAY_READS);
    reads.collect::<Vec<_>>().await.into_iter().collect()
}

/// Tenure `k` of partition `p`, if made.
pub(crate) async fn read_tenure(
    store: &dyn ObjectStore,
    p: u32,
    k: u64,
    stopping: &AtomicBool,
) -> Result<Option<TenureRecord>, WalError> {
    let key = keys::partition_tenure(p, k);
    let Some(bytes) = get_if_there(store, &key, stopping).await? else {
        return Ok(None);
    };
    decode_tenure(&bytes)
        .map(Some)
        .map_err(|source| WalError::Corrupt {
            key: key.to_string(),
            source,
        })
}

fn corrupt_chain(p: u32, k: usize) -> WalError {
    WalError::Corrupt {
        key: keys::partition_tenure(p, k as u64).to_string(),
        source: crate::region::format::FormatError::Malformed(
            "tenures are numbered from 0 without gaps, each after the first naming where the one before ended",
        ),
    }
}

/// How one tenure is read: from `start` (its first number, or where a
/// checkpoint in it stands), up to `below` when that end is known.
#[derive(Clone, Copy)]
pub(crate) struct Reading<'a> {
    pub start: u64,
    pub below: Option<u64>,
    pub at_open: AtOpen,
    /// Numbers read at most: a reading that reaches `start + most` stops
    /// there as if the next were missing (a replica's round budget).
    pub most: u64,
    /// The reads shared by this origin's replicas (None: read alone).
    pub shared: Option<&'a SharedReads>,
}

/// Reads one tenure from `reading.start` to its end, reading ahead
/// [`REPLAY_READS`] numbers at a time. A number missing below a known end
/// was deleted under the reading ([`WalError::Moved`]).
pub(crate) async fn walk(
    store: &dyn ObjectStore,
    p: u32,
    tenure: &TenureRecord,
    reading: Reading<'_>,
    stopping: &AtomicBool,
    replay: &mut (dyn FnMut(Replay) -> std::io::Result<()> + Send),
    history: &mut History,
) -> Result<End, WalError> {
    let Reading {
        start,
        below,
        at_open,
        most,
        shared,
    } = reading;
    // A replica mostly finds its next number missing (it is caught up):
    // it reads one, and more ahead only while it finds them. A claim reads
    // a history at once.
    let mut ahead = if at_open == AtOpen::Stop {
        1
    } else {
        REPLAY_READS as u64
    };
    let stop = start.max(tenure.from).saturating_add(most);
    // The model's tenure: a log's writer puts at epoch 1, a fence is
    // another (`LogObject::found`); the walk does not use the log's name.
    let model = Tenure {
        log: 0,
        epoch: super::format::WRITER_EPOCH,
        from: tenure.from,
        previous_end: tenure.previous_end,
    };
    let mut walk = Walk::resume(&model, start.max(tenure.from), below);
    loop {
        let at = match walk.next() {
            Ok(at) => at,
            Err(end) => return Ok(End::Ended(end)),
        };
        if at >= stop {
            return Ok(End::Open(at));
        }
        let upto = below.map_or(at + ahead, |b| b.min(at + ahead)).min(stop);
        let objects: Vec<_> = futures::stream::iter(at..upto)
            .map(|n| async move {
                match shared {
                    Some(shared) => shared.read(store, &tenure.log, n, stopping).await,
                    None => read_object(store, &tenure.log, n, stopping).await,
                }
            })
            .buffered(REPLAY_READS)
            .collect()
            .await;
        ahead = (ahead * 4).min(REPLAY_READS as u64);
        for object in objects {
            let n = walk.next().expect("read ahead below the end");
            let object = match object? {
                Some(object) => object,
                // A closed tenure holds every number below its end.
                None if below.is_some() => return Err(WalError::Moved),
                None if at_open == AtOpen::Stop => match walk.read(Found::Missing) {
                    Step::Open { at } => return Ok(End::Open(at)),
                    _ => unreachable!("a missing number leaves a walk open"),
                },
                None => {
                    history.fences += 1;
                    let object = fence(store, &tenure.log, n, stopping).await?;
                    // What lies past it was read before the fence: read again.
                    if let Some(end) = take(&mut walk, p, &object, replay, history)? {
                        return Ok(end);
                    }
                    break;
                }
            };
            if let Some(end) = take(&mut walk, p, &object, replay, history)? {
                return Ok(end);
            }
        }
    }
}

/// Takes one object into the walk; the end, when it ends the tenure.
fn take(
    walk: &mut Walk,
    p: u32,
    object: &LogObject,
    replay: &mut (dyn FnMut(Replay) -> std::io::Result<()> + Send),
    history: &mut History,
) -> Result<Option<End>, WalError> {
    match walk.read(object.found(p)) {
        Step::Count => {
            let mut any = false;
            for frames in object.frames_of(p) {
                replay(Replay::Frames(frames.clone())).map_err(WalError::Local)?;
                any = true;
            }
            history.replayed += usize::from(any);
            Ok(None)
        }
        Step::Ended { at } => Ok(Some(End::Ended(at))),
        Step::Open { .. } => unreachable!("an object was found"),
    }
}

/// Object `n` of `log`, or None when nothing is there.
pub(super) async fn read_object(
    store: &dyn ObjectStore,
    log: &LogId,
    n: u64,
    stopping: &AtomicBool,
) -> Result<Option<LogObject>, WalError> {
    let key = keys::log_object(log, n);
    let bytes = get_if_there(store, &key, stopping).await?;
    bytes.map(|b| decode(&key, &b)).transpose()
}

fn decode(key: &object_store::path::Path, bytes: &Bytes) -> Result<LogObject, WalError> {
    decode_log(bytes).map_err(|source| WalError::Corrupt {
        key: key.to_string(),
        source,
    })
}

/// Puts a fence at number `n` of `log` (rule 3); returns what is there
/// after: the fence, or what was there first.
pub(super) async fn fence(
    store: &dyn ObjectStore,
    log: &LogId,
    n: u64,
    stopping: &AtomicBool,
) -> Result<LogObject, WalError> {
    let fence = LogObject {
        fence: true,
        put_id: rand::random(),
        sections: Vec::new(),
    };
    settle_put(store, log, n, &fence, stopping).await
}

/// Creates `object` at number `n` of `log`; returns what is there once
/// the put settled: `object` itself, or what was there first. A try whose
/// outcome is unknown is settled by reading back (`bucket::create_or_read`).
pub(super) async fn settle_put(
    store: &dyn ObjectStore,
    log: &LogId,
    n: u64,
    object: &LogObject,
    stopping: &AtomicBool,
) -> Result<LogObject, WalError> {
    let key = keys::log_object(log, n);
    let mut there = None;
    let ours = create_or_read(store, &key, encode_log(object), stopping, None, |bytes| {
        let found = decode(&key, &bytes)?;
        let ours = found.put_id == object.put_id;
        there = Some(found);
        Ok(ours)
    })
    .await?;
    Ok(match there {
        Some(found) if !ours => found,
        _ => object.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fence_is_found_as_another_epoch() {
        let fence = LogObject {
            fence: true,
            put_id: [0; 16],
            sections: Vec::new(),
        };
        let mut walk = Walk::new(
            &Tenure {
                log: 0,
                epoch: 1,
                from: 4,
                previous_end: None,
            },
            None,
        );
        assert!(matches!(
            fence.found(0),
            crate::region::tenure::Found::Object { epoch: 2, .. }
        ));
        assert_eq!(walk.read(fence.found(0)), Step::Ended { at: 4 });
    }
}
