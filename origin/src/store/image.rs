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
//! Memory: the recovered streams (as a claim holds them), one part and
//! one piece of a stream's bytes (`record::IMAGE_PIECE`).

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
/// stream to `emit`, in parts of at least `part_bytes` and at most that
/// plus one piece (the last one smaller), each a run of whole records. A
/// log that recovery had to cut (a frame it could not read) fails it: the
/// replay came from checked objects, so that is a bug or a version skew,
/// and an image made of it would lose what was cut. Streams go in id order, so a
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
            chunk_cache: None,
        })
    })?;
    if recovered.report.torn_bytes_dropped > 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the replayed log ends in {} bytes recovery could not read",
                recovered.report.torn_bytes_dropped
            ),
        ));
    }
    let engine = recovered.engine;
    // By table key: a stream a rollback detached is kept off its path.
    let mut ids: Vec<(u64, &str)> = engine
        .entries
        .iter()
        .map(|(key, e)| (e.core.id, &**key))
        .collect();
    ids.sort_unstable();
    let mut stats = ImageStats::default();
    let mut part = Vec::new();
    // Where the partition's invalidation feed goes on after the image.
    record::encode(
        &Record::FeedFrom {
            next: engine.feed_next,
        },
        &mut part,
    );
    let mut reader = SegmentReader::new(scratch);
    let mut flush = |part: &mut Vec<u8>, stats: &mut ImageStats| -> io::Result<()> {
        if part.len() >= part_bytes {
            stats.bytes += part.len() as u64;
            emit(std::mem::take(part))?;
        }
        Ok(())
    };
    for (_, path) in ids {
        let saved = engine.entries[path].saved();
        let pieces = unsealed(&saved)?;
        let SavedStream {
            core,
            last_write_at,
            ..
        } = saved;
        let id = core.id;
        let mut pieces = pieces.into_iter();
        let first = match pieces.next() {
            Some(piece) => reader.read(&piece)?,
            None => Vec::new(),
        };
        stats.stream_bytes += first.len() as u64;
        let from =
            core.len - pieces.as_slice().iter().map(|p| p.len()).sum::<u64>() - first.len() as u64;
        record::encode(
            &Record::Image {
                saved: Box::new(SavedStream {
                    core,
                    file_len: from,
                    extents: Vec::new(),
                    last_write_at,
                }),
                next_id: engine.next_id,
                payload: Bytes::from(first),
            },
            &mut part,
        );
        flush(&mut part, &mut stats)?;
        // The rest a piece at a time, parts cut between them: a replay
        // needs only the stream's image before its more.
        for piece in pieces {
            let bytes = reader.read(&piece)?;
            stats.stream_bytes += bytes.len() as u64;
            record::encode(
                &Record::ImageMore {
                    id,
                    payload: Bytes::from(bytes),
                },
                &mut part,
            );
            flush(&mut part, &mut stats)?;
        }
        stats.streams += 1;
    }
    if !part.is_empty() {
        stats.bytes += part.len() as u64;
        emit(part)?;
    }
    Ok(stats)
}

/// Where some of a stream's bytes are in the replayed log: runs of
/// extents, clipped, of at most [`IMAGE_PIECE`] together.
#[derive(Debug, Default)]
struct Piece {
    runs: Vec<(u64, u64, u64)>,
}

impl Piece {
    fn len(&self) -> u64 {
        self.runs.iter().map(|r| r.2).sum()
    }
}

