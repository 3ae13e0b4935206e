//! Garbage collection in object storage: chunks wholly before a stream's
//! retained offset, replaced snapshots, and everything of a deleted
//! incarnation.
//!
//! Every deletion waits a grace period after the change that made the object
//! garbage: a reader that looked at the stream just before (and is now
//! fetching the chunk, or streaming the old snapshot) finishes first. Reads
//! that start after the change never ask for the object: they answer 410
//! (before retention), 404 (not the latest snapshot) or 412/404 (another
//! incarnation). Pending deletions live in memory; after a restart, garbage
//! of that moment stays until an operator's lifecycle rule removes it (the
//! log never points at it again).

use std::time::Duration;

use object_store::path::Path;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::objects::instrumented::Objects;

#[derive(Debug)]
pub enum Garbage {
    Key(Path),
    /// Every object under the prefix.
    Prefix(Path),
}

pub struct Janitor {
    pub objects: Objects,
    pub grace: Duration,
}

const TRIES: u32 = 5;

impl Janitor {
    pub async fn run(self, mut jobs: mpsc::UnboundedReceiver<(Instant, Garbage)>) {
        while let Some((at, garbage)) = jobs.recv().await {
            tokio::time::sleep_until(at + self.grace).await;
            let mut wait = Duration::from_millis(200);
            for attempt in 1..=TRIES {
                let result = match &garbage {
                    Garbage::Key(key) => self.objects.delete(key).await,
                    Garbage::Prefix(prefix) => self.objects.delete_prefix(prefix).await,
                };
                match result {
                    Ok(()) => break,
                    Err(e) if attempt == TRIES => {
                        tracing::warn!(?garbage, error = %e, "could not delete garbage from object storage; leaving it");
                    }
                    Err(_) => {
                        tokio::time::sleep(wait).await;
                        wait *= 2;
                    }
                }
            }
        }
    }
}
