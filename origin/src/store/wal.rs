//! The write-ahead log's files: one open segment that the writer appends
//! batches to and syncs, rotated at checkpoints.
//!
//! A segment is filled with zeros ahead of the writer by a helper thread
//! ([`Prefill`]). Overwriting blocks that are already allocated and synced
//! lets `fdatasync` flush just the data: a sync that also extends the file
//! must commit the new size and extents through the filesystem's journal,
//! which measured 1.5–6× slower and about twice the CPU per sync on this
//! kind of machine, and every append waits for a sync. Recovery reads the
//! zeros after the last frame as the log's clean end (`record::decode`).

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex};

use super::layout;

/// Zeros are written ahead once fewer than this many prepared bytes are left...
const PREFILL_LOW_WATER: u64 = 16 * 1024 * 1024;
/// ...this many at a time...
const PREFILL_STEP: u64 = 16 * 1024 * 1024;
/// ...in pieces of at most this size, each synced, so the writer (which
/// waits only when it reaches bytes being filled) waits at most for one
/// piece...
const PREFILL_PIECE: usize = 1024 * 1024;
/// ...starting with one this small, for the first batch of a new segment.
const PREFILL_FIRST_PIECE: usize = 64 * 1024;

pub struct Wal {
    data: PathBuf,
    segment: u64,
    file: Arc<File>,
    /// Bytes written to the open segment.
    pub written: u64,
    /// Whether a batch is synced before it is acknowledged (see `Durability`).
    pub sync: bool,
    /// Bytes of a segment worth filling ahead (and one piece more): a
    /// checkpoint rotates the segment once it holds this much, so zeros past
    /// it are waste.
    pub fill_limit: u64,
    prefill: Arc<Prefill>,
}

/// How far the open segment is filled with synced zeros.
#[derive(Default)]
struct Prefill {
    state: Mutex<PrefillState>,
    done: Condvar,
}

#[derive(Default)]
struct PrefillState {
    /// Every byte before this is data or synced zeros.
    ready: u64,
    /// Whether a fill is running.
    filling: bool,
    /// A fill failed (a full disk, say): the log grows as it is written.
    failed: bool,
}

impl Wal {
    /// Starts a new, empty segment.
    pub fn create(data: &Path, segment: u64) -> io::Result<Wal> {
        // Numbers only grow (recovery starts past every segment there), so a
        // file at this one is what an attempt that failed after making it
        // (a full disk) left: empty, and made again.
        let file = OpenOptions::new()
            .create(true)
            .truncate(true)
            .read(true)
            .write(true)
            .open(layout::segment_path(data, segment))?;
        layout::sync_dir(&layout::wal_dir(data))?;
        Ok(Wal {
            data: data.to_owned(),
            segment,
            file: Arc::new(file),
            written: 0,
            sync: true,
            fill_limit: u64::MAX,
            prefill: Arc::default(),
        })
    }

    /// Starts filling the segment ahead (with syncs on), before the first
    /// batch: that batch then waits for one piece at most instead of
    /// extending the file.
    pub fn begin(&self) {
        self.prefill_ahead(0);
    }

    pub fn segment(&self) -> u64 {
        self.segment
    }

    /// The open segment's file (readers read small streams' bytes from it).
    pub fn file(&self) -> Arc<File> {
        Arc::clone(&self.file)
    }

    /// Bytes the writer may add without growing the file: prepared past
    /// what is written (zeros, synced; without syncs, `async` durability,
    /// blocks allocated by `fallocate`, and no prefill runs).
    pub fn room(&self) -> u64 {
        self.prefill.state.lock().ready.saturating_sub(self.written)
    }

