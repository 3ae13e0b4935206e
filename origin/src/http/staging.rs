//! The staging directory (`{data}/staging`) kept to the ledger of
//! [`crate::core::staging`]: the ledger decides which part may be staged and
//! which upload goes; this file does the I/O, one directory per upload and
//! one file per part, and shows the totals as metrics.
//!
//! A part's file is written in a task of its own: a client that goes away
//! mid-write drops its request's future, and the ledger must still learn
//! how the write ended, or what is on disk and what is counted part ways.
//! The directory is emptied at start (`Store::open`), so the ledger starts
//! empty too. In a region every part is in the bucket as well, and an
//! upload an earlier owner of the partition staged is brought back from
//! there (`staging_bucket`).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use super::error::ApiError;
use super::staging_bucket::StagingBucket;
use super::HttpConfig;
use crate::core::staging::{Removals, StagedUploads, StagingBounds, UploadId, UploadKey};
use crate::core::Millis;
use crate::metrics::Metrics;

pub struct Staging {
    root: PathBuf,
    ledger: Mutex<StagedUploads>,
    metrics: Arc<Metrics>,
    /// In a region: the bucket's copy, each upload's name there (one per
    /// upload in the ledger), one upload brought back at a time, and when
    /// the bucket was last swept.
    bucket: Option<StagingBucket>,
    names: Mutex<std::collections::HashMap<UploadId, String>>,
    bringing: tokio::sync::Mutex<()>,
    swept: Mutex<Millis>,
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
            bucket: None,
            names: Default::default(),
            bringing: Default::default(),
            swept: Mutex::new(0),
        })
    }

    /// The same, with every part also in the bucket (a region's partition).
    pub fn in_bucket(
        root: PathBuf,
        config: &HttpConfig,
        metrics: Arc<Metrics>,
        bucket: StagingBucket,
    ) -> Arc<Staging> {
        let mut staging = Arc::into_inner(Self::new(root, config, metrics)).expect("just made");
        staging.bucket = Some(bucket);
        Arc::new(staging)
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
        self.bring_back(&key, now).await?;
        self.stage_here(key, part, bytes, now, true).await
    }

    /// Stages a part; `copy` puts it in the bucket too (in a region).
    async fn stage_here(
        self: &Arc<Self>,
        key: UploadKey,
        part: u32,
        bytes: Bytes,
        now: Millis,
        copy: bool,
    ) -> Result<(), ApiError> {
        let id = self
            .ledger
            .lock()
            .admit_part(&key, part, bytes.len() as u64, now)
            .map_err(ApiError::Staging)?;
        self.show();
        let name = self.bucket.as_ref().map(|_| {
            self.names
                .lock()
                .entry(id)
                .or_insert_with(|| StagingBucket::name(&key))
                .clone()
        });
        let this = Arc::clone(self);
        let written = tokio::spawn(async move {
            let mut result = write_part(&this.dir(id), part, &bytes)
                .await
                .map_err(ApiError::from);
            if let (Ok(()), Some(bucket), Some(name), true) = (&result, &this.bucket, &name, copy) {
                if let Err(e) = bucket.put_part(name, part, bytes).await {
                    tracing::warn!(error = %e, "could not put a staged snapshot part in the bucket");
                    result = Err(ApiError::Busy(
                        "object storage cannot take the snapshot part right now; retry shortly",
                    ));
                }
            }
            let removals = this
                .ledger
                .lock()
                .part_written(&key, id, part, result.is_ok());
            this.remove(removals).await;
            result
        })
        .await;
        match written {
            Ok(result) => result,
            Err(e) => Err(ApiError::Internal(format!("staging a part: {e}"))),
        }
    }

    /// In a region: `key`'s upload as an earlier owner of the partition
    /// staged it, brought here from the bucket if this owner has no record
    /// of it (a bucket that does not answer: 503).
    pub async fn bring_back(
        self: &Arc<Self>,
        key: &UploadKey,
        now: Millis,
    ) -> Result<(), ApiError> {
        let Some(bucket) = &self.bucket else {
            return Ok(());
        };
        if self.ledger.lock().has(key) {
            return Ok(());
        }
        let _one = self.bringing.lock().await;
        if self.ledger.lock().has(key) {
            return Ok(());
        }
        let parts = bucket.parts(&StagingBucket::name(key)).await.map_err(|e| {
            tracing::warn!(error = %e, "could not read staged snapshot parts from the bucket");
            ApiError::Busy(
                "object storage cannot give the staged snapshot parts right now; retry shortly",
            )
        })?;
        for (part, bytes) in parts {
            self.stage_here(key.clone(), part, bytes, now, false)
                .await?;
        }
        Ok(())
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
        let every =
            u64::try_from(super::staging_bucket::SWEEP_EVERY.as_millis()).unwrap_or(u64::MAX);
        if let Some(bucket) = &self.bucket {
            let due = {
                let mut swept = self.swept.lock();
                let due = now.saturating_sub(*swept) >= every;
                if due {
                    *swept = now;
                }
                due
            };
            if due {
                let held: std::collections::HashSet<String> =
                    self.names.lock().values().cloned().collect();
                bucket.sweep(now, &held).await;
            }
        }
    }

    /// Removes the directories of dropped uploads; the metrics change once
    /// they are gone.
    async fn remove(&self, removals: Removals) {
        for &id in &removals {
            let name = self.names.lock().remove(&id);
            if let (Some(bucket), Some(name)) = (&self.bucket, name) {
                bucket.delete_upload(&name).await;
            }
        }
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
