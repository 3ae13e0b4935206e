//! A partition's image: every stream as one record (`record::Record::Image`),
//! made from a replay, for a region's checkpoint in the bucket
//! (`region::checkpoint`).
//!
//! The image is made the way a claim rebuilds the store: a previous image
//! and the WAL objects after it are laid out as a log in a folder of its
//! own, and the store's ordinary recovery reads it. So an image holds
//! exactly what a claim would have replayed, never what the serving store
//! happens to hold in memory (commits still in flight, state of a batch not
//! yet durable). Each stream's record carries its whole state (producers,
//! closed, TTL, fork, snapshot, retention, visibility) and its unsealed
//! bytes; sealed bytes are in chunks already. Laid out again as a log, the
//! records restore every stream as it was.
//!
//! Memory: the recovered streams (as a claim holds them) plus one part.

use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use bytes::Bytes;

use super::layout;
use super::record::{self, Record, IMAGE_PIECE};
use super::recovery;
use super::saved::SavedStream;
use super::view::Disk;
use super::{files, segments};
use crate::core::Millis;

/// What an image holds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImageStats {
    pub streams: u64,
    /// Unsealed stream bytes carried.
    pub stream_bytes: u64,
    /// Bytes of records (what the parts hold).
    pub bytes: u64,
}

/// Recovers the log laid out in `scratch` and hands the image of every
/// stream to `emit`, in parts of at least `part_bytes` (the last one
/// smaller), each a run of whole records. Streams go in id order, so a
/// fork's source comes before the fork, as recovery needs.
pub fn export(
    scratch: &Path,
    now: Millis,
    part_bytes: usize,
    emit: &mut dyn FnMut(Vec<u8>) -> io::Result<()>,
) -> io::Result<ImageStats> {
    let recovered = recovery::recover(scratch, now, |present| {
        Ok(Disk {
            files: files::StreamFiles::new(scratch, 16),
            segments: segments::Segments::open_all(scratch, present)?,
            cold: None,
        })
    })?;
    let engine = recovered.engine;
    let mut ids: Vec<(u64, &str)> = engine
        .entries
        .values()
        .map(|e| (e.core.id, &*e.core.path))
        .collect();
    ids.sort_unstable();
    let mut stats = ImageStats::default();
    let mut part = Vec::new();
    let mut reader = SegmentReader::new(scratch);
    for (_, path) in ids {
        let saved = engine.entries[path].saved();
        let bytes = unsealed(&saved, &mut reader)?;
        let SavedStream { core, file_len, .. } = saved;
        let from = core.len - bytes.len() as u64;
        debug_assert!(from >= file_len);
        let id = core.id;
        let mut pieces = bytes.chunks(IMAGE_PIECE);
        let first = pieces.next().unwrap_or_default();
        record::encode(
            &Record::Image {
                saved: Box::new(SavedStream {
                    core,
                    file_len: from,
                    extents: Vec::new(),
                }),
                next_id: engine.next_id,
                payload: Bytes::copy_from_slice(first),
            },
            &mut part,
        );
        for piece in pieces {
            record::encode(
                &Record::ImageMore {
                    id,
                    payload: Bytes::copy_from_slice(piece),
                },
                &mut part,
            );
        }
        stats.streams += 1;
        stats.stream_bytes += bytes.len() as u64;
        if part.len() >= part_bytes {
            stats.bytes += part.len() as u64;
            emit(std::mem::take(&mut part))?;
        }
    }
    if !part.is_empty() {
        stats.bytes += part.len() as u64;
        emit(part)?;
    }
    Ok(stats)
}

/// The stream's bytes that are not sealed, from the log it was recovered
/// from (a replayed stream's bytes are all in extents: recovery copies
/// nothing into files).
fn unsealed(saved: &SavedStream, reader: &mut SegmentReader<'_>) -> io::Result<Vec<u8>> {
    if !saved.extents_cover_tail() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "stream {}: its bytes are not all in the replayed log",
                saved.core.id
            ),
        ));
    }
    let core = &saved.core;
    let from = saved.file_len.max(core.sealed).min(core.len);
    let mut out = Vec::with_capacity((core.len - from) as usize);
    for e in &saved.extents {
        if e.end() <= from {
            continue;
        }
        let skip = from.saturating_sub(e.start);
        let mut buf = vec![0; (u64::from(e.len) - skip) as usize];
        reader.read_at(e.segment, u64::from(e.pos) + skip, &mut buf)?;
        out.extend_from_slice(&buf);
    }
    Ok(out)
}

/// Reads the replayed log's segments, one open at a time (a replay's
/// extents come in segment order mostly).
struct SegmentReader<'a> {
    data: &'a Path,
    open: Option<(u64, std::fs::File)>,
}

impl<'a> SegmentReader<'a> {
    fn new(data: &'a Path) -> Self {
        SegmentReader { data, open: None }
    }

    fn read_at(&mut self, segment: u64, pos: u64, buf: &mut [u8]) -> io::Result<()> {
        if self.open.as_ref().map(|(n, _)| *n) != Some(segment) {
            let file = std::fs::File::open(layout::segment_path(self.data, segment))?;
            self.open = Some((segment, file));
        }
        let (_, file) = self.open.as_ref().expect("opened above");
        file.read_exact_at(buf, pos)
    }
}
