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

use crate::store::layout;

/// A laid-out segment holds at most this much (log positions are 32-bit
/// within a segment); the next commit goes to the next segment.
pub const SEGMENT_BYTES: u64 = 1 << 30;

/// The local log being laid out from a replay, one group commit at a
/// time (a replay is never held in memory whole).
pub struct LocalLog {
    data: std::path::PathBuf,
    segment_bytes: u64,
    segment: u64,
    in_segment: u64,
    bytes: u64,
    file: io::BufWriter<std::fs::File>,
}

impl LocalLog {
    /// Drops the log, checkpoints and stream files under `data` and opens
    /// the first segment of the new log.
    pub fn begin(data: &Path) -> io::Result<LocalLog> {
        Self::begin_in(data, SEGMENT_BYTES)
    }

    fn begin_in(data: &Path, segment_bytes: u64) -> io::Result<LocalLog> {
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
        Ok(LocalLog {
            data: data.to_owned(),
            segment_bytes,
            segment: 0,
            in_segment: 0,
            bytes: 0,
            file: open_segment(data, 0)?,
        })
    }

    /// Appends one group commit's frames (to a new segment past
    /// [`SEGMENT_BYTES`]; one commit never spans two).
    pub fn push(&mut self, frames: &[u8]) -> io::Result<()> {
        let len = frames.len() as u64;
        if self.in_segment > 0 && self.in_segment + len > self.segment_bytes {
            self.segment += 1;
            let next = open_segment(&self.data, self.segment)?;
            close(std::mem::replace(&mut self.file, next))?;
            self.in_segment = 0;
        }
        self.file.write_all(frames)?;
        self.in_segment += len;
        self.bytes += len;
        Ok(())
    }

    /// Makes the log durable; returns the bytes laid out.
    pub fn finish(self) -> io::Result<u64> {
        close(self.file)?;
        layout::sync_dir(&layout::wal_dir(&self.data))?;
        Ok(self.bytes)
    }
}

fn open_segment(data: &Path, segment: u64) -> io::Result<io::BufWriter<std::fs::File>> {
    Ok(io::BufWriter::new(std::fs::File::create(
        layout::segment_path(data, segment),
    )?))
}

fn close(file: io::BufWriter<std::fs::File>) -> io::Result<()> {
    file.into_inner().map_err(|e| e.into_error())?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn lay_out(data: &Path, frames: &[Bytes]) -> io::Result<u64> {
        lay_out_in(data, frames, SEGMENT_BYTES)
    }

    fn lay_out_in(data: &Path, frames: &[Bytes], segment_bytes: u64) -> io::Result<u64> {
        let mut log = LocalLog::begin_in(data, segment_bytes)?;
        for f in frames {
            log.push(f)?;
        }
        log.finish()
    }

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
