//! Where a follower's replica stands and how a round of it is read: in a
//! partition's own WAL (`region::replica`, under `follow`'s rules) or in
//! the origins' logs (`region::log_replica`, one WAL per origin).

use crate::region::follow::Follow;
use crate::region::log_replica;
use crate::region::replica as bucket;

/// Where a replica stands: in a partition's own WAL, or in the origins'
/// logs (one WAL per origin).
#[derive(Debug)]
pub(in crate::server::region) enum Place {
    Wal(Follow),
    Log(log_replica::LogFollow),
}

/// A round read, with the look at the newest checkpoint after it.
pub(in crate::server::region) enum Next {
    Wal(crate::region::follow::Round, Option<u64>),
    Log(
        log_replica::LogFollow,
        crate::region::tenure::Stand,
        Option<crate::region::tenure::Stand>,
    ),
}

impl Place {
    /// Reads the next round and looks at the newest checkpoint after it;
    /// None when it read nothing new and no look is due.
    pub(super) async fn read_next(
        &self,
        objects: &dyn object_store::ObjectStore,
        p: u32,
        look_due: bool,
        shared: &crate::region::origin_wal::SharedReads,
    ) -> Result<Option<(Next, bucket::RoundRead)>, crate::region::WalError> {
        match self {
            Place::Wal(follow) => {
                let (round, read) = bucket::read_next(objects, p, follow).await?;
                if read.objects == 0 && !look_due {
                    return Ok(None);
                }
                let newest = crate::region::bucket::newest_checkpoint_number(objects, p).await?;
                Ok(Some((Next::Wal(round, newest), read)))
            }
            Place::Log(follow) => {
                let (round, began, read) =
                    log_replica::read_next(objects, p, follow, shared).await?;
                if read.objects == 0 && !look_due && round.same_place(follow) {
                    return Ok(None);
                }
                let newest = log_replica::newest(objects, p).await?;
                Ok(Some((Next::Log(round, began, newest), read)))
            }
        }
    }

    /// Whether the round stands (see `follow` and `log_replica`); the
    /// replica moves past it if so.
    pub(super) fn finish(&mut self, next: Next) -> bool {
        match (self, next) {
            (Place::Wal(follow), Next::Wal(round, newest)) => follow.finish(round, newest),
            (Place::Log(follow), Next::Log(round, began, newest)) => {
                follow.finish(round, began, newest)
            }
            _ => unreachable!("a round of the replica's own kind"),
        }
    }
}
