//! What a store operation can answer besides success.

use super::view::Tail;
use crate::core::snapshot::{RetainRefusal, SnapshotRefusal};
use crate::core::stream::AppendRefusal;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("stream not found")]
    NotFound,
    #[error("the stream was deleted and created again")]
    IncarnationMismatch { current: String },
    #[error("the stream exists with a different configuration")]
    ConfigMismatch,
    #[error("append refused: {refusal:?}")]
    Refused { refusal: AppendRefusal, tail: Tail },
    #[error("the store is shutting down")]
    ShuttingDown,
    /// Too many bytes wait to be sealed (object storage down or slow).
    #[error("object storage is behind; appends resume once sealing catches up")]
    SealingBehind,
    #[error("snapshot refused: {0:?}")]
    SnapshotRefused(SnapshotRefusal),
    #[error("retention refused: {0:?}")]
    RetainRefused(RetainRefusal),
}
