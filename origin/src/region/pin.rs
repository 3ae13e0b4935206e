//! The region's partition count, pinned in the bucket by its first origin
//! (`region/partitions.json`, a create-only put): a stream's partition is
//! a hash of its path modulo the count, so an origin started with another
//! count would look for streams where they are not. It refuses to start.

use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use serde::{Deserialize, Serialize};

use crate::objects::keys;

#[derive(Serialize, Deserialize)]
struct Pinned {
    partitions: u32,
}

/// Pins `partitions` if the bucket has no count yet; an error naming both
/// if it has another.
pub async fn partitions(store: &dyn ObjectStore, partitions: u32) -> std::io::Result<()> {
    let key = keys::region_partitions();
    let mine = serde_json::to_vec(&Pinned { partitions }).expect("serializes");
    let create = PutOptions {
        mode: PutMode::Create,
        ..Default::default()
    };
    let pinned = match store.put_opts(&key, PutPayload::from(mine), create).await {
        Ok(_) if partitions == 1 => return Ok(()),
        Ok(_) => {
            // A bucket of a region from before the pin had one partition.
            use futures::StreamExt;
            let older = store.list(Some(&keys::partition_epochs(0))).next().await;
            if older.is_some()
                && store
                    .list(Some(&keys::partition_epochs(1)))
                    .next()
                    .await
                    .is_none()
            {
                let _ = store.delete(&key).await;
                return Err(std::io::Error::other(
                    "this region's bucket was made with one partition (before the count was pinned); start it with --region-partitions 1",
                ));
            }
            return Ok(());
        }
        Err(object_store::Error::AlreadyExists { .. }) => store
            .get(&key)
            .await
            .map_err(std::io::Error::other)?
            .bytes()
            .await
            .map_err(std::io::Error::other)?,
        Err(e) => return Err(std::io::Error::other(e)),
    };
    let pinned: Pinned = serde_json::from_slice(&pinned)
        .map_err(|e| std::io::Error::other(format!("{key} is not a partition count: {e}")))?;
    if pinned.partitions != partitions {
        return Err(std::io::Error::other(format!(
            "this region's bucket has {} partitions (pinned at its start); --region-partitions {} would move streams away from their data",
            pinned.partitions, partitions
        )));
    }
    Ok(())
}
