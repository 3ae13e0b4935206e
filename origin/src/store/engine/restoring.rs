//! A rollback in the stream table (`core::restore`, decision 0029): the
//! replaced stream leaves its path, the new incarnation takes it. The
//! writer and recovery (and a region's replicas) apply the one logged
//! record through this one step, so they come to the same table.

use std::io;

use super::{Deletion, Engine};
use crate::core::Millis;
use crate::store::saved::SavedStream;

impl Engine {
    /// Replaces stream `previous` at its path by `saved` (a fork of it or
    /// of one of its sources, with no bytes of its own). The replaced
    /// stream is detached (keyed off its path, see `StreamCore::key`) and
    /// deleted as any stream is: soft while forks read it (the new one
    /// among them, unless it forks an older source), else removed with the
    /// soft-deleted sources it was the last fork of. Returns that deletion.
    pub fn restore_stream(
        &mut self,
        previous: u64,
        saved: SavedStream,
        now: Millis,
    ) -> io::Result<Option<Deletion>> {
        let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
        let Some(key) = self.paths_by_id.get(&previous).cloned() else {
            return Err(bad(format!("a rollback of unknown stream {previous}")));
        };
        let mut entry = self.entries.remove(&key).expect("indexed");
        if entry.core.path != saved.core.path || entry.core.detached {
            let path = entry.core.path.clone();
            self.entries.insert(key, entry);
            return Err(bad(format!(
                "a rollback of stream {previous} at {path} names {}",
                saved.core.path
            )));
        }
        entry.core.detached = true;
        let detached = entry.core.key();
        self.paths_by_id.insert(previous, detached.clone());
        self.entries.insert(detached.clone(), entry);
        // Its bytes start at its fork point: none of a file a stream of this
        // id had before may show.
        self.disk.files.forget(saved.core.id);
        self.restore(saved, now);
        Ok(self.delete(&detached))
    }
}
