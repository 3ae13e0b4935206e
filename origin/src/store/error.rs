//! What a store operation can answer besides success.

use super::view::End;
use crate::core::fork::ForkRefusal;
use crate::core::snapshot::{RetainRefusal, SnapshotRefusal};
use crate::core::stream::AppendRefusal;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("stream not found")]
    NotFound,
    /// 412: the request named another incarnation than the stream's,
    /// `current`; `restored` is what a rollback that made it inherited
    /// (the incarnation it replaced, and the offset below which that
    /// one's bytes are kept).
    #[error("the stream was deleted and created again, or rolled back")]
    IncarnationMismatch {
        current: String,
        restored: Option<Box<(String, u64)>>,
    },
    #[error("the stream exists with a different configuration")]
    ConfigMismatch,
    #[error("append refused: {refusal:?}")]
    Refused { refusal: AppendRefusal, end: End },
    #[error("the store is shutting down")]
    ShuttingDown,
    /// Too many bytes wait to be sealed (object storage down or slow).
    #[error("object storage is behind; appends resume once sealing catches up")]
    SealingBehind,
    #[error("snapshot refused: {0:?}")]
    SnapshotRefused(SnapshotRefusal),
    #[error("retention refused: {0:?}")]
    RetainRefused(RetainRefusal),
    /// The stream was deleted while forks still read it (410).
    #[error("the stream was deleted; forks of it still read its bytes")]
    SoftDeleted,
    /// A fork of a stream that was deleted (409).
    #[error("the fork's source was deleted")]
    ForkSourceDeleted,
    #[error("fork refused: {0:?}")]
    ForkRefused(ForkRefusal),
    #[error("rollback refused: {0:?}")]
    RestoreRefused(crate::core::restore::RestoreRefusal),
    /// No room in the log (a full disk, no descriptor for a new segment):
    /// nothing was changed (503, `Retry-After`).
    #[error("no room in the write-ahead log; writes resume once the disk has space")]
    LogFull,
    /// Object durability: the commit did not settle in object storage in
    /// time (503, `Retry-After`); it may still land.
    #[error("object storage did not take the write in time")]
    ObjectStoreSlow,
    /// Object durability: a newer owner took the partition over; this
    /// origin acknowledges nothing more for it (503, `Retry-After`).
    #[error("this origin no longer owns the stream's partition")]
    Fenced,
    /// Object durability: an answer from this owner's state could not be
    /// checked against the bucket in time (`region::vouch`); nothing was
    /// changed (503, `Retry-After`).
    #[error("object storage did not confirm this origin's ownership in time")]
    OwnershipUnconfirmed,
    /// A replica could not apply its owner's commit (decision 0018): it is
    /// built again from the bucket. Never a client's answer.
    #[error("the replica could not apply its owner's commit: {0}")]
    ReplicaDiverged(String),
}

impl StoreError {
    /// 412 against the stream `view` is now.
    pub fn mismatch(view: &super::StreamView) -> Self {
        StoreError::IncarnationMismatch {
            current: view.incarnation.to_string(),
            restored: view
                .restored_from()
                .map(|(p, at)| Box::new((p.to_owned(), at))),
        }
    }
}
