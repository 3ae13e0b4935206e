//! Checkpoints: every stream's state as of the start of one WAL segment, so
//! recovery replays only the segments after it and restart time does not
//! grow with the size of the log.
//!
//! A checkpoint is incremental, because rewriting every stream at every
//! rotation costs ~200 bytes per stream (~200 MB at a million streams) no
//! matter how few changed. Each checkpoint writes a *delta*: the streams
//! changed since the previous one and the ids deleted. From time to time
//! the *base* (every live stream) and the deltas after it are merged into a
//! new base (*compaction*, see `merge` for when), so the files a load
//! reads stay about the size of the live state. A compaction runs on the
//! checkpoint thread and holds about twice the base in memory meanwhile.
//! The format is binary (`format`, `codec`, `wire`) so that a load decodes
//! a million streams in well under a second.
//!
//! ```text
//! DATA/checkpoints/base-{seq:016x}    every live stream up to checkpoint seq
//! DATA/checkpoints/delta-{seq:016x}   what checkpoint seq changed
//! DATA/checkpoint                     version 1 (one JSON file, `legacy`)
//! ```
//!
//! Crash safety: each file is renamed into place only once it is synced
//! (`files`), and a base is written before the files it replaces are
//! removed, so at any crash the newest base and the deltas after it are the
//! checkpoint (`chain`); temporary files and files a newer base replaced
//! are ignored and removed by the next write. A damaged file or a missing
//! delta among them is an error, not something to skip. The next number is
//! one more than the highest on disk, so nothing about the sequence lives
//! in memory. One writer at a time (the checkpoint thread).
//!
//! A data directory from before has only `DATA/checkpoint`: it is read as
//! the base (every stream file then held all its stream's bytes), and the
//! first write compacts it into a real base and then removes it.

pub(crate) mod legacy;

mod chain;
pub(crate) mod codec;
mod error;
mod files;
pub(crate) mod format;
mod merge;
mod wire;

#[cfg(test)]
mod tests;

use std::io;
use std::path::{Path, PathBuf};

use self::chain::Chain;
use self::files::Listing;
use self::format::{FileView, Header, Kind};
use self::merge::Merged;
use super::layout::{self, CheckpointFile};
use super::saved::SavedStream;
pub use error::{CheckpointError, Corruption};
pub use merge::Policy;

/// What one checkpoint changed since the one before it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// Recovery replays this segment and every later one.
    pub replay_from_segment: u64,
    pub next_stream_id: u64,
    /// Streams created or changed (their whole state).
    pub changed: Vec<SavedStream>,
    /// Streams deleted. An id in both lists is deleted.
    pub deleted: Vec<u64>,
}

/// The checkpoint as recovery starts from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loaded {
    pub replay_from_segment: u64,
    pub next_stream_id: u64,
    /// Every live stream, in increasing order of id.
    pub streams: Vec<SavedStream>,
}

/// What a write did, for metrics and logs.
#[derive(Debug)]
#[must_use]
pub struct WriteReport {
    pub seq: u64,
    pub delta_bytes: u64,
    /// None when no compaction was due. A failed compaction leaves the
    /// checkpoint correct (the delta is durable; the old base and deltas
    /// are all still there), so it does not fail the write; it is tried
    /// again at the next one.
    pub compaction: Option<Result<Compacted, CheckpointError>>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Compacted {
    pub base_bytes: u64,
    pub streams: usize,
    /// The deltas the new base took in (the one just written included).
    pub deltas_merged: usize,
}

impl WriteReport {
    pub fn bytes_written(&self) -> u64 {
        self.delta_bytes + self.compacted().map_or(0, |c| c.base_bytes)
    }

