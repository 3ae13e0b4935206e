//! The stream table the writer thread owns, and the steps that change it.
//! Recovery drives the same steps from the log, so a replayed stream is
//! built exactly as the live one was.

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use super::FastMap;

use super::layout;
use super::record::{CreateRecord, Record};
use super::saved::{Extent, SavedStream};
use super::view::{Disk, StreamView, Tail};
use super::warm::Warm;
use crate::core::stream::{AppendEffect, StreamCore};
use crate::core::Millis;

pub struct Entry {
    pub core: StreamCore,
    pub view: Arc<StreamView>,
}

/// Where a record's payload is in the log.
#[derive(Clone, Copy, Debug)]
pub struct LogPos {
    pub segment: u64,
    pub pos: u64,
}

impl Entry {
    /// Applies a decided append: its bytes to the hot tail (logged at `at`),
    /// its effect to the core. Returns the extent it made, if any.
    pub fn apply(&mut self, effect: &AppendEffect, payload: &Bytes, at: LogPos) -> Option<Extent> {
        let extent = (!payload.is_empty()).then(|| Extent {
            segment: at.segment,
            pos: u32::try_from(at.pos).expect("segments are rotated before 4 GiB"),
            len: payload.len() as u32,
            start: effect.start,
        });
        if let Some(e) = extent {
            self.view.warm.lock().push(e, payload);
        }
        self.core.apply(effect);
        extent
    }

    /// The stream as a checkpoint keeps it.
    pub fn saved(&self) -> SavedStream {
        let warm = self.view.warm.lock();
        SavedStream {
            core: self.core.clone(),
            file_len: warm.file_len(),
            extents: warm.extents().to_vec(),
        }
    }

    pub fn tail(&self) -> Tail {
        Tail {
            next: self.core.len,
            closed: self.core.closed,
            gone: false,
            retained: self.core.retained,
        }
    }
}

pub struct Engine {
    pub data: PathBuf,
    /// Boxed: a map's slack (up to half its slots, at a power of two) then
    /// costs a pointer per slot, not a whole entry.
    pub entries: FastMap<Arc<str>, Box<Entry>>,
    pub paths_by_id: FastMap<u64, Arc<str>>,
    pub next_id: u64,
    /// The files, log segments and object storage streams read through.
    pub disk: Arc<Disk>,
    /// Per log segment: the extents that point into it. A segment with
    /// none (and older than the last checkpoint) can be deleted.
    pub pins: FastMap<u64, u64>,
}

impl Engine {
    pub fn new(data: PathBuf, next_id: u64, disk: Arc<Disk>) -> Self {
        Engine {
            data,
            entries: FastMap::default(),
            paths_by_id: FastMap::default(),
            next_id,
            disk,
            pins: FastMap::default(),
        }
    }

    /// Adds a stream from its state (checkpoint) without touching its bytes.
    pub fn restore(&mut self, saved: SavedStream, now: Millis) {
        for e in &saved.extents {
            *self.pins.entry(e.segment).or_default() += 1;
        }
        self.insert(saved.core, Warm::new(saved.file_len, saved.extents), now);
    }

    fn insert(&mut self, core: StreamCore, warm: Warm, now: Millis) {
        let view = Arc::new(StreamView::new(&core, warm, now, Arc::clone(&self.disk)));
        let gone = view.forget_sealed(core.sealed);
        self.unpin(&gone);
        self.next_id = self.next_id.max(core.id + 1);
        self.paths_by_id.insert(core.id, core.path.clone());
        self.entries
            .insert(core.path.clone(), Box::new(Entry { core, view }));
    }

    /// Creates a stream with its initial body, logged at `at`. No file is
    /// made: its bytes stay in the log until it outgrows it (see `warm`).
    pub fn create(&mut self, rec: &CreateRecord, payload: &Bytes, now: Millis, at: LogPos) {
        let core = StreamCore::new(
            rec.id,
            rec.path.as_str().into(),
            rec.incarnation.as_str().into(),
            rec.config.clone(),
            rec.created_at,
        );
        // A stale file of a create that was lost in a crash (ids are given
        // again then) must not show: the first promotion writes from 0.
        self.disk.files.forget(rec.id);
        self.insert(core, Warm::new(0, Vec::new()), now);
        self.append(&rec.path, &rec.initial, payload, at);
        // Not yet visible to readers (the writer registers it after commit).
        let entry = &self.entries[rec.path.as_str()];
        entry.view.publish(entry.tail());
    }

