//! The local disk as a cache of the bucket: a claim's replay laid out as
//! the local log, so the store's own recovery rebuilds every stream from
//! it, as after a restart.
//!
//! Whatever the data directory held before is dropped first: it may hold
//! commits that never reached the bucket (written locally, then fenced or
//! killed before their put settled), which no reader may ever see, and
//! another owner may have acknowledged more since. The bucket is the truth.

use std::io::{self, Write};
use std::path::Path;

use bytes::Bytes;

use crate::store::layout;

/// A laid-out segment holds at most this much (log positions are 32-bit
/// within a segment); the next frames go to the next segment.
pub const SEGMENT_BYTES: u64 = 1 << 30;

/// Replaces the log, checkpoints and stream files under `data` with log
/// segments holding `frames` in order (a new one past [`SEGMENT_BYTES`];
/// one group commit's frames never span two). Returns the bytes laid out.
pub fn lay_out(data: &Path, frames: &[Bytes]) -> io::Result<u64> {
    lay_out_in(data, frames, SEGMENT_BYTES)
}

/// [`lay_out`] with segments of `segment_bytes` at most.
fn lay_out_in(data: &Path, frames: &[Bytes], segment_bytes: u64) -> io::Result<u64> {
    for dir in [
        layout::wal_dir(data),
        layout::checkpoints_dir(data),
        layout::streams_dir(data),
    ] {
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    match std::fs::remove_file(layout::checkpoint_path(data)) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::create_dir_all(layout::wal_dir(data))?;
    let open = |segment| -> io::Result<_> {
        Ok(io::BufWriter::new(std::fs::File::create(
            layout::segment_path(data, segment),
        )?))
    };
    let close = |file: io::BufWriter<std::fs::File>| {
        file.into_inner().map_err(|e| e.into_error())?.sync_all()
    };
    let (mut segment, mut in_segment, mut bytes) = (0, 0u64, 0u64);
    let mut file = open(segment)?;
    for f in frames {
        let len = f.len() as u64;
        if in_segment > 0 && in_segment + len > segment_bytes {
            close(file)?;
            segment += 1;
            file = open(segment)?;
            in_segment = 0;
        }
        file.write_all(f)?;
        in_segment += len;
        bytes += len;
    }
    close(file)?;
    layout::sync_dir(&layout::wal_dir(data))?;
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_replay_replaces_what_the_directory_held() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        std::fs::create_dir_all(layout::wal_dir(data)).unwrap();
        std::fs::write(layout::segment_path(data, 7), b"stale").unwrap();
        std::fs::create_dir_all(layout::checkpoints_dir(data)).unwrap();
        std::fs::write(layout::checkpoints_dir(data).join("base-1"), b"x").unwrap();
        std::fs::write(data.join("keys.json"), b"{}").unwrap();
        let n = lay_out(
            data,
            &[Bytes::from_static(b"ab"), Bytes::from_static(b"cd")],
        )
        .unwrap();
        assert_eq!(n, 4);
        assert_eq!(
            std::fs::read(layout::segment_path(data, 0)).unwrap(),
            b"abcd"
        );
        assert!(!layout::segment_path(data, 7).exists());
        assert!(!layout::checkpoints_dir(data).exists());
        // What is not the log's stays.
        assert!(data.join("keys.json").exists());
    }

    #[test]
    fn a_long_replay_goes_into_several_segments() {
        let dir = tempfile::tempdir().unwrap();
        let five = Bytes::from_static(b"12345");
        let small = Bytes::from_static(b"xyz");
        let n = lay_out_in(dir.path(), &[five.clone(), five.clone(), small], 10).unwrap();
        assert_eq!(n, 13);
        let read = |s| std::fs::read(layout::segment_path(dir.path(), s)).unwrap();
        assert_eq!(read(0), b"1234512345");
        assert_eq!(read(1), b"xyz");
        assert!(!layout::segment_path(dir.path(), 2).exists());
    }
}
