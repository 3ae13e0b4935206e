//! The checkpoint directory on disk: what is in it, and how a file gets
//! there durably.
//!
//! A file is written under a temporary name, synced, renamed to its name,
//! and the directory is synced: a file under its own name is complete and
//! durable, and a crash leaves at most a temporary file, which nothing reads
//! and the next write removes.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::store::layout::{self, CheckpointFile};

/// The checkpoint directory's files, by kind.
#[derive(Debug, Default)]
pub struct Listing {
    pub files: Vec<CheckpointFile>,
    pub temps: Vec<PathBuf>,
}

/// Lists the checkpoint directory (empty when it does not exist yet).
pub fn list(data: &Path) -> io::Result<Listing> {
    let dir = layout::checkpoints_dir(data);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Listing::default()),
        Err(e) => return Err(e),
    };
    let mut listing = Listing::default();
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if let Some(file) = layout::parse_checkpoint_file(name) {
            listing.files.push(file);
        } else if layout::is_temp_file(name) {
            listing.temps.push(entry.path());
        }
    }
    Ok(listing)
}

/// Makes sure the checkpoint directory is there, durably. The data
/// directory is synced even when the checkpoint directory was there
/// already: a process that died between creating and syncing it left an
/// entry that a power loss could still take, and with it every checkpoint.
pub fn ensure_dir(data: &Path) -> io::Result<()> {
    std::fs::create_dir_all(layout::checkpoints_dir(data))?;
    layout::sync_dir(data)
}

/// Puts `bytes` at `path` durably (see the module doc).
pub fn write_durably(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = layout::temp_path(path);
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, path)?;
    layout::sync_dir(path.parent().expect("checkpoint files are in a directory"))
}

/// Removes files of `dir` that are no longer needed (missing ones are
/// fine), then syncs `dir` if anything went.
pub fn remove_all(dir: &Path, paths: &[PathBuf]) -> io::Result<()> {
    let mut removed = false;
    for path in paths {
        match std::fs::remove_file(path) {
            Ok(()) => removed = true,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    if removed {
        layout::sync_dir(dir)?;
    }
    Ok(())
}

pub fn size(path: &Path) -> io::Result<u64> {
    Ok(std::fs::metadata(path)?.len())
}
