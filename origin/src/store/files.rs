//! Streams' own files, opened on demand through a bounded set of open
//! handles, so the number of descriptors does not grow with the number of
//! streams (an origin holds a million; the limit it runs under is a few
//! thousand).
//!
//! At most [`StreamFiles::cap`] handles are kept; at the cap, opening
//! another closes one kept handle picked by the map's (randomly seeded)
//! order. A reader holds its handle only while it reads, so the descriptors
//! in use are at most the cap plus the reads in flight. `EMFILE`/`ENFILE`
//! (descriptors used elsewhere: connections) closes every kept handle and
//! tries once more, then reports the error (the request answers 503 +
//! `Retry-After`: see [`is_out_of_descriptors`] and `http::error`).

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;

use super::{layout, FastMap};

pub struct StreamFiles {
    data: PathBuf,
    cap: usize,
    open: Mutex<FastMap<u64, Arc<File>>>,
}

/// How an open may create the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Open {
    /// The file must exist (reads, punching holes).
    Existing,
    /// Create it if missing (the first promotion).
    Create,
}

impl StreamFiles {
    pub fn new(data: &Path, cap: usize) -> Self {
        StreamFiles {
            data: data.to_owned(),
            cap: cap.max(1),
            open: Mutex::new(FastMap::default()),
        }
    }

    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Handles kept open now.
    pub fn kept(&self) -> usize {
        self.open.lock().len()
    }

    /// The stream's file, from the kept handles or opened (and kept).
    pub fn get(&self, id: u64, how: Open) -> io::Result<Arc<File>> {
        if let Some(f) = self.open.lock().get(&id) {
            return Ok(Arc::clone(f));
        }
        let file = match self.open_file(id, how) {
            Err(e) if is_out_of_descriptors(&e) => {
                self.open.lock().clear();
                self.open_file(id, how)?
            }
            other => other?,
        };
        let file = Arc::new(file);
        let mut open = self.open.lock();
        if open.len() >= self.cap {
            if let Some(victim) = open.keys().next().copied() {
                open.remove(&victim);
            }
        }
        open.insert(id, Arc::clone(&file));
        Ok(file)
    }

    /// Forgets a deleted stream's handle.
    pub fn forget(&self, id: u64) {
        self.open.lock().remove(&id);
    }

    fn open_file(&self, id: u64, how: Open) -> io::Result<File> {
        let path = layout::stream_file(&self.data, id);
        let mut opts = OpenOptions::new();
        opts.read(true).write(true);
        if how == Open::Create {
            opts.create(true);
        }
        match opts.open(&path) {
            Err(e) if how == Open::Create && e.kind() == io::ErrorKind::NotFound => {
                // Its fan-out folder is made on first use.
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                opts.open(&path)
            }
            other => other,
        }
    }
}

/// Whether `e` says the process (`EMFILE`) or the system (`ENFILE`) has no
/// descriptor free: a state that passes, answered `503` + `Retry-After`.
pub fn is_out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE) | Some(libc::ENFILE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn handles_stay_under_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let files = StreamFiles::new(dir.path(), 4);
        for id in 0..20 {
            files.get(id, Open::Create).unwrap();
            assert!(files.kept() <= 4);
        }
        // A file closed by the cap opens again.
        for id in 0..20 {
            files.get(id, Open::Existing).unwrap();
        }
        assert!(files.kept() <= 4);
        assert_eq!(
            files.get(99, Open::Existing).unwrap_err().kind(),
            io::ErrorKind::NotFound
        );
    }
}
