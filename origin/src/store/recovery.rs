//! Startup: rebuild every stream from the checkpoint and the WAL after it.
//!
//! The last segment may end in a frame that was being written when the
//! process died; it was never acknowledged (acks follow the sync), so the log
//! is cut there. A bad frame in any earlier segment is real corruption and
//! stops the start, rather than silently dropping acknowledged appends.
//! Finally every stream file is cut to its stream's length, dropping bytes
//! written ahead of a sync that never completed, and files of streams that no
//! longer exist are removed.

use std::collections::HashSet;
use std::io;
use std::path::Path;
use std::sync::Arc;

use super::checkpoint;
use super::cold::Cold;
use super::engine::Engine;
use super::layout;
use super::record;
use super::wal::{self, Wal};
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

pub fn recover(
    data: &Path,
    now: Millis,
    cold: Option<Arc<Cold>>,
) -> io::Result<(Engine, Wal, RecoveryReport)> {
    std::fs::create_dir_all(layout::wal_dir(data))?;
    std::fs::create_dir_all(layout::streams_dir(data))?;
    let mut report = RecoveryReport::default();
    let ckpt = checkpoint::read(data).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let (mut engine, replay_from) = match ckpt {
        Some(c) => {
            let mut engine = Engine::new(data.to_owned(), c.next_stream_id, cold.clone());
            for core in c.streams {
                engine.restore(core, now)?;
            }
            (engine, c.replay_from_segment)
        }
        None => (Engine::new(data.to_owned(), 1, cold), 0),
    };
    let segments: Vec<u64> = wal::list_segments(data)?
        .into_iter()
        .filter(|&n| n >= replay_from)
        .collect();
    let last = segments.last().copied();
    for &seg in &segments {
        let path = layout::segment_path(data, seg);
        let buf = std::fs::read(&path)?;
        let mut at = 0;
        loop {
            match record::decode(&buf[at..]) {
                Ok(Some((rec, used))) => {
                    engine.replay(rec, now)?;
                    at += used;
                    report.records_replayed += 1;
                }
                Ok(None) => break,
                Err(e) if Some(seg) == last => {
                    tracing::warn!(segment = seg, at, error = %e, "dropping a torn record at the end of the log");
                    // The zeros the segment was filled with ahead are not
                    // part of what was torn.
                    report.torn_bytes_dropped =
                        buf[at..].iter().rposition(|b| *b != 0).map_or(0, |p| p + 1) as u64;
                    let f = std::fs::OpenOptions::new().write(true).open(&path)?;
                    f.set_len(at as u64)?;
                    f.sync_all()?;
                    break;
                }
                Err(e) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("WAL segment {seg} is corrupt at byte {at}: {e}"),
                    ));
                }
            }
        }
        report.bytes_replayed += at as u64;
        report.segments_replayed += 1;
    }
    // Cut each stream file to what it held at the checkpoint (dropping bytes
    // written ahead of a sync that never completed), then write the replayed
    // tail after it; remove files of deleted streams.
    let live: HashSet<u64> = engine.entries.values().map(|e| e.core.id).collect();
    for entry in engine.entries.values() {
        let flushed = entry.view.flushed();
        if entry.file.metadata()?.len() != flushed {
            entry.file.set_len(flushed)?;
        }
        entry.view.flush()?;
        debug_assert_eq!(entry.view.flushed(), entry.core.len);
        // Readers see the replayed state, not the one the view was built with.
        entry.view.publish(entry.tail());
        entry.view.set_snapshot(entry.core.snapshot.clone());
        // Sealed chunks are read from object storage (replay may have
        // written some of their bytes again).
        entry.view.drop_sealed(entry.core.sealed);
    }
    for dirent in std::fs::read_dir(layout::streams_dir(data))? {
        let dirent = dirent?;
        if let Some(id) = dirent
            .file_name()
            .to_str()
            .and_then(layout::parse_stream_file)
        {
            if !live.contains(&id) {
                std::fs::remove_file(dirent.path())?;
            }
        }
    }
    report.streams = engine.entries.len();
    let next_segment = segments
        .last()
        .map_or(replay_from, |n| n + 1)
        .max(replay_from);
    let wal = Wal::create(data, next_segment)?;
    Ok((engine, wal, report))
}
