//! Startup: rebuild every stream from the checkpoint and the WAL after it.
//!
//! The last segment may end in a frame that was being written when the
//! process died; it was never acknowledged (acks follow the sync), so the log
//! is cut there. A bad frame in any earlier segment is real corruption and
//! stops the start, rather than silently dropping acknowledged appends.
//!
//! Nothing here costs per stream held beyond building its state in memory:
//! no stream file is opened (files open on demand, see `files`), and bytes
//! a stream file may hold past what its stream knows (written ahead of a
//! checkpoint that never completed) are never read and are overwritten by
//! its next promotion. Files of streams that no longer exist are removed by
//! a background sweep once the origin serves.

use std::collections::BTreeMap;
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::checkpoint;
use super::engine::{Engine, LogPos};
use super::layout;
use super::record;
use super::view::Disk;
use super::wal::{self, Wal};
use super::FastSet;
use crate::core::Millis;

/// What recovery found.
#[derive(Debug, Default, Clone)]
pub struct RecoveryReport {
    pub streams: usize,
    pub segments_replayed: usize,
    pub records_replayed: u64,
    pub bytes_replayed: u64,
    /// Bytes of a torn frame at the end of the log that were dropped.
    pub torn_bytes_dropped: u64,
}

/// The store as recovery rebuilt it.
pub struct Recovered {
    pub engine: Engine,
    pub wal: Wal,
    pub report: RecoveryReport,
    /// Streams the replayed log changed: the first checkpoint writes them.
    pub touched: FastSet<u64>,
    /// Sizes of the segments before the open one.
    pub segment_sizes: BTreeMap<u64, u64>,
}

pub fn recover(
    data: &Path,
    now: Millis,
    disk: impl FnOnce(&[u64]) -> io::Result<Disk>,
) -> io::Result<Recovered> {
    std::fs::create_dir_all(layout::wal_dir(data))?;
    std::fs::create_dir_all(layout::streams_dir(data))?;
    move_legacy_stream_files(data)?;
    let mut report = RecoveryReport::default();
    let segments_present = wal::list_segments(data)?;
    let disk = Arc::new(disk(&segments_present)?);
    let ckpt = checkpoint::load(data).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let (mut engine, replay_from) = match ckpt {
        Some(c) => {
            let replay_from = c.replay_from_segment;
            (restore_checkpoint(data, c, &disk, now), replay_from)
        }
        None => (Engine::new(data.to_owned(), 1, Arc::clone(&disk)), 0),
    };
    let mut touched = FastSet::default();
    let mut segment_sizes = BTreeMap::new();
    for &seg in segments_present.iter().filter(|&&n| n < replay_from) {
        let size = std::fs::metadata(layout::segment_path(data, seg))?.len();
        segment_sizes.insert(seg, size);
    }
    let segments: Vec<u64> = segments_present
        .iter()
        .copied()
        .filter(|&n| n >= replay_from)
        .collect();
    let last = segments.last().copied();
    for &seg in &segments {
        let at = replay_segment(
            data,
            seg,
            Some(seg) == last,
            &mut engine,
            now,
            &mut touched,
            &mut report,
        )?;
        segment_sizes.insert(seg, at);
        report.bytes_replayed += at;
        report.segments_replayed += 1;
    }
    // Readers see the replayed state, not the one the view was built with.
    for &id in &touched {
        if let Some(entry) = engine.entry_by_id(id) {
            entry.view.publish(entry.end());
            entry.view.set_snapshot(entry.core.snapshot.clone());
        }
    }
    report.streams = engine.entries.len();
    let next_segment = segments
        .last()
        .map_or(replay_from, |n| n + 1)
        .max(replay_from)
        .max(segments_present.last().map_or(0, |n| n + 1));
    let wal = Wal::create(data, next_segment)?;
    disk.segments.add(next_segment, wal.file());
    Ok(Recovered {
        engine,
        wal,
        report,
        touched,
        segment_sizes,
    })
}

