//! The writer's side of sealing: which chunks go to the sealer, the bound
//! on bytes waiting to be sealed, and what a durable seal changes.

use std::sync::Arc;

use shared::offset::{Offset, CHUNK_BYTES};

use super::super::janitor::Garbage;
use super::super::record::{self, Record};
use super::super::sealer::SealJob;
use super::super::view::StreamView;
use super::Writer;
use crate::objects::keys;

impl Writer {
    /// Gives the sealer the chunks queued so far (their bytes are durable).
    pub fn hand_over_seals(&mut self) {
        if let Some(jobs) = &self.seal_jobs {
            for job in self.pending_seals.drain(..) {
                let _ = jobs.send(job);
            }
        }
    }

    /// Queues the chunks of the stream at `path` that became ready to seal.
    pub fn queue_seals(&mut self, path: &str) {
        let entry = &self.engine.entries[path];
        let (core, view) = (&entry.core, Arc::clone(&entry.view));
        self.queue_seals_of(&view, core.len, core.closed, core.sealed);
    }

    /// [`Self::queue_seals`] for a stream already at hand (the append path
    /// looks a stream up once).
    pub fn queue_seals_of(&mut self, view: &Arc<StreamView>, len: u64, closed: bool, sealed: u64) {
        if self.seal_jobs.is_none() {
            return;
        }
        let requested = self
            .seal_requested
            .get(&view.id)
            .copied()
            .unwrap_or(0)
            .max(sealed);
        let mut queued = false;
        // A closed fork's last chunk that holds only inherited bytes is not
        // sealed: its source keeps them (an upload of up to 4 MiB for an
        // empty fork is not worth it).
        let inherited = view.inherited().map_or(0, |f| f.at);
        for (start, end) in crate::core::seal::all_sealable(len, closed, requested) {
            if end <= inherited {
                continue;
            }
            self.pending_seals.push(SealJob {
                view: Arc::clone(view),
                start,
                end,
            });
            self.seal_requested.insert(view.id, end);
            self.unsealed += end - start;
            queued = true;
        }
        if queued {
            self.metrics.set_unsealed(self.unsealed);
        }
    }

    /// Whether the bytes waiting to be sealed reached their bound: then
    /// writes answer 503 until sealing catches up (local disk stays bounded
    /// while object storage is down).
    pub(super) fn sealing_behind(&self) -> bool {
        self.seal_jobs.is_some() && self.unsealed >= self.config.max_unsealed_bytes
    }

    /// Bytes `[0, through)` of stream `id` are sealed: logged now, their
    /// local copy dropped once the batch is durable.
    pub(super) fn sealed(&mut self, id: u64, through: u64, frames: &mut Vec<u8>) {
        let Some(path) = self.engine.paths_by_id.get(&id) else {
            return;
        };
        let entry = self
            .engine
            .entries
            .get_mut(path)
            .expect("indexed streams exist");
        let core = &mut entry.core;
        if through <= core.sealed {
            return;
        }
        self.unsealed -= (through - core.sealed).min(self.unsealed);
        self.metrics.set_unsealed(self.unsealed);
        core.sealed = through;
        record::encode(&Record::Sealed { id, through }, frames);
        self.touched.insert(id);
        self.pending_drops.push((Arc::clone(&entry.view), through));
        // Sealed after retention passed it: garbage already.
        if through <= core.retained {
            let start = (through - 1) - (through - 1) % CHUNK_BYTES;
            self.pending_gc.push(Garbage::Key(keys::chunk(
                &core.path,
                &core.incarnation,
                Offset(start),
            )));
        }
    }
}
