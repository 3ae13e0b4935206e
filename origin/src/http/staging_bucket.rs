//! Staged snapshot parts in the bucket, in a region (`--durability
//! object`): a part is answered only once it is in the bucket too, under
//! its partition (`region/partitions/{p}/staging/{upload}/{part:05}`), so
//! the partition's next owner has it when the last one vanished with its
//! disk. The local files stay what a publish reads; the bucket is the copy
//! that moves with the partition.
//!
//! - An owner that meets an upload it has no record of (a part, or a
//!   publish) first brings that upload's parts here from the bucket, as it
//!   would stage them (the same bounds apply).
//! - An upload that goes (published, its stream deleted, idle past the
//!   staging TTL) goes from the bucket too.
//! - One that no owner meets again (its client gave up during a takeover)
//!   is deleted by age: every [`SWEEP_EVERY`] the owner deletes the parts
//!   older than the staging TTL that belong to no upload it holds.
//!
//! `upload` is the SHA-256 of the stream's path, incarnation and offset, so
//! one upload's parts share a prefix and no client can name another's.

use std::collections::HashSet;
use std::time::Duration;

use bytes::Bytes;
use object_store::path::Path;
use sha2::{Digest, Sha256};

use crate::core::staging::UploadKey;
use crate::core::Millis;
use crate::objects::instrumented::Objects;
use crate::objects::keys;

/// How often the parts of uploads no owner met again are looked for.
pub const SWEEP_EVERY: Duration = Duration::from_secs(60);

pub struct StagingBucket {
    objects: Objects,
    prefix: Path,
    ttl_ms: u64,
}

impl StagingBucket {
    pub fn new(objects: Objects, partition: u32, ttl: Duration) -> StagingBucket {
        StagingBucket {
            objects,
            prefix: keys::partition_staging(partition),
            ttl_ms: u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX),
        }
    }

    /// The name of `key`'s upload in the bucket.
    pub fn name(key: &UploadKey) -> String {
        let mut h = Sha256::new();
        for field in [key.path.as_bytes(), key.incarnation.as_bytes()] {
            h.update((field.len() as u64).to_le_bytes());
            h.update(field);
        }
        h.update(key.offset.to_le_bytes());
        h.finalize()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }

    fn upload(&self, name: &str) -> Path {
        self.prefix.clone().join(name)
    }

    pub async fn put_part(&self, name: &str, part: u32, bytes: Bytes) -> std::io::Result<()> {
        let key = self.upload(name).join(format!("{part:05}"));
        self.objects
            .put(&key, bytes)
            .await
            .map_err(std::io::Error::other)
    }

    /// The parts of upload `name` in the bucket, by number.
    pub async fn parts(&self, name: &str) -> std::io::Result<Vec<(u32, Bytes)>> {
        let listed = self
            .objects
            .list(&self.upload(name))
            .await
            .map_err(std::io::Error::other)?;
        let mut parts = Vec::with_capacity(listed.len());
        for meta in listed {
            let Some(part) = meta
                .location
                .filename()
                .filter(|f| f.len() == 5)
                .and_then(|f| f.parse::<u32>().ok())
            else {
                continue;
            };
            let bytes = self
                .objects
                .get(&meta.location)
                .await
                .map_err(std::io::Error::other)?;
            parts.push((part, bytes));
        }
        parts.sort_by_key(|(n, _)| *n);
        Ok(parts)
    }

    pub async fn delete_upload(&self, name: &str) {
        if let Err(e) = self.objects.delete_prefix(&self.upload(name)).await {
            tracing::warn!(error = %e, upload = name, "could not delete a staged upload's parts from the bucket; the sweep will");
        }
    }

    /// Deletes the parts older than the staging TTL at `now` (wall clock,
    /// ms) of the uploads not in `held`.
    pub async fn sweep(&self, now: Millis, held: &HashSet<String>) {
        let listed = match self.objects.list(&self.prefix).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, "could not list the staged parts in the bucket");
                return;
            }
        };
        for meta in listed {
            let name = meta.location.parts().nth_back(1);
            let Some(name) = name.map(|p| p.as_ref().to_owned()) else {
                continue;
            };
            let written = u64::try_from(meta.last_modified.timestamp_millis()).unwrap_or(0);
            if held.contains(&name) || now.saturating_sub(written) < self.ttl_ms {
                continue;
            }
            if let Err(e) = self.objects.delete(&meta.location).await {
                tracing::warn!(error = %e, "could not delete an old staged part");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upload_is_named_by_all_its_key() {
        let key = |path: &str, inc: &str, offset| UploadKey {
            path: path.into(),
            incarnation: inc.into(),
            offset,
        };
        let a = StagingBucket::name(&key("/a", "1-x", 5));
        assert_eq!(a.len(), 32);
        assert_eq!(a, StagingBucket::name(&key("/a", "1-x", 5)));
        assert_ne!(a, StagingBucket::name(&key("/a", "1-x", 6)));
        assert_ne!(a, StagingBucket::name(&key("/a", "1-y", 5)));
        assert_ne!(a, StagingBucket::name(&key("/b", "1-x", 5)));
        // The lengths keep the fields apart.
        assert_ne!(
            StagingBucket::name(&key("/a\u{0}1", "x", 5)),
            StagingBucket::name(&key("/a", "1\u{0}x", 5))
        );
    }
}
