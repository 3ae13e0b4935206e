//! The staging directory (`{data}/staging`) kept to the ledger of
//! [`crate::core::staging`]: the ledger decides which part may be staged and
//! which upload goes; this file does the I/O, one directory per upload and
//! one file per part, and shows the totals as metrics.
//!
//! A part's file is written in a task of its own: a client that goes away
//! mid-write drops its request's future, and the ledger must still learn
//! how the write ended, or what is on disk and what is counted part ways.
//! The directory is emptied at start (`Store::open`), so the ledger starts
//! empty too.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use super::error::ApiError;
use super::HttpConfig;
use crate::core::staging::{Removals, StagedUploads, StagingBounds, UploadId, UploadKey};
use crate::core::Millis;
use crate::metrics::Metrics;

pub struct Staging {
    root: PathBuf,
    ledger: Mutex<StagedUploads>,
    metrics: Arc<Metrics>,
}

impl Staging {
    /// Staging under `root`, bounded as `config` says.
    pub fn new(root: PathBuf, config: &HttpConfig, metrics: Arc<Metrics>) -> Arc<Staging> {
        let bounds = StagingBounds {
            per_stream: config.max_staged_uploads_per_stream,
            total_bytes: config.max_staged_bytes,
            per_upload: config.max_snapshot,
            idle_ms: u64::try_from(config.staged_upload_ttl.as_millis()).unwrap_or(u64::MAX),
        };
        Arc::new(Staging {
            root,
            ledger: Mutex::new(StagedUploads::new(bounds)),
            metrics,
        })
    }

    fn dir(&self, id: UploadId) -> PathBuf {
        self.root.join(format!("{id:016x}"))
    }

    /// Stages part `part` of `key`'s upload: admitted by the ledger (a
    /// refusal writes nothing), then written (a part sent again replaces
    /// the old one).
    pub async fn stage(
        self: &Arc<Self>,
        key: UploadKey,
        part: u32,
        bytes: Bytes,
        now: Millis,
    ) -> Result<(), ApiError> {
        let id = self
            .ledger
            .lock()
            .admit_part(&key, part, bytes.len() as u64, now)
            .map_err(ApiError::Staging)?;
        self.show();
        let this = Arc::clone(self);
        let written = tokio::spawn(async move {
            let result = write_part(&this.dir(id), part, &bytes).await;
            let removals = this
                .ledger
                .lock()
                .part_written(&key, id, part, result.is_ok());
            this.remove(removals).await;
            result
        })
        .await;
        match written {
            Ok(result) => Ok(result?),
            Err(e) => Err(ApiError::Internal(format!("staging a part: {e}"))),
        }
    }

    /// Holds `key`'s upload for a publish that reads its parts; `None` when
    /// nothing is staged there.
    pub fn hold(self: &Arc<Self>, key: UploadKey, now: Millis) -> Option<Hold> {
        let id = self.ledger.lock().hold(&key, now)?;
        Some(Hold {
            staging: Arc::clone(self),
            key,
            id,
            released: false,
        })
    }

    /// Drops every upload of a deleted stream.
    pub async fn drop_stream(&self, path: &str) {
        let removals = self.ledger.lock().drop_stream(path);
        self.remove(removals).await;
    }

    /// Drops the uploads untouched for the staging TTL (the sweeper calls
    /// it once a second).
    pub async fn expire(&self, now: Millis) {
        let removals = self.ledger.lock().expire(now);
        if !removals.is_empty() {
            tracing::info!(uploads = removals.len(), "staged snapshot uploads expired");
        }
        self.remove(removals).await;
    }

    /// Removes the directories of dropped uploads; the metrics change once
    /// they are gone.
    async fn remove(&self, removals: Removals) {
        for id in removals {
            if let Err(e) = tokio::fs::remove_dir_all(self.dir(id)).await {
                if e.kind() != std::io::ErrorKind::NotFound {
                    tracing::warn!(error = %e, upload = id, "could not remove a staged upload");
                }
            }
        }
        self.show();
    }

    fn show(&self) {
        let (bytes, uploads) = {
            let l = self.ledger.lock();
            (l.charged_bytes(), l.upload_count())
        };
        self.metrics.set_staged(bytes, uploads);
    }
}

async fn write_part(dir: &Path, part: u32, bytes: &[u8]) -> std::io::Result<()> {
    tokio::fs::create_dir_all(dir).await?;
    let tmp = dir.join(format!("{part:05}.tmp"));
    tokio::fs::write(&tmp, bytes).await?;
    tokio::fs::rename(&tmp, dir.join(format!("{part:05}"))).await
}

/// A publish's hold on an upload: its directory stays while the hold lives.
/// Dropped without [`Hold::published`] (a failed publish, or a client gone),
/// the upload stays staged.
pub struct Hold {
    staging: Arc<Staging>,
    key: UploadKey,
    id: UploadId,
    released: bool,
}

impl Hold {
    /// The file of part `part`.
    pub fn part_file(&self, part: u32) -> PathBuf {
        self.staging.dir(self.id).join(format!("{part:05}"))
    }

    /// The parts are published: the upload goes, with its files.
    pub async fn published(mut self) {
        self.released = true;
        let removals = self.staging.ledger.lock().release(&self.key, self.id, true);
        self.staging.remove(removals).await;
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.released {
            return;
        }
        let removals = self
            .staging
            .ledger
            .lock()
            .release(&self.key, self.id, false);
        if removals.is_empty() {
            return;
        }
        // Dropped while this publish read it: its directory goes now.
        let staging = Arc::clone(&self.staging);
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                rt.spawn(async move { staging.remove(removals).await });
            }
            Err(_) => {
                for id in removals {
                    let _ = std::fs::remove_dir_all(staging.dir(id));
                }
            }
        }
    }
}
