//! Why a checkpoint cannot be read. Every file of a checkpoint is renamed
//! into place only after it is synced, so a file that fails its checks was
//! damaged after it was written (or never was what its name says): that is
//! reported, never skipped, because skipping it would lose acknowledged
//! state.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint I/O: {0}")]
    Io(#[from] io::Error),
    #[error("checkpoint file {} is corrupt: {reason}", file.display())]
    Corrupt { file: PathBuf, reason: Corruption },
}

/// What is wrong with one file; the decoders, which see only bytes, return
/// it, and the shell adds which file it was.
#[derive(Debug, thiserror::Error)]
pub enum Corruption {
    #[error("{0}")]
    Format(&'static str),
    #[error("its JSON does not parse: {0}")]
    Json(#[from] serde_json::Error),
    /// The deltas after the base must follow each other without a hole.
    #[error("delta {missing:016x}, which comes before it, is missing")]
    Gap { missing: u64 },
}

impl From<CheckpointError> for io::Error {
    fn from(e: CheckpointError) -> Self {
        match e {
            CheckpointError::Io(e) => e,
            e @ CheckpointError::Corrupt { .. } => io::Error::new(io::ErrorKind::InvalidData, e),
        }
    }
}
