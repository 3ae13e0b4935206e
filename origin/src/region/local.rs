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

/// Replaces the log, checkpoints and stream files under `data` with one
/// log segment holding `frames` in order. Returns the bytes laid out.
pub fn lay_out(data: &Path, frames: &[Bytes]) -> io::Result<u64> {
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
    let mut file = std::io::BufWriter::new(std::fs::File::create(layout::segment_path(data, 0))?);
    let mut bytes = 0u64;
    for f in frames {
        file.write_all(f)?;
        bytes += f.len() as u64;
    }
    file.into_inner().map_err(|e| e.into_error())?.sync_all()?;
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
}
