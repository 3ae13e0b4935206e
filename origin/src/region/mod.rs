//! A region of origins: object storage as the replicated tier.
//!
//! With `--durability object` an append is acknowledged only once its group
//! commit is an object in the bucket, written by a create-only put; the
//! local disk is a cache, rebuilt from the bucket whenever this origin
//! claims its partition. So losing a machine and its disk loses no
//! acknowledged append, and whoever claims the partition next (this origin
//! restarted, or another) serves exactly what was acknowledged. Safety
//! comes from conditional writes alone, as SlateDB fences its writers:
//! `fence` holds the rules and the argument, `object_wal` the I/O,
//! `format` the two object formats, `local` how a replay becomes the local
//! log the store recovers from. Who owns the partition at a moment is
//! `liveness` (pure: heartbeats seen changing on this origin's own clock)
//! and `membership` (its reads and writes); `server::region` serves or
//! forwards by it. What an owner answers from its state alone (refusals,
//! leader reads) waits for `vouch`: the bucket's word that no newer owner
//! exists. See `docs/decisions/0012-object-durability.md` and `0013`.
//! `tenure` holds the rules (model-checked) of one WAL per origin for all
//! its partitions (decision 0028), `origin_wal` its I/O (built and tested
//! on its own; the store does not use it yet).

pub(crate) mod across;
pub(crate) mod assignment;
pub mod auth_sync;
pub(crate) mod bucket;
pub(crate) mod checkpoint;
pub(crate) mod commit_log;
pub mod fence;
pub(crate) mod follow;
pub(crate) mod format;
pub(crate) mod liveness;
pub(crate) mod local;
pub(crate) mod log_replica;
pub(crate) mod membership;
pub(crate) mod object_wal;
pub mod origin_wal;
pub(crate) mod peer_key;
pub(crate) mod pin;
pub(crate) mod replica;
pub(crate) mod tenure;
pub(crate) mod vouch;

pub use object_wal::{Claimed, ObjectWal, RegionConfig, Replay, Settlement, Ticket, WalError};
