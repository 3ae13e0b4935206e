//! Room in the log before a command is applied: a full disk (or no
//! descriptor for a new segment) answers `503` + `Retry-After` to the
//! writes that do not fit, and the server goes on serving everything else.
//!
//! The writer applies a command to the stream table as it encodes it, so a
//! batch that could not then be written would leave the table ahead of the
//! log: the only safe answer to a failed log write is to stop and recover
//! from the log (a failed `fdatasync` leaves the page cache untrusted as
//! well). So a batch is written only into log bytes prepared beforehand
//! (zeros, synced; see `wal`), and a command is applied only when its
//! frames fit into them: [`log_bytes`] bounds what a command can write;
//! when it does not fit, the batch so far is committed and the command
//! starts the next, which prepares room first. Preparing fails on a full
//! disk without writing anything the log would read; the client commands
//! that do not fit are refused with [`StoreError::LogFull`], and the
//! writer's own (seals, expiry) keep [`LOG_RESERVE`] for themselves. Once
//! space returns, the next preparation succeeds.

use super::super::error::StoreError;
use super::{AfterCommit, Command, Writer};

/// Log kept for the writer's own records (seals, expiry's deletes of one
/// tick: 10,000 of ~30 B, ~100 B more each with a region's feed event)
/// once client writes are refused for want of room.
pub const LOG_RESERVE: u64 = 4 * 1024 * 1024;

/// What a record's fields besides its payload take at most: paths (1 KiB),
/// content types, producer ids (256 B), `Stream-Seq`, a snapshot's digest.
const FIELDS: u64 = 64 * 1024;

/// What a change that reaches a stream's forks may add in a region's feed
/// events (one of ~100 B per fork it reaches: a retention or a snapshot
/// reaching 2,500 forks, a delete letting that many soft-deleted sources
/// go). A change past it writes into the reserve.
const FORK_EVENTS: u64 = 256 * 1024;

/// The most a rollback's state can take in the log: the stream's
/// producers with their receipts (at most `MAX_PRODUCERS_PER_STREAM` of
/// ids up to 256 B and 16 receipts, under 800 KiB) and its other fields.
const RESTORE_STATE: u64 = 1024 * 1024;

/// The most log a command can write, and whether it is a client's.
pub fn log_bytes(cmd: &Command) -> (u64, bool) {
    match cmd {
        Command::Create { payload, .. }
        | Command::Fork { payload, .. }
        | Command::Append { payload, .. } => (payload.len() as u64 + FIELDS, true),
        Command::Delete { .. } | Command::Snapshot { .. } | Command::Retain { .. } => {
            (FIELDS + FORK_EVENTS, true)
        }
        Command::SetPublic { .. } => (FIELDS, true),
        Command::Restore { .. } => (FIELDS + FORK_EVENTS + RESTORE_STATE, true),
        // Refused like a client's: the replica is rebuilt later.
        Command::Replicate { objects, .. } => (
            objects.iter().map(|o| o.len() as u64).sum::<u64>() + FIELDS,
            true,
        ),
        Command::Tick => (LOG_RESERVE / 2, false),
        Command::Wake => (0, false),
        Command::Sealed { .. } | Command::Promoted { .. } | Command::Shutdown => (FIELDS, false),
    }
}

/// What becomes of a command, for the room it needs in the log.
pub enum Fit {
    /// Apply it in this batch.
    Apply(Command),
    /// It starts the next batch (this one is committed first).
    Later(Command),
    /// Refused (answered) or dropped: nothing to apply.
    Done,
}

impl Writer {
    /// Whether `cmd` may be applied in this batch (whose frames so far are
    /// `written` bytes): yes when it fits into the prepared log; when the
    /// batch is empty, after preparing room for it.
    pub(super) fn fits(
        &mut self,
        cmd: Command,
        written: usize,
        after: &mut Vec<AfterCommit>,
    ) -> Fit {
        let (need, client) = log_bytes(&cmd);
        let want = need + if client { LOG_RESERVE } else { 0 };
        // Extents address a segment with 32 bits: a segment that could not
        // be rotated (no descriptor) takes no more than that.
        let segment_left = u64::from(u32::MAX).saturating_sub(self.wal.written);
        // Looked up once per batch: within one the log's end stays put and
        // the prepared room only grows, so the first look holds for all.
        if written == 0 {
            self.batch_room = self.wal.room();
        }
        if self.batch_room.min(segment_left) >= written as u64 + want {
            return Fit::Apply(cmd);
        }
        if written > 0 {
            return Fit::Later(cmd); // commit what the batch has, then prepare
        }
        let prepared = if segment_left < want {
            Err(std::io::Error::other(
                "the log segment is full and could not be rotated",
            ))
        } else {
            self.wal.prepare(want)
        };
        match prepared {
            Ok(()) => {
                self.batch_room = self.wal.room();
                Fit::Apply(cmd)
            }
            Err(e) if client => {
                self.metrics.log_full();
                tracing::warn!(error = %e, "no room in the log; refusing a write");
                refuse(cmd, after);
                Fit::Done
            }
            // The writer's own, within the reserve kept for them (a tick
            // comes again in a second; a seal is a few bytes).
            Err(_) if matches!(cmd, Command::Tick) && self.wal.room() < need => Fit::Done,
            Err(_) => Fit::Apply(cmd),
        }
    }
}

/// Answers a client's command 503 without applying it.
fn refuse(cmd: Command, after: &mut Vec<AfterCommit>) {
    fn full<T>() -> Result<T, StoreError> {
        Err(StoreError::LogFull)
    }
    let answer: Box<dyn FnOnce() + Send> = match cmd {
        Command::Create { reply, .. } | Command::Fork { reply, .. } => Box::new(move || {
            let _ = reply.send(full());
        }),
        Command::Append { reply, .. } => {
            after.push(AfterCommit::Appended(reply, full()));
            return;
        }
        Command::Delete { reply, .. }
        | Command::Snapshot { reply, .. }
        | Command::SetPublic { reply, .. }
        | Command::Retain { reply, .. }
        | Command::Replicate { reply, .. } => Box::new(move || {
            let _ = reply.send(full());
        }),
        Command::Restore { reply, .. } => Box::new(move || {
            let _ = reply.send(full());
        }),
        Command::Tick
        | Command::Wake
        | Command::Sealed { .. }
        | Command::Promoted { .. }
        | Command::Shutdown => return,
    };
    after.push(AfterCommit::Reply(answer));
}