    /// Makes room for `bytes` more (see [`Wal::room`]): waits for a fill
    /// that runs, else fills here. A full disk answers the error and leaves
    /// the log as it was (zeros past its end are its clean end), so the
    /// writer can refuse what does not fit instead of stopping; once space
    /// returns, the next call fills again.
    pub fn prepare(&self, bytes: u64) -> io::Result<()> {
        if !self.sync {
            return self.allocate(bytes);
        }
        let end = self.written.saturating_add(bytes);
        let mut state = self.prefill.state.lock();
        while state.filling && end > state.ready {
            self.prefill.done.wait(&mut state);
        }
        if state.ready >= end {
            return Ok(());
        }
        let from = state.ready.max(self.written);
        let to = end.saturating_add(PREFILL_PIECE as u64);
        drop(state);
        let zeros = vec![0u8; PREFILL_PIECE];
        let mut at = from;
        let filled = loop {
            if at >= to {
                break self.file.sync_data();
            }
            let n = (to - at).min(PREFILL_PIECE as u64) as usize;
            if let Err(e) = self.file.write_all_at(&zeros[..n], at) {
                break Err(e);
            }
            at += n as u64;
        };
        let mut state = self.prefill.state.lock();
        match filled {
            Ok(()) => {
                state.ready = state.ready.max(to);
                state.failed = false;
                Ok(())
            }
            Err(e) => {
                state.failed = true;
                Err(e)
            }
        }
    }

    /// [`Wal::prepare`] without syncs: the file's blocks are allocated (a
    /// step past what is asked, so a batch is cut for it once per 16 MiB of
    /// log), and writing into them cannot find the disk full. A full disk
    /// answers the error and allocates nothing.
    fn allocate(&self, bytes: u64) -> io::Result<()> {
        let end = self.written.saturating_add(bytes);
        let mut state = self.prefill.state.lock();
        if state.ready >= end {
            return Ok(());
        }
        let from = state.ready.max(self.written);
        let to = end.saturating_add(PREFILL_STEP);
        match rustix::fs::fallocate(
            &*self.file,
            rustix::fs::FallocateFlags::empty(),
            from,
            to - from,
        ) {
            Ok(()) => {}
            // A filesystem that cannot allocate ahead: the log grows as it
            // is written there, as it did before (a full disk then stops the
            // process; README, "Durability").
            Err(rustix::io::Errno::OPNOTSUPP) => {
                tracing::warn!(
                    "the log's filesystem cannot allocate ahead; a full disk will stop the origin"
                );
                state.ready = u64::MAX;
                return Ok(());
            }
            Err(e) => return Err(e.into()),
        }
        state.ready = to;
        Ok(())
    }

    /// Appends a batch of frames and makes it durable.
    pub fn append_durably(&mut self, frames: &[u8]) -> io::Result<()> {
        let end = self.written + frames.len() as u64;
        self.prefill_ahead(end);
        self.file.write_all_at(frames, self.written)?;
        if self.sync {
            self.file.sync_data()?;
        }
        self.written = end;
        Ok(())
    }

    /// Makes sure the bytes up to `end` can be written: waits while a fill
    /// runs over them, and starts the next fill (after `end`, so it never
    /// meets the batch being written) when few prepared bytes are left.
    fn prefill_ahead(&self, end: u64) {
        let mut state = self.prefill.state.lock();
        while state.filling && end > state.ready {
            self.prefill.done.wait(&mut state);
        }
        if !self.sync || state.failed || state.filling || state.ready >= end + PREFILL_LOW_WATER {
            return;
        }
        let from = state.ready.max(end);
        let limit = self.fill_limit.saturating_add(PREFILL_PIECE as u64);
        let to = from.saturating_add(PREFILL_STEP).min(limit);
        if from >= to {
            return;
        }
        state.filling = true;
        drop(state);
        let (file, prefill) = (Arc::clone(&self.file), Arc::clone(&self.prefill));
        let spawned = std::thread::Builder::new()
            .name("wal-prefill".into())
            .spawn(move || prefill.fill(&file, from, to));
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "could not start filling the log ahead; it grows as written");
            let mut state = self.prefill.state.lock();
            state.filling = false;
            state.failed = true;
        }
    }

    /// Closes the open segment (already synced) and starts the next; returns
    /// the new segment's number.
    pub fn rotate(&mut self) -> io::Result<u64> {
        let mut next = Wal::create(&self.data, self.segment + 1)?;
        next.sync = self.sync;
        next.fill_limit = self.fill_limit;
        next.begin();
        *self = next;
        Ok(self.segment)
    }
}