    pub fn compacted(&self) -> Option<&Compacted> {
        self.compaction.as_ref().and_then(|c| c.as_ref().ok())
    }
}

/// Reads the newest base and applies every later delta in order (a stream changed in a delta replaces its earlier state; a deleted id goes). None when no checkpoint was ever written.
pub fn load(data: &Path) -> Result<Option<Loaded>, CheckpointError> {
    let chain = plan(data, &files::list(data)?)?;
    let read = ChainBytes::read(data, &chain)?;
    let Some(merged) = read.merge()? else {
        return Ok(None);
    };
    let mut streams = Vec::with_capacity(merged.records.len());
    for r in &merged.records {
        streams.push(codec::decode(r.bytes).map_err(|reason| corrupt(r.file, reason))?);
    }
    Ok(Some(Loaded {
        replay_from_segment: merged.header.replay_from_segment,
        next_stream_id: merged.header.next_stream_id,
        streams,
    }))
}

/// Writes `delta` durably as the next checkpoint, then compacts if the
/// default [`Policy`] says so. On an error the delta may or may not be in
/// place; the caller keeps its changes for the next checkpoint (a delta
/// that repeats a state is harmless).
pub fn write(data: &Path, delta: &Delta) -> io::Result<WriteReport> {
    write_with(data, delta, &Policy::default())
}

/// [`write`] with the compaction rule given.
pub fn write_with(data: &Path, delta: &Delta, policy: &Policy) -> io::Result<WriteReport> {
    files::ensure_dir(data)?;
    let listing = files::list(data)?;
    let mut chain = plan(data, &listing)?;
    remove_leftovers(data, &listing, &chain)?;
    let base_bytes = chain
        .base
        .map(|seq| files::size(&path(data, CheckpointFile::Base(seq))))
        .transpose()?;
    let mut deltas_bytes = 0;
    for &seq in &chain.deltas {
        deltas_bytes += files::size(&path(data, CheckpointFile::Delta(seq)))?;
    }
    let seq = chain.next_seq;
    let image = format::encode_delta(seq, delta);
    files::write_durably(&path(data, CheckpointFile::Delta(seq)), &image)?;
    let delta_bytes = image.len() as u64;
    drop(image);
    chain.deltas.push(seq);
    let due = policy.compaction_due(base_bytes, deltas_bytes + delta_bytes, chain.deltas.len());
    Ok(WriteReport {
        seq,
        delta_bytes,
        compaction: due.then(|| compact(data, &chain)),
    })
}

/// Merges the chain as it is on disk into a new base, then removes what it
/// replaces. Reading back what was written (rather than trusting the
/// caller's memory) means a base only ever holds what a load would see.
fn compact(data: &Path, chain: &Chain) -> Result<Compacted, CheckpointError> {
    let read = ChainBytes::read(data, chain)?;
    let merged = read.merge()?.expect("the chain has the delta just written");
    let image = format::encode_base(&merged.header, &merged.records);
    files::write_durably(&path(data, CheckpointFile::Base(merged.header.seq)), &image)?;
    let report = Compacted {
        base_bytes: image.len() as u64,
        streams: merged.records.len(),
        deltas_merged: chain.deltas.len(),
    };
    drop((image, merged));
    let replaced: Vec<PathBuf> = chain
        .base
        .map(CheckpointFile::Base)
        .into_iter()
        .chain(chain.deltas.iter().map(|&seq| CheckpointFile::Delta(seq)))
        .map(|f| path(data, f))
        .collect();
    files::remove_all(&layout::checkpoints_dir(data), &replaced)?;
    files::remove_all(data, &[layout::checkpoint_path(data)])?;
    Ok(report)
}

/// Temporary files, files a newer base replaced, and the version-1 file
/// once a base exists: what a write or compaction cut short left.
fn remove_leftovers(data: &Path, listing: &Listing, chain: &Chain) -> io::Result<()> {
    let mut paths = listing.temps.clone();
    paths.extend(chain.stale.iter().map(|&f| path(data, f)));
    files::remove_all(&layout::checkpoints_dir(data), &paths)?;
    if chain.base.is_some() {
        files::remove_all(data, &[layout::checkpoint_path(data)])?;
    }
    Ok(())
}

fn plan(data: &Path, listing: &Listing) -> Result<Chain, CheckpointError> {
    chain::plan(&listing.files).map_err(|hole| CheckpointError::Corrupt {
        file: path(data, CheckpointFile::Delta(hole.found)),
        reason: Corruption::Gap {
            missing: hole.missing,
        },
    })
}

fn path(data: &Path, file: CheckpointFile) -> PathBuf {
    layout::checkpoint_file_path(data, file)
}

fn corrupt(file: &Path, reason: Corruption) -> CheckpointError {
    CheckpointError::Corrupt {
        file: file.to_owned(),
        reason,
    }
}

/// One file of a chain, read.
struct FileBytes {
    path: PathBuf,
    kind: Kind,
    seq: u64,
    bytes: Vec<u8>,
}

impl FileBytes {
    fn read(data: &Path, file: CheckpointFile) -> Result<FileBytes, CheckpointError> {
        let (kind, seq) = match file {
            CheckpointFile::Base(seq) => (Kind::Base, seq),
            CheckpointFile::Delta(seq) => (Kind::Delta, seq),
        };
        let path = path(data, file);
        let bytes = std::fs::read(&path)?;
        Ok(FileBytes {
            path,
            kind,
            seq,
            bytes,
        })
    }

    /// The version-1 checkpoint as a base numbered 0, its streams wholly in
    /// their files.
    fn legacy(data: &Path) -> Result<Option<FileBytes>, CheckpointError> {
        let Some(old) = legacy::read(data)? else {
            return Ok(None);
        };
        let header = Header {
            seq: 0,
            replay_from_segment: old.replay_from_segment,
            next_stream_id: old.next_stream_id,
        };
        let streams: Vec<SavedStream> = old.streams.into_iter().map(SavedStream::in_file).collect();
        Ok(Some(FileBytes {
            path: layout::checkpoint_path(data),
            kind: Kind::Base,
            seq: 0,
            bytes: format::encode_base_streams(&header, &streams),
        }))
    }

    fn parse(&self) -> Result<FileView<'_>, CheckpointError> {
        let view = format::parse(&self.bytes, self.kind, &self.path)
            .map_err(|reason| corrupt(&self.path, reason))?;
        if view.header.seq != self.seq {
            return Err(corrupt(
                &self.path,
                Corruption::Format("its number is not the one its name has"),
            ));
        }
        Ok(view)
    }
}

/// The files of a chain, read: the base (or the version-1 file standing in
/// for it) and the deltas after it.
struct ChainBytes {
    base: Option<FileBytes>,
    deltas: Vec<FileBytes>,
}

impl ChainBytes {
    fn read(data: &Path, chain: &Chain) -> Result<ChainBytes, CheckpointError> {
        let base = match chain.base {
            Some(seq) => Some(FileBytes::read(data, CheckpointFile::Base(seq))?),
            None => FileBytes::legacy(data)?,
        };
        let deltas = chain
            .deltas
            .iter()
            .map(|&seq| FileBytes::read(data, CheckpointFile::Delta(seq)))
            .collect::<Result<_, _>>()?;
        Ok(ChainBytes { base, deltas })
    }

    fn merge(&self) -> Result<Option<Merged<'_>>, CheckpointError> {
        let base = self.base.as_ref().map(FileBytes::parse).transpose()?;
        let deltas = self
            .deltas
            .iter()
            .map(FileBytes::parse)
            .collect::<Result<_, _>>()?;
        Ok(merge::merge(base, deltas))
    }
}
