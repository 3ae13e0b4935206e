//! Where everything lives under the data directory. Every local path the
//! store touches comes from here.
//!
//! ```text
//! DATA/
//!   wal/0000000000000007.wal   the write-ahead log, one file per segment
//!   checkpoint                 stream states as of a segment boundary
//!   streams/000000000000002a   one stream's bytes (by internal id)
//! ```

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

pub fn checkpoint_path(data: &Path) -> PathBuf {
    data.join("checkpoint")
}

pub fn streams_dir(data: &Path) -> PathBuf {
    data.join("streams")
}

pub fn stream_file(data: &Path, id: u64) -> PathBuf {
    streams_dir(data).join(format!("{id:016x}"))
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