/// The table a checkpoint holds, its streams restored in id order.
fn restore_checkpoint(data: &Path, c: checkpoint::Loaded, disk: &Arc<Disk>, now: Millis) -> Engine {
    let mut engine = Engine::new(data.to_owned(), c.next_stream_id, Arc::clone(disk));
    engine.entries.reserve(c.streams.len());
    engine.paths_by_id.reserve(c.streams.len());
    // A fork's source comes first (its id is lower): its view is what the
    // fork reads through. Bases and merges keep that order.
    debug_assert!(c.streams.is_sorted_by_key(|s| s.core.id));
    for saved in c.streams {
        engine.restore(saved, now);
    }
    engine
}

/// Replays log segment `seg` into `engine`; returns where its records end.
/// A torn record at the end of the `last` segment is cut (a write the
/// crash interrupted); anywhere else it is corruption.
#[allow(clippy::too_many_arguments)]
fn replay_segment(
    data: &Path,
    seg: u64,
    last: bool,
    engine: &mut Engine,
    now: Millis,
    touched: &mut FastSet<u64>,
    report: &mut RecoveryReport,
) -> io::Result<u64> {
    let path = layout::segment_path(data, seg);
    let buf = std::fs::read(&path)?;
    let mut at = 0;
    loop {
        match record::decode(&buf[at..]) {
            Ok(Some((rec, used))) => {
                let pos = LogPos {
                    segment: seg,
                    pos: (at + used - record::payload_len(&rec)) as u64,
                    batch: 0,
                };
                touched.insert(rec.stream_id());
                // A delete may remove soft-deleted sources with its stream:
                // the next checkpoint must drop them too.
                touched.extend(engine.replay(rec, now, pos)?);
                at += used;
                report.records_replayed += 1;
            }
            Ok(None) => return Ok(at as u64),
            Err(e) if last => {
                tracing::warn!(segment = seg, at, error = %e, "dropping a torn record at the end of the log");
                // The zeros the segment was filled with ahead are not part
                // of what was torn.
                report.torn_bytes_dropped =
                    buf[at..].iter().rposition(|b| *b != 0).map_or(0, |p| p + 1) as u64;
                let f = std::fs::OpenOptions::new().write(true).open(&path)?;
                f.set_len(at as u64)?;
                f.sync_all()?;
                return Ok(at as u64);
            }
            Err(e) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("WAL segment {seg} is corrupt at byte {at}: {e}"),
                ));
            }
        }
    }
}

/// Stream files of the layout before the fan-out folders move into them.
/// The moves are made durable (one `syncfs`) before the start goes on, so
/// the version-1 checkpoint is never removed while a move could be undone.
fn move_legacy_stream_files(data: &Path) -> io::Result<()> {
    let mut moved = false;
    for (id, path) in stream_files_in(&layout::streams_dir(data))? {
        let to = layout::stream_file(data, id);
        if let Some(dir) = to.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::rename(path, to)?;
        moved = true;
    }
    if moved {
        rustix::fs::syncfs(std::fs::File::open(data)?)?;
    }
    Ok(())
}

/// The stream files directly in `dir`, by id.
fn stream_files_in(dir: &Path) -> io::Result<Vec<(u64, std::path::PathBuf)>> {
    let mut out = Vec::new();
    for dirent in std::fs::read_dir(dir)? {
        let dirent = dirent?;
        if let Some(id) = dirent
            .file_name()
            .to_str()
            .and_then(layout::parse_stream_file)
        {
            out.push((id, dirent.path()));
        }
    }
    Ok(out)
}

/// Removes the files of streams that no longer exist (deleted just before a
/// crash): every stream file whose id is below `below` and not in `live`.
/// Runs on a thread of its own after the start; ids at or above `below`
/// belong to streams created since, which it never touches.
pub fn sweep_stream_files(data: &Path, live: &FastSet<u64>, below: u64) -> io::Result<u64> {
    let mut removed = 0;
    for dir in std::fs::read_dir(layout::streams_dir(data))? {
        let dir = dir?;
        if !dir.file_type()?.is_dir() {
            continue;
        }
        for (id, path) in stream_files_in(&dir.path())? {
            if id < below && !live.contains(&id) {
                match std::fs::remove_file(path) {
                    Ok(()) => removed += 1,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e),
                }
            }
        }
    }
    Ok(removed)
}
