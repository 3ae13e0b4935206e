//! The stream table the writer thread owns, and the steps that change it.
//! Recovery drives the same steps from the log, so a replayed stream is
//! built exactly as the live one was.
//!
//! ## What a stream costs in memory
//! An origin holds a million mostly idle streams, so every per-stream byte
//! is accounted for (sizes on x86-64; measured with `ds-load streams`: 982 B
//! of RSS per stream at a million streams of 200 B each, all of it below):
//! - [`StreamView`] (240 B + its `Arc`, a 256 B allocation): what readers
//!   see. Its tail watch is one more allocation (~96 B).
//! - [`Entry`] (192 B, boxed, a 192 B allocation): the writer's
//!   [`StreamCore`] and the view. A fork's link to its source is one more
//!   boxed 32 B (and 24 B in its view), only on forks.
//! - The path (one `Arc<str>` shared by the core, the view and all three
//!   maps), the incarnation (one `Arc<str>`), the content type (interned:
//!   shared by all streams of a type).
//! - Three maps: paths to entries, ids to paths, the readers' registry of
//!   paths to views: a key and a pointer each, 24 B a slot, at a load of
//!   48–96 % (about 50 B per stream each at a million). And the ordered
//!   index of paths to views (`publisher::Ordered`, a B-tree, for
//!   listings and the region's sweeps): 24 B a slot in nodes half to
//!   fully used, 24–48 B per stream.
//! - The time of the last append, in the view (4 B within its 256 B
//!   allocation: free).
//! - [`Warm`](super::warm::Warm)'s extents (24 B each, allocated one at a
//!   time up to 16; a stream keeps more, up to 256, only while all streams
//!   together hold fewer than `StoreConfig::max_log_extents`, 2 million or
//!   48 MB) and its memory copy of the newest bytes (all streams
//!   together within `StoreConfig::buffered_bytes_limit`, 64 MiB: 67 B per
//!   stream at a million, nothing when idle for long), and an 8 B id in
//!   [`Engine::by_segment`] per extent.
//! - Producers (`StreamCore::producers`), a snapshot and `Stream-Seq` only
//!   when a stream has them; the expiry queue (16 B) only with a TTL.
//! - No file handle: stream files open on demand (`files`).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use super::FastMap;

use super::layout;
use super::record::{CreateRecord, Record};
use super::saved::{Extent, SavedStream};
use super::view::{Disk, End, Inherited, StreamView};
use super::warm::Warm;
use crate::core::stream::{AppendEffect, StreamCore};
use crate::core::Millis;

mod restoring;

pub struct Entry {
    pub core: StreamCore,
    pub view: Arc<StreamView>,
}

/// What applying an append did to a stream's layout.
#[derive(Debug, Default)]
pub struct Applied {
    pub extent: Option<Extent>,
    /// Bytes copied into memory, and memory released.
    pub kept: u64,
    pub released: u64,
    /// Whether the stream now wants its own file.
    pub promote: bool,
    /// Whether it just reached `warm::HEAVY_EXTENTS`.
    pub heavy: bool,
}

/// Where a record's payload is in the log, and the writer batch that
/// logged it (0 in recovery).
#[derive(Clone, Copy, Debug)]
pub struct LogPos {
    pub segment: u64,
    pub pos: u64,
    pub batch: u64,
}

impl Entry {
    /// Applies a decided append: its bytes to the layout (logged at `at`;
    /// in memory too while someone waits for them), its effect to the core.
    pub fn apply(&mut self, effect: &AppendEffect, payload: &Bytes, at: LogPos) -> Applied {
        let extent = (!payload.is_empty()).then(|| Extent {
            segment: at.segment,
            pos: u32::try_from(at.pos).expect("segments are rotated before 4 GiB"),
            len: payload.len() as u32,
            start: effect.start,
        });
        let mut applied = Applied {
            extent,
            ..Applied::default()
        };
        if let Some(e) = extent {
            let waiters = self.view.has_waiters();
            let mut warm = self.view.warm.lock();
            let keep = warm.hot(at.batch) || waiters;
            applied.released = warm.push(e, payload, keep);
            applied.kept = if keep { payload.len() as u64 } else { 0 };
            applied.promote = warm.wants_promotion();
            applied.heavy = warm.became_heavy();
        }
        self.core.apply(effect);
        self.view.wrote(effect.at);
        applied
    }

