//! Object storage against real servers: a folder on the local filesystem and
//! s3s-fs (an S3-compatible server, installed by `.ci/run`) on loopback.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

use bytes::Bytes;
use origin::objects::instrumented::{Objects, PutOutcome};
use origin::objects::{keys, open, open_with};
use shared::offset::{Offset, CHUNK_BYTES};

/// An s3s-fs server on a free loopback port with one bucket, `chunks`.
struct S3sFs {
    child: Child,
    endpoint: String,
    _root: tempfile::TempDir,
}

impl S3sFs {
    fn start() -> S3sFs {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.path().join("chunks")).unwrap();
        let mut child = Command::new("s3s-fs")
            .args(["--host", "127.0.0.1", "--port", "0", "--access-key", "test-key", "--secret-key", "test-secret"])
            .arg(root.path())
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("s3s-fs is installed (cargo install s3s-fs --version 0.14.1 --locked --features binary)");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let endpoint = loop {
            let line = lines.next().expect("s3s-fs prints its address").unwrap();
            if let Some(at) = line.find("http://") {
                break line[at..].trim().to_owned();
            }
        };
        std::thread::spawn(move || for _ in lines {});
        S3sFs {
            child,
            endpoint,
            _root: root,
        }
    }

    fn objects(&self) -> Objects {
        let store = open_with(
            "s3://chunks/origin-test",
            &[
                ("aws_endpoint", &self.endpoint),
                ("aws_access_key_id", "test-key"),
                ("aws_secret_access_key", "test-secret"),
                ("aws_region", "us-east-1"),
                ("aws_allow_http", "true"),
                ("aws_virtual_hosted_style_request", "false"),
            ],
        )
        .unwrap();
        Objects::new(store)
    }
}

impl Drop for S3sFs {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