impl Prefill {
    /// Writes zeros over `[from, to)` piece by piece, each synced before the
    /// writer may use it. The writer never writes past `ready` while this
    /// runs, and this starts past the writer's end, so the two never meet.
    fn fill(&self, file: &File, from: u64, to: u64) {
        let zeros = vec![0u8; PREFILL_PIECE];
        let mut at = from;
        let mut piece = PREFILL_FIRST_PIECE;
        while at < to {
            let n = (to - at).min(piece as u64);
            piece = (piece * 2).min(PREFILL_PIECE);
            let written = file
                .write_all_at(&zeros[..n as usize], at)
                .and_then(|()| file.sync_data());
            let mut state = self.state.lock();
            match written {
                Ok(()) => at += n,
                Err(e) => {
                    tracing::warn!(error = %e, "could not fill the log ahead; it grows as written");
                    state.failed = true;
                }
            }
            state.ready = at; // `from` is at or past `ready`: all below it is data or zeros
            state.filling = !state.failed && at < to;
            let go_on = state.filling;
            drop(state);
            self.done.notify_all();
            if !go_on {
                return;
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::record;

    /// Batches written while fills run read back in order, followed by
    /// nothing but zeros, which decode as the log's clean end.
    #[test]
    fn batches_land_between_fills_and_zeros_end_the_log() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(layout::wal_dir(dir.path())).unwrap();
        let mut wal = Wal::create(dir.path(), 1).unwrap();
        let mut expected = Vec::new();
        // Enough batches to pass several fills.
        for i in 0..200u32 {
            let batch = vec![(i % 251) as u8 + 1; 200 * 1024];
            wal.append_durably(&batch).unwrap();
            expected.extend_from_slice(&batch);
        }
        let bytes = std::fs::read(layout::segment_path(dir.path(), 1)).unwrap();
        assert!(bytes.len() >= expected.len());
        assert_eq!(&bytes[..expected.len()], &expected[..]);
        let rest = &bytes[expected.len()..];
        assert!(rest.iter().all(|b| *b == 0), "only zeros after the data");
        assert!(!rest.is_empty(), "the segment was filled ahead");
        assert!(matches!(record::decode(rest), Ok(None)));
    }

    /// `begin` fills before the first batch, which then overwrites zeros.
    #[test]
    fn begin_fills_before_the_first_batch() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(layout::wal_dir(dir.path())).unwrap();
        let mut wal = Wal::create(dir.path(), 1).unwrap();
        wal.begin();
        wal.append_durably(b"abc").unwrap();
        let bytes = std::fs::read(layout::segment_path(dir.path(), 1)).unwrap();
        assert!(bytes.len() >= PREFILL_FIRST_PIECE, "{}", bytes.len());
        assert_eq!(&bytes[..3], b"abc");
        assert!(bytes[3..].iter().all(|b| *b == 0));
    }

    /// Nothing is filled past the fill limit (a checkpoint's rotation point).
    #[test]
    fn fills_stop_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(layout::wal_dir(dir.path())).unwrap();
        let mut wal = Wal::create(dir.path(), 1).unwrap();
        wal.fill_limit = 0; // one piece, then no more
        wal.begin();
        for _ in 0..20 {
            wal.append_durably(&[7u8; 100 * 1024]).unwrap();
        }
        let len = std::fs::metadata(layout::segment_path(dir.path(), 1))
            .unwrap()
            .len();
        // The batches went past the limit; no zeros were written after them.
        assert_eq!(len, 2000 * 1024);
    }

    /// Without syncs (async durability) nothing is filled ahead: the point
    /// of filling is cheaper syncs.
    #[test]
    fn async_logs_are_not_filled() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(layout::wal_dir(dir.path())).unwrap();
        let mut wal = Wal::create(dir.path(), 1).unwrap();
        wal.sync = false;
        wal.append_durably(b"abc").unwrap();
        let len = std::fs::metadata(layout::segment_path(dir.path(), 1))
            .unwrap()
            .len();
        assert_eq!(len, 3);
    }
}