    /// Applies an append to the stream's state and keeps where its bytes are.
    pub fn append(&mut self, path: &str, effect: &AppendEffect, payload: &Bytes, at: LogPos) {
        let entry = self
            .entries
            .get_mut(path)
            .expect("appends name a live stream");
        if let Some(e) = entry.apply(effect, payload, at) {
            *self.pins.entry(e.segment).or_default() += 1;
        }
    }

    /// Forgets extents that no stream needs any more.
    pub fn unpin(&mut self, extents: &[Extent]) {
        for e in extents {
            if let Some(n) = self.pins.get_mut(&e.segment) {
                *n -= 1;
                if *n == 0 {
                    self.pins.remove(&e.segment);
                }
            }
        }
    }

    /// Removes a stream from the table. Its file stays until the delete is
    /// durable ([`Engine::remove_file`]); open handles keep reading it.
    pub fn delete(&mut self, path: &str) -> Option<Box<Entry>> {
        let entry = self.entries.remove(path)?;
        self.paths_by_id.remove(&entry.core.id);
        let extents = entry.view.warm.lock().extents().to_vec();
        self.unpin(&extents);
        Some(entry)
    }

    /// Unlinks a deleted stream's file.
    pub fn remove_file(data: &std::path::Path, files: &super::files::StreamFiles, id: u64) {
        files.forget(id);
        if let Err(e) = std::fs::remove_file(layout::stream_file(data, id)) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(error = %e, id, "could not remove a deleted stream's file");
            }
        }
    }

    pub fn entry_by_id(&mut self, id: u64) -> Option<&mut Entry> {
        let path = self.paths_by_id.get(&id)?;
        self.entries.get_mut(path).map(|e| &mut **e)
    }

    /// Replays one logged record (recovery), whose payload is at `at`.
    pub fn replay(&mut self, record: Record, now: Millis, at: LogPos) -> io::Result<()> {
        match record {
            Record::Create(rec, payload) => {
                if let Some(old) = self.entries.get(rec.path.as_str()) {
                    let old = old.core.path.clone();
                    self.delete(&old);
                }
                self.create(&rec, &payload, now, at);
                Ok(())
            }
            Record::Append {
                id,
                effect,
                payload,
            } => {
                let Some(path) = self.paths_by_id.get(&id).cloned() else {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("append to unknown stream {id}"),
                    ));
                };
                let len = self.entries[&path].core.len;
                if effect.start != len {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "stream {id}: logged append at {} but the stream ends at {len}",
                            effect.start
                        ),
                    ));
                }
                self.append(&path, &effect, &payload, at);
                Ok(())
            }
            Record::Sealed { id, through } => {
                if let Some(entry) = self.entry_by_id(id) {
                    entry.core.sealed = entry.core.sealed.max(through);
                    let gone = entry.view.forget_sealed(through);
                    self.unpin(&gone);
                }
                Ok(())
            }
            Record::Snapshot { id, meta } => {
                if let Some(entry) = self.entry_by_id(id) {
                    entry.core.snapshot = Some(Box::new(meta));
                }
                Ok(())
            }
            Record::Visibility { id, public } => {
                if let Some(entry) = self.entry_by_id(id) {
                    entry.core.config.public = public;
                    entry.view.set_public(public);
                }
                Ok(())
            }
            Record::Retain { id, offset } => {
                if let Some(entry) = self.entry_by_id(id) {
                    entry.core.retained = entry.core.retained.max(offset);
                }
                Ok(())
            }
            Record::Delete { id, .. } => {
                if let Some(path) = self.paths_by_id.get(&id).cloned() {
                    self.delete(&path);
                }
                Ok(())
            }
        }
    }
}
#[cfg(test)]
mod size_probe {
    #[test]
    fn sizes() {
        eprintln!("StreamView {}", std::mem::size_of::<super::StreamView>());
        eprintln!("Entry {}", std::mem::size_of::<super::Entry>());
        eprintln!(
            "StreamCore {}",
            std::mem::size_of::<crate::core::stream::StreamCore>()
        );
        eprintln!("Warm {}", std::mem::size_of::<super::Warm>());
        eprintln!("HeaderMap {}", std::mem::size_of::<http::HeaderMap>());
        eprintln!(
            "TailWatch {}",
            std::mem::size_of::<crate::store::tail_watch::TailWatch>()
        );
        eprintln!(
            "SnapshotMeta {}",
            std::mem::size_of::<crate::core::snapshot::SnapshotMeta>()
        );
        eprintln!(
            "StreamConfig {}",
            std::mem::size_of::<crate::core::config::StreamConfig>()
        );
    }
}
