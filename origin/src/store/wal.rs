//! The write-ahead log's files: one open segment that the writer appends
//! batches to and syncs, rotated at checkpoints.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use super::layout;

pub struct Wal {
    data: PathBuf,
    segment: u64,
    file: File,
    /// Bytes written to the open segment.
    pub written: u64,
    /// Whether a batch is synced before it is acknowledged (see `Durability`).
    pub sync: bool,
}

impl Wal {
    /// Starts a new, empty segment.
    pub fn create(data: &Path, segment: u64) -> io::Result<Wal> {
        let file = OpenOptions::new()
            .create_new(true)
            .append(true)
            .open(layout::segment_path(data, segment))?;
        layout::sync_dir(&layout::wal_dir(data))?;
        Ok(Wal {
            data: data.to_owned(),
            segment,
            file,
            written: 0,
            sync: true,
        })
    }

    pub fn segment(&self) -> u64 {
        self.segment
    }

    /// Appends a batch of frames and makes it durable.
    pub fn append_durably(&mut self, frames: &[u8]) -> io::Result<()> {
        self.file.write_all(frames)?;
        if self.sync {
            self.file.sync_data()?;
        }
        self.written += frames.len() as u64;
        Ok(())
    }

    /// Closes the open segment (already synced) and starts the next; returns
    /// the new segment's number.
    pub fn rotate(&mut self) -> io::Result<u64> {
        let mut next = Wal::create(&self.data, self.segment + 1)?;
        next.sync = self.sync;
        *self = next;
        Ok(self.segment)
    }
}

/// The segment numbers present, in order.
pub fn list_segments(data: &Path) -> io::Result<Vec<u64>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(layout::wal_dir(data))? {
        if let Some(n) = entry?.file_name().to_str().and_then(layout::parse_segment) {
            out.push(n);
        }
    }
    out.sort_unstable();
    Ok(out)
}

/// Removes the segments before `keep_from`, which a checkpoint made useless.
pub fn remove_segments_before(data: &Path, keep_from: u64) -> io::Result<()> {
    for n in list_segments(data)? {
        if n < keep_from {
            std::fs::remove_file(layout::segment_path(data, n))?;
        }
    }
    Ok(())
}
