//! Log objects as an origin's replicas read them (`log_replica`): with one
//! WAL per origin, every partition an origin owns is in its one log, so
//! the replicas following several of those partitions read the same
//! objects, and, once caught up, wait at the same missing number. Reads
//! of one object at once are made once ([`moka`] coalesces them, a miss
//! included), and what was found is kept a while for the replicas whose
//! rounds come later: one GET per object and per idle round for each log
//! followed, not for each partition. Objects never change; one deleted
//! meanwhile is read as it was, and the round's look at the newest
//! checkpoint decides, as for any read (`log_replica`).

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use object_store::ObjectStore;

use super::format::{LogId, LogObject};
use super::read::read_object;
use crate::region::object_wal::WalError;

/// How long a found object is kept: long enough for every replica's next
/// rounds, short enough that a deleted one goes soon.
const KEEP: Duration = Duration::from_secs(30);

/// The objects read lately, by log and number, up to a weight in bytes.
pub struct SharedReads {
    found: moka::future::Cache<(LogId, u64), Arc<LogObject>>,
}

/// Why a coalesced read gave no object.
#[derive(Debug)]
enum NotRead {
    Missing,
    Failed,
}

impl SharedReads {
    /// Keeps up to `max_bytes` of objects' frames.
    pub fn new(max_bytes: u64) -> SharedReads {
        SharedReads {
            found: moka::future::Cache::builder()
                .max_capacity(max_bytes)
                .weigher(|_, o: &Arc<LogObject>| {
                    let frames: usize = o.sections.iter().map(|s| s.frames.len() + 16).sum();
                    u32::try_from(frames + 64).unwrap_or(u32::MAX)
                })
                .time_to_live(KEEP)
                .build(),
        }
    }

    /// Object `n` of `log`, or None when nothing is there.
    pub(crate) async fn read(
        &self,
        store: &dyn ObjectStore,
        log: &LogId,
        n: u64,
        stopping: &AtomicBool,
    ) -> Result<Option<LogObject>, WalError> {
        let got = self
            .found
            .try_get_with((*log, n), async {
                match read_object(store, log, n, stopping).await {
                    Ok(Some(object)) => Ok(Arc::new(object)),
                    Ok(None) => Err(NotRead::Missing),
                    Err(_) => Err(NotRead::Failed),
                }
            })
            .await;
        match got {
            Ok(object) => Ok(Some(LogObject::clone(&object))),
            Err(e) => match *e {
                NotRead::Missing => Ok(None),
                // Read again on its own, for the error itself.
                NotRead::Failed => read_object(store, log, n, stopping).await,
            },
        }
    }

    #[cfg(test)]
    pub(crate) async fn kept(&self) -> u64 {
        self.found.run_pending_tasks().await;
        self.found.entry_count()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use object_store::{ObjectStoreExt, PutPayload};

    use super::*;
    use crate::objects::keys;
    use crate::region::origin_wal::format::{encode_log, Section};

    fn object(n: u64) -> LogObject {
        LogObject {
            fence: false,
            put_id: [n as u8; 16],
            sections: vec![Section {
                partition: 0,
                releases: false,
                frames: Bytes::from(vec![n as u8; 1000]),
            }],
        }
    }

    #[tokio::test]
    async fn found_objects_are_kept_up_to_the_bound_and_a_miss_is_not() {
        let store = object_store::memory::InMemory::new();
        let log: LogId = [7; 16];
        for n in 0..20 {
            let bytes = encode_log(&object(n));
            store
                .put(&keys::log_object(&log, n), PutPayload::from(bytes))
                .await
                .unwrap();
        }
        // Room for about five objects of a thousand bytes.
        let shared = SharedReads::new(5_500);
        let stopping = AtomicBool::new(false);
        for n in 0..20 {
            let read = shared.read(&store, &log, n, &stopping).await.unwrap();
            assert_eq!(read, Some(object(n)));
        }
        let kept = shared.kept().await;
        assert!((1..=5).contains(&kept), "{kept} kept");
        // A miss is read again next time: it is there once put.
        assert_eq!(
            shared.read(&store, &log, 20, &stopping).await.unwrap(),
            None
        );
        let bytes = encode_log(&object(20));
        store
            .put(&keys::log_object(&log, 20), PutPayload::from(bytes))
            .await
            .unwrap();
        assert_eq!(
            shared.read(&store, &log, 20, &stopping).await.unwrap(),
            Some(object(20))
        );
    }
}
