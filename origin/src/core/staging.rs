//! Staged snapshot uploads: the bounds on parts that wait on disk for their
//! publish, and which uploads go when. No I/O and no clock: the HTTP shell
//! (`http/staging.rs`) writes and removes the files and passes the time in.
//!
//! Terms. An *upload* is the parts staged for one snapshot offset of one
//! stream incarnation (`PUT {stream}/snapshot/{offset}/part/{n}`). Its
//! directory is named by its [`UploadId`], never reused, so the files of a
//! dropped upload never mix with a new one's at the same offset. A *hold*
//! is a request using an upload's directory (a part being written, a
//! publish reading the parts); a dropped upload's directory is removed only
//! once its last hold lets go, so nothing writes into a directory after it
//! is removed and nothing reads one as it goes.
//!
//! Why: the parts of one offset were bounded (by the snapshot limit), but a
//! client could stage under any number of offsets and streams and leave
//! them until a restart, filling the disk. Now:
//! - one stream incarnation has at most `per_stream` uploads (409 past it);
//! - all uploads together take at most `total_bytes` of disk (503 past it),
//!   each part counted as the disk holds it, rounded up to a 4 KiB block, so
//!   a flood of tiny parts costs what their files cost, not nothing;
//! - an upload untouched for `idle_ms` is dropped, and publishing or
//!   deleting the stream drops it at once.
//!
//! A part sent again replaces the old one's size. One part is written by one
//! request at a time (a second one answers 503): the size is recorded at
//! admission, and two writers of one part could leave another size on disk
//! than the one recorded. A write that fails drops the whole upload, since
//! what its part's file then holds is not known.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

use super::Millis;

/// Names an upload's directory; never reused within a process (the staging
/// directory is emptied at start).
pub type UploadId = u64;

/// Disk is taken in blocks: a part is counted as a whole number of them.
pub const BLOCK: u64 = 4096;