    /// The stream as a checkpoint keeps it.
    pub fn saved(&self) -> SavedStream {
        let warm = self.view.warm.lock();
        SavedStream {
            core: self.core.clone(),
            file_len: warm.file_len(),
            extents: warm.extents().to_vec(),
            last_write_at: self.view.last_write(),
        }
    }

    pub fn end(&self) -> End {
        End {
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
    /// Per log segment: the streams that got extents in it (an id per
    /// extent, so with repeats; stale once a stream moved on), so that
    /// cleaning a segment looks at its streams, not at every stream.
    pub by_segment: FastMap<u64, Vec<u64>>,
    /// Extents of all streams together (see `warm::HEAVY_EXTENTS`).
    pub extents_total: u64,
    /// Content types, one copy each for all the streams of that type (most
    /// streams share a handful), up to [`INTERNED_TYPES`]; rarer ones past
    /// that keep a copy of their own.
    types: super::FastSet<Arc<str>>,
    /// Per stream that has forks: their ids (soft-deleted ones included,
    /// since they still read it), so that a change of what they inherit
    /// reaches them. Rebuilt from the forks at recovery.
    pub forks: FastMap<u64, Vec<u64>>,
    /// A region's invalidation feed as the log replayed it: its next
    /// position, and the events logged since the image it started from
    /// (at most the feed keeps).
    pub feed_next: u64,
    pub feed: std::collections::VecDeque<shared::invalidation::Invalidation>,
}

/// What deleting a stream did.
pub enum Deletion {
    /// Forks still read it: it stays, soft-deleted (see `core::fork`).
    Soft(Arc<StreamView>),
    /// Removed: the stream, then each source it was the last fork of that
    /// was soft-deleted, removed with it. (Boxed as the table holds them:
    /// taken out without moving an entry.)
    #[allow(clippy::vec_box)]
    Removed(Vec<Box<Entry>>),
}

/// Distinct content types shared (see [`Engine::types`]).
pub const INTERNED_TYPES: usize = 1024;

impl Engine {
    pub fn new(data: PathBuf, next_id: u64, disk: Arc<Disk>) -> Self {
        Engine {
            data,
            entries: FastMap::default(),
            paths_by_id: FastMap::default(),
            next_id,
            disk,
            pins: FastMap::default(),
            by_segment: FastMap::default(),
            extents_total: 0,
            types: super::FastSet::default(),
            forks: FastMap::default(),
            feed_next: 0,
            feed: Default::default(),
        }
    }

    /// The one shared copy of a content type.
    fn intern(&mut self, content_type: &Arc<str>) -> Arc<str> {
        if let Some(t) = self.types.get(content_type) {
            return Arc::clone(t);
        }
        if self.types.len() < INTERNED_TYPES {
            self.types.insert(Arc::clone(content_type));
        }
        Arc::clone(content_type)
    }

    /// Adds a stream from its state (checkpoint) without touching its bytes.
    pub fn restore(&mut self, saved: SavedStream, now: Millis) {
        for e in &saved.extents {
            self.pin(e, saved.core.id);
        }
        let key = saved.core.key();
        self.insert(saved.core, Warm::new(saved.file_len, saved.extents), now);
        if let Some(e) = self.entries.get(&key) {
            e.view.wrote(saved.last_write_at);
        }
    }

    fn insert(&mut self, mut core: StreamCore, warm: Warm, now: Millis) {
        core.config.content_type = self.intern(&core.config.content_type);
        let inherited = core.fork.as_deref().and_then(|f| {
            self.forks.entry(f.source).or_default().push(core.id);
            let parent = self.view_by_id(f.source);
            if parent.is_none() {
                tracing::error!(stream = %core.path, source = f.source, "a fork's source is missing; its inherited bytes cannot be read");
            }
            parent.map(|parent| Inherited {
                parent,
                at: f.at,
                previous: f.restored.clone(),
            })
        });
        let view = Arc::new(StreamView::new(
            &core,
            warm,
            now,
            Arc::clone(&self.disk),
            inherited,
        ));
        let gone = view.forget_sealed(core.sealed);
        self.unpin(&gone);
        self.next_id = self.next_id.max(core.id + 1);
        let key = core.key();
        self.paths_by_id.insert(core.id, key.clone());
        self.entries.insert(key, Box::new(Entry { core, view }));
    }

    /// The direct forks of stream `id`.
    pub fn forks_of(&self, id: u64) -> &[u64] {
        self.forks.get(&id).map_or(&[], Vec::as_slice)
    }

    fn view_by_id(&self, id: u64) -> Option<Arc<StreamView>> {
        let path = self.paths_by_id.get(&id)?;
        self.entries.get(path).map(|e| Arc::clone(&e.view))
    }

    /// Creates a stream with its initial body, logged at `at`. No file is
    /// made: its bytes stay in the log until it outgrows it (see `warm`).
    /// A fork starts at its fork point: its bytes before it are its
    /// source's, and its chunks before the grid boundary below it are its
    /// source's too (the chunk across that boundary is the fork's own,
    /// sealed with the source's bytes it holds).
    pub fn create(&mut self, rec: &CreateRecord, payload: &Bytes, now: Millis, at: LogPos) {
        let mut core = StreamCore::new(
            rec.id,
            rec.path.as_str().into(),
            rec.incarnation.as_str().into(),
            rec.config.clone(),
            rec.created_at,
        );
        if let Some(f) = &rec.fork {
            core.len = f.at;
            core.sealed = f.at - f.at % shared::offset::CHUNK_BYTES;
            core.fork = Some(Box::new(f.clone()));
        }
        let start = core.len;
        // A stale file of a create that was lost in a crash (ids are given
        // again then) must not show: the first promotion writes from 0.
        self.disk.files.forget(rec.id);
        self.insert(core, Warm::new(start, Vec::new()), now);
        self.append(&rec.path, &rec.initial, payload, at);
        // Not yet visible to readers (the writer registers it after commit).
        let entry = &self.entries[rec.path.as_str()];
        entry.view.publish(entry.end());
    }

    /// Applies an append to the stream's state and keeps where its bytes are.
    pub fn append(&mut self, path: &str, effect: &AppendEffect, payload: &Bytes, at: LogPos) {
        let entry = self
            .entries
            .get_mut(path)
            .expect("appends name a live stream");
        let id = entry.core.id;
        if let Some(e) = entry.apply(effect, payload, at).extent {
            self.pin(&e, id);
        }
    }

    /// Stream `id` has an extent in `e`'s segment.
    pub fn pin(&mut self, e: &Extent, id: u64) {
        self.extents_total += 1;
        *self.pins.entry(e.segment).or_default() += 1;
        let ids = self.by_segment.entry(e.segment).or_default();
        if ids.last() != Some(&id) {
            ids.push(id);
        }
    }

    /// Forgets extents that no stream needs any more.
    pub fn unpin(&mut self, extents: &[Extent]) {
        for e in extents {
            debug_assert!(
                self.pins.contains_key(&e.segment),
                "an extent in segment {} unpinned twice",
                e.segment
            );
            if let Some(n) = self.pins.get_mut(&e.segment) {
                self.extents_total -= 1;
                *n -= 1;
                if *n == 0 {
                    self.pins.remove(&e.segment);
                    self.by_segment.remove(&e.segment);
                }
            }
        }
    }

    /// Deletes a stream: soft when forks still read it, else it is removed
    /// from the table, and with it each soft-deleted source it was the last
    /// fork of. Nothing for a missing or already soft-deleted stream. A
    /// removed stream's file stays until the delete is durable
    /// ([`Engine::remove_file`]); open handles keep reading it.
    pub fn delete(&mut self, path: &str) -> Option<Deletion> {
        let entry = self.entries.get_mut(path)?;
        if entry.core.soft_deleted {
            return None;
        }
        if self
            .forks
            .get(&entry.core.id)
            .is_some_and(|f| !f.is_empty())
        {
            entry.core.soft_deleted = true;
            return Some(Deletion::Soft(Arc::clone(&entry.view)));
        }
        let mut removed = vec![self.remove(path)?];
        while let Some(source) = removed
            .last()
            .and_then(|e| e.core.fork.as_deref())
            .map(|f| f.source)
        {
            if self.forks.contains_key(&source) {
                break; // other forks still read it
            }
            let Some(path) = self.paths_by_id.get(&source).cloned() else {
                break;
            };
            if !self.entries[&path].core.soft_deleted {
                break;
            }
            removed.extend(self.remove(&path));
        }
        Some(Deletion::Removed(removed))
    }

    /// Takes a stream out of the table, its extents and its count as a
    /// fork of its source with it.
    fn remove(&mut self, path: &str) -> Option<Box<Entry>> {
        let entry = self.entries.remove(path)?;
        self.paths_by_id.remove(&entry.core.id);
        self.forks.remove(&entry.core.id);
        if let Some(f) = entry.core.fork.as_deref() {
            if let Some(ids) = self.forks.get_mut(&f.source) {
                ids.retain(|&id| id != entry.core.id);
                if ids.is_empty() {
                    self.forks.remove(&f.source);
                }
            }
        }
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
    /// Returns the ids of the sources a delete removed with its stream.
    pub fn replay(&mut self, record: Record, now: Millis, at: LogPos) -> io::Result<Vec<u64>> {
        let deletion = match record {
            Record::Delete { id, .. } => match self.paths_by_id.get(&id).cloned() {
                Some(path) => self.delete(&path),
                None => None,
            },
            Record::Restore { previous, saved } => self.restore_stream(previous, *saved, now)?,
            record => return self.replay_change(record, now, at).map(|()| Vec::new()),
        };
        let mut removed = Vec::new();
        match deletion {
            // Nothing reads yet: a soft delete is marked at once.
            Some(Deletion::Soft(view)) => view.set_soft_deleted(true),
            Some(Deletion::Removed(entries)) => {
                removed.extend(entries.iter().map(|e| e.core.id));
            }
            None => {}
        }
        Ok(removed)
    }

    fn replay_change(&mut self, record: Record, now: Millis, at: LogPos) -> io::Result<()> {
        match record {
            Record::FeedFrom { next } => {
                if next > self.feed_next {
                    self.feed.clear();
                    self.feed_next = next;
                }
                Ok(())
            }
            Record::Feed(event) => {
                self.replay_feed(event);
                Ok(())
            }
            Record::Create(rec, payload) => {
                // Never written so (a create finds the path free), but a
                // stale stream there goes first.
                if let Some(old) = self.entries.get(rec.path.as_str()) {
                    let old = old.core.path.clone();
                    tracing::error!(path = %old, "the log creates a stream where one exists; the old one goes");
                    self.remove(&old);
                }
                self.create(&rec, &payload, now, at);
                Ok(())
            }
            Record::Append {
                id,
                effect,
                payload,
            } => {
                let path = self.logged_append(id, effect.start)?;
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
            Record::Image {
                saved,
                next_id,
                payload,
            } => self.replay_image(*saved, next_id, &payload, now, at),
            Record::ImageMore { id, payload } => self.replay_image_more(id, &payload, at),
            Record::Delete { .. } | Record::Restore { .. } => unreachable!("replayed above"),
        }
    }

    /// A logged invalidation event, kept (the newest
    /// `INVALIDATIONS_KEPT`) unless an image already holds it.
    fn replay_feed(&mut self, event: shared::invalidation::Invalidation) {
        if event.seq >= self.feed_next {
            self.feed_next = event.seq + 1;
            if self.feed.len() == crate::core::invalidation_log::INVALIDATIONS_KEPT {
                self.feed.pop_front();
            }
            self.feed.push_back(event);
        }
    }

    /// A stream's image (a region checkpoint's): it replaces any stream at
    /// its path, its bytes starting here in the log.
    fn replay_image(
        &mut self,
        saved: SavedStream,
        next_id: u64,
        payload: &Bytes,
        now: Millis,
        at: LogPos,
    ) -> io::Result<()> {
        let SavedStream {
            core,
            file_len,
            last_write_at,
            ..
        } = saved;
        if self.entries.contains_key(&core.key()) {
            tracing::error!(path = %core.path, "an image lands where a stream exists; the old one goes");
            self.remove(&core.key());
        }
        let extents = self
            .image_extent(file_len, payload, at)?
            .into_iter()
            .collect();
        // Its bytes start here, in the log: nothing of a file a stream of
        // this id had before may show.
        self.disk.files.forget(core.id);
        self.next_id = self.next_id.max(next_id);
        self.restore(
            SavedStream {
                core,
                file_len,
                extents,
                last_write_at,
            },
            now,
        );
        Ok(())
    }

    /// More of the bytes of an image replayed before.
    fn replay_image_more(&mut self, id: u64, payload: &Bytes, at: LogPos) -> io::Result<()> {
        let Some(end) = self.entry_by_id(id).map(|e| e.view.warm.lock().end()) else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("more of the image of unknown stream {id}"),
            ));
        };
        if let Some(e) = self.image_extent(end, payload, at)? {
            let entry = self.entry_by_id(id).expect("looked up above");
            entry.view.warm.lock().push(e, payload, false);
            self.pin(&e, id);
        }
        Ok(())
    }

    /// The path of stream `id`, which a logged append at `start` extends:
    /// an error if there is no such stream or it does not end there (the
    /// log is not what this table was built from).
    pub fn logged_append(&self, id: u64, start: u64) -> io::Result<Arc<str>> {
        let Some(path) = self.paths_by_id.get(&id).cloned() else {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("append to unknown stream {id}"),
            ));
        };
        let len = self.entries[&path].core.len;
        if start != len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("stream {id}: logged append at {start} but the stream ends at {len}"),
            ));
        }
        Ok(path)
    }

    /// Where an image's `payload`, logged at `at`, holds the stream's
    /// bytes from `start` (none when it is empty).
    fn image_extent(&self, start: u64, payload: &Bytes, at: LogPos) -> io::Result<Option<Extent>> {
        if payload.is_empty() {
            return Ok(None);
        }
        let bad = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "an image record past its segment",
            )
        };
        Ok(Some(Extent {
            segment: at.segment,
            pos: u32::try_from(at.pos).map_err(|_| bad())?,
            len: u32::try_from(payload.len()).map_err(|_| bad())?,
            start,
        }))
    }
}
#[cfg(test)]
mod tests {
    /// The per-stream structures stay as small as the memory budget in the
    /// module docs says (a regression guard: every byte here is a million
    /// bytes on a full origin).
    #[test]
    fn per_stream_structures_stay_small() {
        use std::mem::size_of;
        assert!(
            size_of::<super::StreamView>() <= 240,
            "{}",
            size_of::<super::StreamView>()
        );
        // 192: mimalloc's size class that 184 fell in already.
        assert!(
            size_of::<super::Entry>() <= 192,
            "{}",
            size_of::<super::Entry>()
        );
        assert!(size_of::<super::super::saved::Extent>() <= 24);
    }
}