/// The stream's bytes that are not sealed, as pieces to read from the log
/// it was recovered from (a replayed stream's bytes are all in extents:
/// recovery copies nothing into files), in order.
fn unsealed(saved: &SavedStream) -> io::Result<Vec<Piece>> {
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
    let piece_max = IMAGE_PIECE as u64;
    let mut pieces: Vec<Piece> = Vec::new();
    for e in &saved.extents {
        if e.end() <= from {
            continue;
        }
        let skip = from.saturating_sub(e.start);
        let (mut pos, mut left) = (u64::from(e.pos) + skip, u64::from(e.len) - skip);
        while left > 0 {
            if pieces.last().is_none_or(|p| p.len() >= piece_max) {
                pieces.push(Piece::default());
            }
            let piece = pieces.last_mut().expect("pushed above");
            let take = left.min(piece_max - piece.len());
            piece.runs.push((e.segment, pos, take));
            pos += take;
            left -= take;
        }
    }
    Ok(pieces)
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

    /// The bytes of `piece`, in order.
    fn read(&mut self, piece: &Piece) -> io::Result<Vec<u8>> {
        let mut out = vec![0; piece.len() as usize];
        let mut at = 0;
        for &(segment, pos, len) in &piece.runs {
            let len = len as usize;
            self.read_at(segment, pos, &mut out[at..at + len])?;
            at += len;
        }
        Ok(out)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::{Expiry, StreamConfig};
    use crate::core::producer::ProducerClaim;
    use crate::core::stream::AppendEffect;
    use crate::region::local::LocalLog;
    use crate::store::record::CreateRecord;

    fn effect(start: u64, len: usize, seq: Option<u64>) -> AppendEffect {
        AppendEffect {
            start,
            len: len as u64,
            close: false,
            producer: seq.map(|seq| ProducerClaim {
                id: "p".into(),
                epoch: 0,
                seq,
            }),
            stream_seq: None,
            at: 7,
        }
    }

    /// A log of two streams: `/big` (a create, then appends of 3 MiB with a
    /// producer, 9 MiB in all: more than two pieces) and `/small`.
    fn log(data: &Path) -> Vec<u8> {
        let mut frames = Vec::new();
        let mut big = Vec::new();
        let create = |id, path: &str, body: &[u8]| {
            Record::Create(
                CreateRecord {
                    id,
                    created_at: 5,
                    path: path.into(),
                    incarnation: format!("inc-{id}"),
                    config: StreamConfig {
                        content_type: "application/octet-stream".into(),
                        expiry: Expiry::IdleSecs(60),
                        public: false,
                    },
                    initial: effect(0, body.len(), None),
                    fork: None,
                },
                Bytes::copy_from_slice(body),
            )
        };
        record::encode(&create(1, "/big", b"start"), &mut frames);
        big.extend_from_slice(b"start");
        for seq in 0..3u8 {
            let body = vec![seq; 3 << 20];
            let rec = Record::Append {
                id: 1,
                effect: effect(big.len() as u64, body.len(), Some(u64::from(seq))),
                payload: Bytes::from(body.clone()),
            };
            record::encode(&rec, &mut frames);
            big.extend_from_slice(&body);
        }
        record::encode(&create(2, "/small", b"tiny"), &mut frames);
        let mut log = LocalLog::begin(data).unwrap();
        log.push(&frames).unwrap();
        log.finish().unwrap();
        big
    }

    fn recovered(data: &Path) -> recovery::Recovered {
        recovery::recover(data, 9, |present| {
            Ok(Disk {
                files: files::StreamFiles::new(data, 16),
                segments: segments::Segments::open_all(data, present)?,
                chunk_cache: None,
            })
        })
        .unwrap()
    }

    fn bytes_of(data: &Path, saved: &SavedStream) -> Vec<u8> {
        let mut reader = SegmentReader::new(data);
        let mut out = Vec::new();
        for piece in unsealed(saved).unwrap() {
            out.extend(reader.read(&piece).unwrap());
        }
        out
    }

    /// An image laid out as a log recovers every stream as it was: its
    /// state, its bytes (through `ImageMore` records past a piece), and
    /// the next stream id; parts stay near their size.
    #[test]
    fn an_image_replayed_restores_every_stream() {
        let dir = tempfile::tempdir().unwrap();
        let (first, second) = (dir.path().join("first"), dir.path().join("second"));
        let big = log(&first);
        let mut parts = Vec::new();
        let stats = export(&first, 9, 1 << 20, &mut |part| {
            parts.push(part);
            Ok(())
        })
        .unwrap();
        assert_eq!(stats.streams, 2);
        assert_eq!(stats.stream_bytes, big.len() as u64 + 4);
        // Cut between pieces: no part holds much more than one piece.
        assert!(parts.len() >= 3, "{} parts", parts.len());
        assert!(parts
            .iter()
            .all(|p| p.len() <= (1 << 20) + IMAGE_PIECE + 4096));
        let mut laid = LocalLog::begin(&second).unwrap();
        for p in &parts {
            laid.push(p).unwrap();
        }
        laid.finish().unwrap();
        let (before, after) = (recovered(&first), recovered(&second));
        assert_eq!(after.report.torn_bytes_dropped, 0);
        assert_eq!(after.engine.next_id, before.engine.next_id);
        for path in ["/big", "/small"] {
            let (was, now) = (
                before.engine.entries[path].saved(),
                after.engine.entries[path].saved(),
            );
            assert_eq!(now.core, was.core, "{path}");
            assert_eq!(bytes_of(&second, &now), bytes_of(&first, &was), "{path}");
        }
        assert_eq!(
            bytes_of(&second, &after.engine.entries["/big"].saved()),
            big
        );
        assert_eq!(
            after.engine.entries["/big"].core.producers["p"].last_seq, 2,
            "the producer's state moved"
        );
    }
}
