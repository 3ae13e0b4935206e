//! The writer's loop, one batch a turn: on a thread of its own ([`run`]:
//! it waits for the first command of a batch and, under load, gathers
//! more for `--commit-delay`), or in turns on a thread it shares with
//! other partitions' writers ([`turn`], `store::writer_pool`): a turn
//! never waits for a command, and takes what is queued as its batch.
//!
//! [`run`]: Writer::run
//! [`turn`]: Writer::turn

use std::sync::atomic::Ordering;

use tokio::sync::mpsc;

use super::gathering::gather;
use super::room;
use super::{AfterCommit, Command, Writer};

/// A writer's state between batches.
pub struct Turns {
    frames: Vec<u8>,
    after: Vec<AfterCommit>,
    /// Commands in the last batch (how long the next one gathers).
    last_batch: usize,
    /// A command that did not fit into the last batch's log room.
    carried: Option<Command>,
}

impl Default for Turns {
    fn default() -> Self {
        Turns {
            frames: Vec::with_capacity(1 << 20),
            after: Vec::new(),
            last_batch: 0,
            carried: None,
        }
    }
}

impl Turns {
    /// Whether a command waits from the last batch.
    pub fn carries(&self) -> bool {
        self.carried.is_some()
    }
}

/// What a turn on a shared thread did.
#[derive(Debug, PartialEq, Eq)]
pub enum Turn {
    /// Nothing was queued.
    Idle,
    /// A batch was committed.
    Worked,
    /// The writer stopped: with `finish`, it settles and checkpoints
    /// ([`Writer::finish`]); without, it failed (fenced, or its puts
    /// stopped) and has nothing more to do.
    Ended { finish: bool },
}

/// How one batch ended.
enum Batch {
    Committed,
    /// A `Shutdown` was in it.
    Stopping,
    /// It could not be made durable: the writer stops at once.
    Failed,
}

impl Writer {
    /// Runs on a thread of its own until every sender is gone or a
    /// `Shutdown` came, then finishes ([`Writer::finish`]).
    pub fn run(mut self, mut rx: mpsc::Receiver<Command>) {
        let slice = super::super::scheduling::ask_for_slice(super::super::scheduling::WRITER_SLICE);
        tracing::debug!(?slice, "the writer's time slice");
        let mut turns = Turns::default();
        loop {
            // Batches whose puts settled meanwhile are answered first.
            if self.object_wal.is_some() && !self.settle_ready() {
                self.publisher.close();
                return;
            }
            let first = match turns.carried.take() {
                Some(cmd) => cmd,
                None => match rx.blocking_recv() {
                    Some(cmd) => cmd,
                    None => break,
                },
            };
            match self.batch(first, &mut rx, &mut turns, true) {
                Batch::Committed => {}
                Batch::Stopping => break,
                Batch::Failed => return,
            }
        }
        self.finish();
    }

    /// One turn on a shared thread: the batch of what is queued, if
    /// anything is; never waits for a command.
    pub fn turn(&mut self, rx: &mut mpsc::Receiver<Command>, turns: &mut Turns) -> Turn {
        if self.object_wal.is_some() && !self.settle_ready() {
            self.publisher.close();
            return Turn::Ended { finish: false };
        }
        let first = match turns.carried.take() {
            Some(cmd) => cmd,
            None => match rx.try_recv() {
                Ok(cmd) => cmd,
                Err(mpsc::error::TryRecvError::Empty) => return Turn::Idle,
                Err(mpsc::error::TryRecvError::Disconnected) => {
                    return Turn::Ended { finish: true }
                }
            },
        };
        match self.batch(first, rx, turns, false) {
            Batch::Committed => Turn::Worked,
            Batch::Stopping => Turn::Ended { finish: true },
            Batch::Failed => Turn::Ended { finish: false },
        }
    }

    /// Decides `first` and what follows it in the queue as one batch and
    /// commits it. `gathers`: under concurrent load, wait a moment for more
    /// commands first, so that more appends share one sync (every sync
    /// costs the machine real CPU, which the requests need); a lone writer
    /// (small batches) never waits. A shared thread never gathers: the
    /// other stores' turns are its wait.
    fn batch(
        &mut self,
        first: Command,
        rx: &mut mpsc::Receiver<Command>,
        turns: &mut Turns,
        gathers: bool,
    ) -> Batch {
        if gathers
            && turns.last_batch >= self.config.commit_siblings
            && !self.config.commit_delay.is_zero()
        {
            gather(
                rx,
                self.config.commit_delay,
                turns.last_batch.saturating_sub(1),
            );
        }
        let now = self.clock.now_ms();
        let mut count = 0;
        let mut stopping = false;
        let mut next = Some(first);
        let Turns {
            frames,
            after,
            carried,
            ..
        } = turns;
        while let Some(cmd) = next.take() {
            if matches!(cmd, Command::Shutdown) {
                stopping = true;
                break;
            }
            // A region's feed events go at the batch's end: count them.
            let written = frames.len() + self.feed_frames.get_mut().len();
            match self.fits(cmd, written, after) {
                room::Fit::Apply(cmd) => self.handle(cmd, now, frames, after),
                room::Fit::Done => {} // refused: answered without a change
                room::Fit::Later(cmd) => {
                    *carried = Some(cmd);
                    break;
                }
            }
            count += 1;
            if count < self.config.max_batch_commands && frames.len() < self.config.max_batch_bytes
            {
                next = rx.try_recv().ok();
            }
        }
        turns.last_batch = count;
        if !self.commit(&mut turns.frames, &mut turns.after, count) {
            // Fenced (or stopped while the bucket did not answer): the
            // local state is ahead of what is acknowledged, so nothing
            // more is written; the queue's senders see the store gone.
            self.publisher.close();
            return Batch::Failed;
        }
        self.batches += 1;
        self.after_batch();
        if stopping {
            return Batch::Stopping;
        }
        self.maybe_checkpoint(false);
        Batch::Committed
    }

    /// The writer's end: every put in flight settles (or gives up), then a
    /// running checkpoint ends and a fresh one is left, so the next start
    /// replays nothing.
    pub fn finish(mut self) {
        if self.object_wal.is_some() && !self.settle_all() {
            self.publisher.close();
            return;
        }
        while self.checkpoint_running.load(Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        self.maybe_checkpoint(true);
        while self.checkpoint_running.load(Ordering::Acquire) {
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        self.publisher.close();
    }
}