/// Which upload: a stream incarnation and a snapshot offset.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct UploadKey {
    pub path: Arc<str>,
    pub incarnation: Arc<str>,
    pub offset: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StagingBounds {
    /// Uploads one stream incarnation may have at once.
    pub per_stream: usize,
    /// Disk all uploads may take together, in bytes (blocks counted whole).
    pub total_bytes: u64,
    /// Bytes of one upload's parts (the largest snapshot).
    pub per_upload: u64,
    /// An upload untouched this long is dropped.
    pub idle_ms: Millis,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StagingRefusal {
    /// The stream incarnation has `max` uploads already (409).
    TooManyUploads { max: usize },
    /// The upload's parts would pass the largest snapshot (413).
    TooLarge { limit: u64 },
    /// All uploads together would pass their bound (503, later).
    Full { limit: u64 },
    /// Another request is writing this part now (503, shortly).
    PartBusy { part: u32 },
}

/// Uploads whose directories the caller must remove now (no hold is left).
pub type Removals = Vec<UploadId>;

#[derive(Debug)]
struct Upload {
    id: UploadId,
    /// Staged parts' sizes, including the ones being written.
    parts: BTreeMap<u32, u64>,
    /// Sum of `parts`.
    bytes: u64,
    /// Disk `parts` take, in whole blocks.
    charged: u64,
    /// Parts a request is writing now.
    writing: BTreeSet<u32>,
    holds: u32,
    touched: Millis,
}

/// One stream path's uploads by (incarnation, offset).
type StreamUploads = BTreeMap<(Arc<str>, u64), Upload>;

/// The ledger of every staged upload.
#[derive(Debug)]
pub struct StagedUploads {
    bounds: StagingBounds,
    /// By stream path, then (incarnation, offset): a stream's uploads are
    /// found together (to count and to drop them).
    streams: HashMap<Arc<str>, StreamUploads>,
    /// Uploads dropped while held, with the holds left on each.
    dropped: HashMap<UploadId, u32>,
    /// Sum of the live uploads' `charged`.
    charged: u64,
    uploads: usize,
    next_id: UploadId,
}

/// The disk a part of `len` bytes takes: whole blocks, at least one (an
/// empty file still costs an inode and a directory entry).
pub fn charge(len: u64) -> Option<u64> {
    len.div_ceil(BLOCK).max(1).checked_mul(BLOCK)
}

/// `a - b` where `b` was added into `a` before: never below zero.
fn less(a: u64, b: u64) -> u64 {
    debug_assert!(b <= a, "the ledger takes away only what it added");
    a.saturating_sub(b)
}

impl StagedUploads {
    pub fn new(bounds: StagingBounds) -> Self {
        StagedUploads {
            bounds,
            streams: HashMap::new(),
            dropped: HashMap::new(),
            charged: 0,
            uploads: 0,
            next_id: 0,
        }
    }

    /// Disk all live uploads take (whole blocks).
    pub fn charged_bytes(&self) -> u64 {
        self.charged
    }

    pub fn upload_count(&self) -> usize {
        self.uploads
    }

    /// Whether `key` has an upload here.
    pub fn has(&self, key: &UploadKey) -> bool {
        self.streams
            .get(&key.path)
            .is_some_and(|u| u.contains_key(&(Arc::clone(&key.incarnation), key.offset)))
    }

    fn upload_mut(&mut self, key: &UploadKey) -> Option<&mut Upload> {
        self.streams
            .get_mut(&key.path)?
            .get_mut(&(Arc::clone(&key.incarnation), key.offset))
    }

    /// Admits part `part` of `len` bytes to `key`'s upload (made if new) and
    /// holds it while the part is written; the caller then writes the file
    /// into the upload's directory and reports with [`Self::part_written`].
    /// A refusal changes nothing.
    pub fn admit_part(
        &mut self,
        key: &UploadKey,
        part: u32,
        len: u64,
        now: Millis,
    ) -> Result<UploadId, StagingRefusal> {
        let bounds = self.bounds;
        let full = StagingRefusal::Full {
            limit: bounds.total_bytes,
        };
        let too_large = StagingRefusal::TooLarge {
            limit: bounds.per_upload,
        };
        let new_charge = charge(len).ok_or(full.clone())?;
        let charged = self.charged;
        let (bytes, upload_charged) = match self.upload_mut(key) {
            Some(u) => {
                if u.writing.contains(&part) {
                    return Err(StagingRefusal::PartBusy { part });
                }
                let old = u.parts.get(&part).copied();
                let old_charge = old.map_or(0, |o| charge(o).unwrap_or(0));
                let bytes = less(u.bytes, old.unwrap_or(0))
                    .checked_add(len)
                    .ok_or(too_large.clone())?;
                let upload_charged = less(u.charged, old_charge)
                    .checked_add(new_charge)
                    .ok_or(full.clone())?;
                (bytes, Some((upload_charged, old_charge)))
            }
            None => {
                let stream_uploads = self.streams.get(&key.path).map_or(0, |s| {
                    let inc = Arc::clone(&key.incarnation);
                    s.range((Arc::clone(&inc), 0)..=(inc, u64::MAX)).count()
                });
                if stream_uploads >= bounds.per_stream {
                    return Err(StagingRefusal::TooManyUploads {
                        max: bounds.per_stream,
                    });
                }
                (len, None)
            }
        };
        if bytes > bounds.per_upload {
            return Err(too_large);
        }
        let old_charge = upload_charged.map_or(0, |(_, old)| old);
        let total = less(charged, old_charge)
            .checked_add(new_charge)
            .filter(|t| *t <= bounds.total_bytes)
            .ok_or(full)?;
        self.charged = total;
        let id = match self.upload_mut(key) {
            Some(u) => {
                u.parts.insert(part, len);
                u.bytes = bytes;
                u.charged = upload_charged.map_or(new_charge, |(c, _)| c);
                u.writing.insert(part);
                u.holds += 1;
                u.touched = now;
                u.id
            }
            None => {
                let id = self.next_id;
                self.next_id += 1;
                self.uploads += 1;
                let upload = Upload {
                    id,
                    parts: BTreeMap::from([(part, len)]),
                    bytes,
                    charged: new_charge,
                    writing: BTreeSet::from([part]),
                    holds: 1,
                    touched: now,
                };
                self.streams
                    .entry(Arc::clone(&key.path))
                    .or_default()
                    .insert((Arc::clone(&key.incarnation), key.offset), upload);
                id
            }
        };
        Ok(id)
    }

    /// The write of a part admitted into upload `id` ended. A failed one
    /// drops the upload (what its file holds now is not known).
    pub fn part_written(&mut self, key: &UploadKey, id: UploadId, part: u32, ok: bool) -> Removals {
        match self.upload_mut(key) {
            Some(u) if u.id == id => {
                u.writing.remove(&part);
                u.holds -= 1;
                if ok {
                    Vec::new()
                } else {
                    self.drop_upload(key).into_iter().collect()
                }
            }
            _ => self.let_go_of_dropped(id),
        }
    }

    /// Holds `key`'s upload for a publish that reads its parts; `None` when
    /// nothing is staged there.
    pub fn hold(&mut self, key: &UploadKey, now: Millis) -> Option<UploadId> {
        let u = self.upload_mut(key)?;
        u.holds += 1;
        u.touched = now;
        Some(u.id)
    }

    /// A publish lets go of upload `id`; `published` drops it (its parts are
    /// in object storage now).
    pub fn release(&mut self, key: &UploadKey, id: UploadId, published: bool) -> Removals {
        match self.upload_mut(key) {
            Some(u) if u.id == id => {
                u.holds -= 1;
                if published {
                    self.drop_upload(key).into_iter().collect()
                } else {
                    Vec::new()
                }
            }
            _ => self.let_go_of_dropped(id),
        }
    }

    /// Drops every upload of the stream at `path`, of every incarnation (it
    /// was deleted).
    pub fn drop_stream(&mut self, path: &str) -> Removals {
        let Some(uploads) = self.streams.remove(path) else {
            return Vec::new();
        };
        uploads
            .into_values()
            .filter_map(|u| self.forget(u))
            .collect()
    }

    /// Drops the uploads untouched for `idle_ms` and not held.
    pub fn expire(&mut self, now: Millis) -> Removals {
        let idle_ms = self.bounds.idle_ms;
        let mut gone = Vec::new();
        for uploads in self.streams.values_mut() {
            let idle: Vec<(Arc<str>, u64)> = uploads
                .iter()
                .filter(|(_, u)| u.holds == 0 && now.saturating_sub(u.touched) >= idle_ms)
                .map(|(k, _)| k.clone())
                .collect();
            gone.extend(idle.into_iter().filter_map(|k| uploads.remove(&k)));
        }
        self.streams.retain(|_, uploads| !uploads.is_empty());
        gone.into_iter().filter_map(|u| self.forget(u)).collect()
    }

    /// Removes `key`'s upload; its id when its directory can go now.
    fn drop_upload(&mut self, key: &UploadKey) -> Option<UploadId> {
        let uploads = self.streams.get_mut(&key.path)?;
        let upload = uploads.remove(&(Arc::clone(&key.incarnation), key.offset))?;
        if uploads.is_empty() {
            self.streams.remove(&key.path);
        }
        self.forget(upload)
    }

    /// Takes a removed upload off the totals; its id when nothing holds it.
    fn forget(&mut self, upload: Upload) -> Option<UploadId> {
        self.charged = less(self.charged, upload.charged);
        self.uploads -= 1;
        if upload.holds == 0 {
            Some(upload.id)
        } else {
            self.dropped.insert(upload.id, upload.holds);
            None
        }
    }

    fn let_go_of_dropped(&mut self, id: UploadId) -> Removals {
        let Some(holds) = self.dropped.get_mut(&id) else {
            return Vec::new();
        };
        *holds -= 1;
        if *holds == 0 {
            self.dropped.remove(&id);
            vec![id]
        } else {
            Vec::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOUNDS: StagingBounds = StagingBounds {
        per_stream: 2,
        total_bytes: 4 * BLOCK,
        per_upload: 3 * BLOCK,
        idle_ms: 1000,
    };

    fn key(path: &str, incarnation: &str, offset: u64) -> UploadKey {
        UploadKey {
            path: path.into(),
            incarnation: incarnation.into(),
            offset,
        }
    }

    /// Admits and finishes writing a part.
    fn stage(l: &mut StagedUploads, k: &UploadKey, part: u32, len: u64, now: Millis) -> UploadId {
        let id = l.admit_part(k, part, len, now).expect("admitted");
        assert_eq!(l.part_written(k, id, part, true), Vec::<UploadId>::new());
        id
    }

    #[test]
    fn parts_are_charged_in_whole_blocks() {
        assert_eq!(charge(0), Some(BLOCK));
        assert_eq!(charge(1), Some(BLOCK));
        assert_eq!(charge(BLOCK), Some(BLOCK));
        assert_eq!(charge(BLOCK + 1), Some(2 * BLOCK));
        assert_eq!(charge(u64::MAX), None);
    }

    #[test]
    fn a_stream_has_at_most_its_uploads_and_refusals_change_nothing() {
        let mut l = StagedUploads::new(BOUNDS);
        stage(&mut l, &key("/a", "i", 1), 0, 10, 0);
        stage(&mut l, &key("/a", "i", 2), 0, 10, 0);
        assert_eq!(
            l.admit_part(&key("/a", "i", 3), 0, 10, 0),
            Err(StagingRefusal::TooManyUploads { max: 2 })
        );
        assert_eq!((l.upload_count(), l.charged_bytes()), (2, 2 * BLOCK));
        // More parts of a staged offset, another incarnation, another stream.
        stage(&mut l, &key("/a", "i", 1), 1, 10, 0);
        stage(&mut l, &key("/a", "j", 3), 0, 10, 0);
        assert_eq!(
            l.admit_part(&key("/b", "i", 1), 0, 10, 0),
            Err(StagingRefusal::Full { limit: 4 * BLOCK })
        );
        assert_eq!(l.drop_stream("/a").len(), 3);
        assert_eq!((l.upload_count(), l.charged_bytes()), (0, 0));
        stage(&mut l, &key("/b", "i", 1), 0, 10, 0);
    }

    #[test]
    fn a_part_sent_again_replaces_its_size() {
        let mut l = StagedUploads::new(BOUNDS);
        let k = key("/a", "i", 1);
        for _ in 0..5 {
            stage(&mut l, &k, 0, 2 * BLOCK, 0);
        }
        assert_eq!(l.charged_bytes(), 2 * BLOCK);
        stage(&mut l, &k, 0, 1, 0);
        assert_eq!(l.charged_bytes(), BLOCK);
        stage(&mut l, &k, 1, 2 * BLOCK, 0);
        // 1 + 2 blocks of 3 for the upload: one more byte is too large.
        assert_eq!(
            l.admit_part(&k, 2, BLOCK, 0),
            Err(StagingRefusal::TooLarge { limit: 3 * BLOCK })
        );
        assert_eq!(l.charged_bytes(), 3 * BLOCK);
    }

    #[test]
    fn sizes_that_do_not_fit_in_a_u64_are_refused() {
        let mut l = StagedUploads::new(StagingBounds {
            total_bytes: u64::MAX,
            per_upload: u64::MAX,
            ..BOUNDS
        });
        let k = key("/a", "i", 1);
        stage(&mut l, &k, 0, u64::MAX - BLOCK, 0);
        assert_eq!(
            l.admit_part(&k, 1, BLOCK + 1, 0),
            Err(StagingRefusal::TooLarge { limit: u64::MAX })
        );
        assert_eq!(
            l.admit_part(&k, 1, u64::MAX, 0),
            Err(StagingRefusal::Full { limit: u64::MAX })
        );
    }

    #[test]
    fn one_part_is_written_by_one_request_at_a_time() {
        let mut l = StagedUploads::new(BOUNDS);
        let k = key("/a", "i", 1);
        let id = l.admit_part(&k, 0, 10, 0).unwrap();
        assert_eq!(
            l.admit_part(&k, 0, 10, 0),
            Err(StagingRefusal::PartBusy { part: 0 })
        );
        stage(&mut l, &k, 1, 10, 0);
        l.part_written(&k, id, 0, true);
        stage(&mut l, &k, 0, 10, 0);
    }

    #[test]
    fn a_failed_write_drops_its_upload() {
        let mut l = StagedUploads::new(BOUNDS);
        let k = key("/a", "i", 1);
        let id = stage(&mut l, &k, 0, 10, 0);
        let again = l.admit_part(&k, 1, 10, 0).unwrap();
        assert_eq!(l.part_written(&k, again, 1, false), vec![id]);
        assert_eq!((l.upload_count(), l.charged_bytes()), (0, 0));
        // The next part starts another upload, in a directory of its own.
        assert_ne!(stage(&mut l, &k, 0, 10, 0), id);
    }

    #[test]
    fn a_held_upload_is_removed_when_its_last_hold_lets_go() {
        let mut l = StagedUploads::new(BOUNDS);
        let k = key("/a", "i", 1);
        let id = stage(&mut l, &k, 0, 10, 0);
        let writing = l.admit_part(&k, 1, 10, 0).unwrap();
        assert_eq!(l.hold(&k, 0), Some(id));
        // Deleted while a part is written and a publish reads: the totals
        // go at once, the directory once both are done.
        assert_eq!(l.drop_stream("/a"), Vec::<UploadId>::new());
        assert_eq!((l.upload_count(), l.charged_bytes()), (0, 0));
        assert_eq!(l.part_written(&k, writing, 1, true), Vec::<UploadId>::new());
        assert_eq!(l.release(&k, id, false), vec![id]);
        assert_eq!(l.release(&k, id, false), Vec::<UploadId>::new());
    }

    #[test]
    fn a_publish_drops_what_it_published_only() {
        let mut l = StagedUploads::new(BOUNDS);
        let k = key("/a", "i", 1);
        let id = stage(&mut l, &k, 0, 10, 0);
        assert_eq!(l.hold(&key("/a", "i", 2), 0), None);
        assert_eq!(l.hold(&k, 0), Some(id));
        assert_eq!(l.release(&k, id, false), Vec::<UploadId>::new());
        assert_eq!(l.upload_count(), 1);
        assert_eq!(l.hold(&k, 0), Some(id));
        assert_eq!(l.release(&k, id, true), vec![id]);
        assert_eq!((l.upload_count(), l.charged_bytes()), (0, 0));
    }

    #[test]
    fn uploads_expire_when_untouched_and_not_held() {
        let mut l = StagedUploads::new(BOUNDS);
        let old = key("/a", "i", 1);
        let young = key("/a", "i", 2);
        let old_id = stage(&mut l, &old, 0, 10, 0);
        let young_id = stage(&mut l, &young, 0, 10, 500);
        assert_eq!(l.expire(999), Vec::<UploadId>::new());
        assert_eq!(l.expire(1000), vec![old_id]);
        // Held by a publish: not idle, however old.
        assert_eq!(l.hold(&young, 500), Some(young_id));
        assert_eq!(l.expire(10_000), Vec::<UploadId>::new());
        assert_eq!(l.release(&young, young_id, false), Vec::<UploadId>::new());
        assert_eq!(l.expire(10_000), vec![young_id]);
        assert_eq!((l.upload_count(), l.charged_bytes()), (0, 0));
        // A part sent again touches its upload.
        let k = key("/b", "i", 1);
        stage(&mut l, &k, 0, 10, 0);
        stage(&mut l, &k, 0, 10, 900);
        assert_eq!(l.expire(1000), Vec::<UploadId>::new());
    }
}
