//! Where everything lives under the data directory. Every local path the
//! store touches comes from here.
//!
//! ```text
//! DATA/
//!   wal/0000000000000007.wal   the write-ahead log, one file per segment
//!   checkpoints/base-0000000000000009   every live stream as of checkpoint 9
//!   checkpoints/delta-000000000000000a  what checkpoint 10 changed
//!   checkpoint                          (version 1) every stream's state, one file
//!   streams/2a/000000000000002a         a stream's own file (by internal id),
//!                                       in 256 folders by the id's low byte
//! ```
//! Only streams that outgrew the log have a file (see `warm`); the folders
//! keep each directory small when a million streams do.

use std::path::{Path, PathBuf};

pub fn wal_dir(data: &Path) -> PathBuf {
    data.join("wal")
}

pub fn segment_path(data: &Path, segment: u64) -> PathBuf {
    wal_dir(data).join(format!("{segment:016x}.wal"))
}

/// The segment number a WAL file name encodes.
pub fn parse_segment(name: &str) -> Option<u64> {
    let hex = name.strip_suffix(".wal")?;
    (hex.len() == 16)
        .then(|| u64::from_str_radix(hex, 16).ok())
        .flatten()
}

/// The checkpoint of version 1 (see `checkpoint::legacy`).
pub fn checkpoint_path(data: &Path) -> PathBuf {
    data.join("checkpoint")
}

pub fn checkpoints_dir(data: &Path) -> PathBuf {
    data.join("checkpoints")
}

/// A file of the incremental checkpoint (see `checkpoint`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum CheckpointFile {
    Base(u64),
    Delta(u64),
}

pub fn checkpoint_file_path(data: &Path, file: CheckpointFile) -> PathBuf {
    let name = match file {
        CheckpointFile::Base(seq) => format!("base-{seq:016x}"),
        CheckpointFile::Delta(seq) => format!("delta-{seq:016x}"),
    };
    checkpoints_dir(data).join(name)
}

/// The checkpoint file a name encodes (None for anything else, temporary
/// files included).
pub fn parse_checkpoint_file(name: &str) -> Option<CheckpointFile> {
    let seq = |hex: &str| {
        (hex.len() == 16 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
            .then(|| u64::from_str_radix(hex, 16).ok())
            .flatten()
    };
    match name.strip_prefix("base-") {
        Some(hex) => seq(hex).map(CheckpointFile::Base),
        None => seq(name.strip_prefix("delta-")?).map(CheckpointFile::Delta),
    }
}

/// Where a file is written before it is renamed to `path`.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(TEMP_SUFFIX);
    name.into()
}

pub fn is_temp_file(name: &str) -> bool {
    name.ends_with(TEMP_SUFFIX)
}

const TEMP_SUFFIX: &str = ".tmp";

pub fn streams_dir(data: &Path) -> PathBuf {
    data.join("streams")
}

pub fn stream_file(data: &Path, id: u64) -> PathBuf {
    streams_dir(data)
        .join(format!("{:02x}", id & 0xff))
        .join(format!("{id:016x}"))
}

/// The stream id a stream file name encodes.
pub fn parse_stream_file(name: &str) -> Option<u64> {
    (name.len() == 16)
        .then(|| u64::from_str_radix(name, 16).ok())
        .flatten()
}

/// Makes a rename or a new file durable by syncing its directory.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let p = segment_path(Path::new("/d"), 7);
        assert_eq!(
            parse_segment(p.file_name().unwrap().to_str().unwrap()),
            Some(7)
        );
        let f = stream_file(Path::new("/d"), 42);
        assert_eq!(
            parse_stream_file(f.file_name().unwrap().to_str().unwrap()),
            Some(42)
        );
        assert_eq!(parse_segment("x.wal"), None);
    }
}
