//! Object storage against real servers: a folder on the local filesystem and
//! s3s-fs (an S3-compatible server, installed by `scripts/setup`) on loopback.

use bytes::Bytes;
use origin::objects::instrumented::{Objects, PutOutcome};
use origin::objects::{keys, open};
use shared::offset::{Offset, CHUNK_BYTES};

use crate::common;
use common::s3::S3sFs;

/// What every store must do for sealing: create-only puts that never
/// overwrite, whole and ranged reads, deletes.
async fn behaves_as_a_chunk_store(objects: &Objects) {
    let chunk: Vec<u8> = (0..CHUNK_BYTES).map(|i| (i * 7 % 251) as u8).collect();
    let key = keys::chunk("/v1/stream/objects", "1-feed", Offset(CHUNK_BYTES));
    assert_eq!(
        objects
            .put_new(&key, Bytes::from(chunk.clone()))
            .await
            .unwrap(),
        PutOutcome::Created
    );
    // A second writer of the same key changes nothing.
    assert_eq!(
        objects
            .put_new(&key, Bytes::from_static(b"other"))
            .await
            .unwrap(),
        PutOutcome::Existed
    );
    assert_eq!(objects.get(&key).await.unwrap(), chunk);
    assert_eq!(
        objects.get_range(&key, 1000..1010).await.unwrap(),
        chunk[1000..1010]
    );
    objects.delete(&key).await.unwrap();
    assert!(matches!(
        objects.get(&key).await,
        Err(object_store::Error::NotFound { .. })
    ));
    let stats = &objects.stats;
    assert_eq!(stats.puts.load(std::sync::atomic::Ordering::Relaxed), 1);
    assert_eq!(stats.deletes.load(std::sync::atomic::Ordering::Relaxed), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_local_folder_is_a_chunk_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(&format!("file://{}", dir.path().join("objects").display())).unwrap();
    behaves_as_a_chunk_store(&Objects::new(store)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3s_fs_is_a_chunk_store() {
    let server = S3sFs::start();
    behaves_as_a_chunk_store(&server.objects()).await;
}
