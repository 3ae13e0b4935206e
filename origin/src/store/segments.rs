//! The log segments still on disk, open for reads: a small stream's bytes
//! are read from the segment that logged them (see `warm`).
//!
//! A segment is kept while any stream's extents point into it, and opened
//! once: readers take a handle under a read lock and read without one, so a
//! segment deleted meanwhile (its file unlinked) still reads through the
//! handle. The number of segments is bounded by the log's retention
//! (`StoreConfig::log_retain_bytes`), so this map is too.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use parking_lot::RwLock;

use super::layout;
use super::saved::Extent;

#[derive(Default)]
pub struct Segments {
    open: RwLock<BTreeMap<u64, Arc<File>>>,
}

impl Segments {
    /// Opens every segment in the data directory.
    pub fn open_all(data: &Path, numbers: &[u64]) -> io::Result<Segments> {
        let mut open = BTreeMap::new();
        for &n in numbers {
            open.insert(n, Arc::new(File::open(layout::segment_path(data, n))?));
        }
        Ok(Segments {
            open: RwLock::new(open),
        })
    }

    /// A segment the writer just started (its file, shared).
    pub fn add(&self, number: u64, file: Arc<File>) {
        self.open.write().insert(number, file);
    }

    /// A segment that was deleted.
    pub fn remove(&self, number: u64) {
        self.open.write().remove(&number);
    }

    pub fn get(&self, number: u64) -> Option<Arc<File>> {
        self.open.read().get(&number).cloned()
    }

    /// Reads the pieces, in order, appending them to `out`.
    pub fn read_into(&self, pieces: &[Extent], out: &mut Vec<u8>) -> io::Result<()> {
        let mut file: Option<(u64, Arc<File>)> = None;
        for piece in pieces {
            let handle = match &file {
                Some((n, f)) if *n == piece.segment => Arc::clone(f),
                _ => {
                    let f = self.get(piece.segment).ok_or_else(|| {
                        io::Error::other(format!(
                            "log segment {} is gone but still referenced",
                            piece.segment
                        ))
                    })?;
                    file = Some((piece.segment, Arc::clone(&f)));
                    f
                }
            };
            let at = out.len();
            out.resize(at + piece.len as usize, 0);
            handle.read_exact_at(&mut out[at..], u64::from(piece.pos))?;
        }
        Ok(())
    }
}
