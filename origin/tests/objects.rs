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

/// An S3 endpoint without a scheme and host (here an empty
/// `AWS_ENDPOINT_URL`, as a deployment that templates it may leave) stops
/// the origin at its start with a message naming it, not a panic at the
/// first request it signs.
#[test]
fn an_empty_endpoint_stops_the_start_with_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_origin"))
        .args(["--listen", "127.0.0.1:0", "--object-store", "s3://bucket/p"])
        .arg("--data")
        .arg(dir.path())
        .env("AWS_ENDPOINT_URL", "")
        .env("AWS_ACCESS_KEY_ID", "any")
        .env("AWS_SECRET_ACCESS_KEY", "any")
        .env("AWS_REGION", "us-east-1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if std::time::Instant::now() > deadline {
            child.kill().unwrap();
            panic!("the origin started with an empty endpoint");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(stderr.contains("AWS_ENDPOINT_URL"), "{stderr}");
    assert!(stderr.contains("S3 endpoint"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}
