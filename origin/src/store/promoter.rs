//! The promoter: a thread that copies streams' log-only bytes into their own
//! files (see `warm`), so the writer thread never waits on a file system.
//!
//! Creating and writing a stream's file stalled the writer up to a tenth of
//! a millisecond each (a new inode and directory entry, journaled); with
//! thousands of streams promoted per second, every append waited behind
//! them (`docs/decisions/0008-stream-layout.md`). Here the writer hands a
//! stream over, goes on, and hears back through its queue
//! ([`Command::Promoted`]): only then does it forget the extents the copy
//! covers, so until then the bytes are read from the log as before and no
//! segment they are in can be deleted. Appends made meanwhile stay in the
//! log for the next promotion. A stream is handed over once at a time.

use std::sync::Arc;

use super::view::StreamView;
use super::writer::Command;

/// Promotes the streams it is handed, in order, until the writer goes.
/// A job: the stream and the durable end to promote it up to.
pub type Job = (Arc<StreamView>, u64);

pub fn run(jobs: std::sync::mpsc::Receiver<Job>, writer: super::writer_pool::CommandTx) {
    while let Ok((view, through)) = jobs.recv() {
        let done = match view.promote(through) {
            Ok(written) => Command::Promoted {
                id: view.id,
                through: Some(through),
                written,
            },
            Err(e) => {
                tracing::warn!(stream = %view.path, error = %e, "could not copy a stream's bytes into its file; they stay in the log");
                Command::Promoted {
                    id: view.id,
                    through: None,
                    written: 0,
                }
            }
        };
        if writer.blocking_send(done).is_err() {
            return; // the writer stopped
        }
    }
}
