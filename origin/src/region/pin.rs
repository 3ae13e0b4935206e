//! The region's partition count and format, pinned in the bucket by its
//! first origin (`region/partitions.json`, a create-only put): a stream's
//! partition is a hash of its path modulo the count, so an origin started
//! with another count would look for streams where they are not, and one
//! that does not know the bucket's format would misread it. Either
//! refuses to start. A later version that changes what the bucket holds
//! raises [`FORMAT`], so older binaries stop at the gate instead of
//! serving (or fencing) what they cannot read.

use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::objects::keys;

/// The newest format of the region's objects this build writes and
/// reads: 1, a WAL per partition (epochs); 2, one WAL per origin
/// (tenures, decision 0028). The two cannot share a bucket (an origin of
/// one would not see the other's owners), so the format a region's first
/// origin pins is also its layout: an origin started with the other one
/// refuses to start, and a build that knows only format 1 refuses a
/// bucket of format 2.
pub const FORMAT: u32 = 2;

/// The format of a region with one WAL per origin (`true`) or a WAL per
/// partition.
pub fn format_of(one_wal: bool) -> u32 {
    if one_wal {
        2
    } else {
        1
    }
}

#[derive(Serialize, Deserialize)]
struct Pinned {
    partitions: u32,
    /// Absent in buckets pinned before it was: format 1.
    #[serde(default = "first_format")]
    format: u32,
}

fn first_format() -> u32 {
    1
}

/// Why the count could not be pinned.
#[derive(Debug, thiserror::Error)]
pub enum PinError {
    /// The bucket has another count: this origin must not start.
    #[error("{0}")]
    Mismatch(String),
    /// The bucket could not be read or written: try again.
    #[error("the bucket: {0}")]
    Bucket(#[from] std::io::Error),
}

/// The layout of the region in `store` (`--region-wal auto`): one WAL per
/// origin (`true`) or a WAL per partition, as pinned; with no pin yet, a
/// WAL per partition if the bucket holds epoch claims (a region from
/// before the pin), else one WAL per origin (a new region). A bucket of a
/// newer format reads as one WAL per origin, and the pin then refuses it.
pub async fn one_wal_in(store: &dyn ObjectStore) -> std::io::Result<bool> {
    match store.get(&keys::region_partitions()).await {
        Ok(got) => {
            let bytes = got.bytes().await.map_err(std::io::Error::other)?;
            let pinned: Pinned = serde_json::from_slice(&bytes).map_err(std::io::Error::other)?;
            Ok(pinned.format >= format_of(true))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(!has_epoch_claims(store, 0).await?),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

/// Whether partition `p` has any epoch claim (a WAL per partition).
async fn has_epoch_claims(store: &dyn ObjectStore, p: u32) -> std::io::Result<bool> {
    use futures::StreamExt;
    match store.list(Some(&keys::partition_epochs(p))).next().await {
        None => Ok(false),
        Some(Ok(_)) => Ok(true),
        Some(Err(e)) => Err(std::io::Error::other(e)),
    }
}

/// Pins `partitions` if the bucket has no count yet; an error naming both
/// if it has another.
pub async fn partitions(
    store: &dyn ObjectStore,
    partitions: u32,
    one_wal: bool,
) -> Result<(), PinError> {
    let key = keys::region_partitions();
    let format = format_of(one_wal);
    let mine = serde_json::to_vec(&Pinned { partitions, format }).expect("serializes");
    let create = PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    let existing = match store.get(&key).await {
        Ok(got) => Some(got.bytes().await.map_err(std::io::Error::other)?),
        Err(object_store::Error::NotFound { .. }) => None,
        Err(e) => return Err(std::io::Error::other(e).into()),
    };
    if existing.is_none() && partitions != 1 {
        // No pin yet: a bucket of a region from before the pin, whose
        // claims are of partition 0 alone, had one partition.
        if has_epoch_claims(store, 0).await? && !has_epoch_claims(store, 1).await? {
            return Err(PinError::Mismatch(
                "this region's bucket was made with one partition (before the count was pinned); start it with --region-partitions 1".into(),
            ));
        }
    }
    let pinned = match existing {
        Some(bytes) => bytes,
        None => match store.put_opts(&key, PutPayload::from(mine), create).await {
            Ok(_) => return Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => store
                .get(&key)
                .await
                .map_err(std::io::Error::other)?
                .bytes()
                .await
                .map_err(std::io::Error::other)?,
            Err(e) => return Err(std::io::Error::other(e).into()),
        },
    };
    let pinned: Pinned = serde_json::from_slice(&pinned)
        .map_err(|e| PinError::Mismatch(format!("{key} is not a partition count: {e}")))?;
    if pinned.format > FORMAT {
        return Err(PinError::Mismatch(format!(
            "this region's bucket is of format {} (a newer version of this server wrote it); this one reads format {FORMAT}: upgrade it",
            pinned.format
        )));
    }
    if pinned.format != format {
        let layout = |f: u32| if f == 2 { "origin" } else { "partition" };
        return Err(PinError::Mismatch(format!(
            "this region's bucket writes one WAL per {} (pinned at its start); start every origin of the region with --region-wal {}",
            layout(pinned.format),
            layout(pinned.format)
        )));
    }
    if pinned.partitions != partitions {
        return Err(PinError::Mismatch(format!(
            "this region's bucket has {} partitions (pinned at its start); --region-partitions {} would move streams away from their data",
            pinned.partitions, partitions
        )));
    }
    Ok(())
}
