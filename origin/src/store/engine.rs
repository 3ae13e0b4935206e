//! The stream table the writer thread owns, and the steps that change it.
//! Recovery drives the same steps from the log, so a replayed stream is
//! built exactly as the live one was.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use super::FastMap;

use super::cold::Cold;
use super::layout;
use super::record::{CreateRecord, Record};
use super::view::{StreamView, Tail};
use crate::core::stream::{AppendEffect, StreamCore};
use crate::core::Millis;

pub struct Entry {
    pub core: StreamCore,
    pub file: Arc<File>,
    pub view: Arc<StreamView>,
}

impl Entry {
    /// Applies a decided append: its bytes to the hot tail, its effect to
    /// the core.
    pub fn apply(&mut self, effect: &AppendEffect, payload: &Bytes) {
        self.view.buffer.lock().push(payload);
        self.core.apply(effect);
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
    pub entries: FastMap<String, Entry>,
    pub paths_by_id: FastMap<u64, String>,
    pub next_id: u64,
    /// Where sealed bytes are read from (none without object storage).
    pub cold: Option<Arc<Cold>>,
}

impl Engine {
    pub fn new(data: PathBuf, next_id: u64, cold: Option<Arc<Cold>>) -> Self {
        Engine {
            data,
            entries: FastMap::default(),
            paths_by_id: FastMap::default(),
            next_id,
            cold,
        }
    }

    fn open_file(&self, id: u64, fresh: bool) -> io::Result<File> {
        let mut opts = OpenOptions::new();
        opts.read(true).write(true).create(true);
        if fresh {
            opts.truncate(true);
        }
        opts.open(layout::stream_file(&self.data, id))
    }

    /// Adds a stream from its state (checkpoint) without touching its bytes.
    pub fn restore(&mut self, core: StreamCore, now: Millis) -> io::Result<()> {
        let file = Arc::new(self.open_file(core.id, false)?);
        self.insert(core, file, now);
        Ok(())
    }

    fn insert(&mut self, core: StreamCore, file: Arc<File>, now: Millis) {
        let view = Arc::new(StreamView::new(
            &core,
            Arc::clone(&file),
            now,
            self.cold.clone(),
        ));
        self.next_id = self.next_id.max(core.id + 1);
        self.paths_by_id.insert(core.id, core.path.clone());
        self.entries
            .insert(core.path.clone(), Entry { core, file, view });
    }

    /// Creates a stream with its initial body (buffered, see [`TailBuffer`]).
    ///
    /// [`TailBuffer`]: super::tail_buffer::TailBuffer
    pub fn create(&mut self, rec: &CreateRecord, payload: &Bytes, now: Millis) -> io::Result<()> {
        let file = Arc::new(self.open_file(rec.id, true)?);
        let core = StreamCore::new(
            rec.id,
            rec.path.clone(),
            rec.incarnation.clone(),
            rec.config.clone(),
            rec.created_at,
        );
        self.insert(core, file, now);
        self.append(&rec.path, &rec.initial, payload);
        // Not yet visible to readers (the writer registers it after commit).
        let entry = &self.entries[&rec.path];
        entry.view.publish(entry.tail());
        Ok(())
    }

    /// Applies an append to the stream's state and buffers its bytes.
    pub fn append(&mut self, path: &str, effect: &AppendEffect, payload: &Bytes) {
        self.entries
            .get_mut(path)
            .expect("appends name a live stream")
            .apply(effect, payload);
    }

    /// Removes a stream from the table. Its file stays until the delete is
    /// durable ([`Engine::remove_file`]); open handles keep reading it.
    pub fn delete(&mut self, path: &str) -> Option<Entry> {
        let entry = self.entries.remove(path)?;
        self.paths_by_id.remove(&entry.core.id);
        Some(entry)
    }

    /// Unlinks a deleted stream's file.
    pub fn remove_file(data: &std::path::Path, id: u64) {
        if let Err(e) = std::fs::remove_file(layout::stream_file(data, id)) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(error = %e, id, "could not remove a deleted stream's file");
            }
        }
    }

    pub fn entry_by_id(&mut self, id: u64) -> Option<&mut Entry> {
        let path = self.paths_by_id.get(&id)?;
        self.entries.get_mut(path)
    }

    /// Replays one logged record (recovery).
    pub fn replay(&mut self, record: Record, now: Millis) -> io::Result<()> {
        match record {
            Record::Create(rec, payload) => {
                if let Some(old) = self.entries.get(&rec.path) {
                    let old = old.core.path.clone();
                    self.delete(&old);
                }
                self.create(&rec, &payload, now)
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
                self.append(&path, &effect, &payload);
                Ok(())
            }
            Record::Sealed { id, through } => {
                if let Some(path) = self.paths_by_id.get(&id) {
                    let core = &mut self
                        .entries
                        .get_mut(path)
                        .expect("indexed streams exist")
                        .core;
                    core.sealed = core.sealed.max(through);
                }
                Ok(())
            }
            Record::Snapshot { id, meta } => {
                if let Some(entry) = self.entry_by_id(id) {
                    entry.core.snapshot = Some(meta);
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
