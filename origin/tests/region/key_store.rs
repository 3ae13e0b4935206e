//! The region's key store in the bucket (`region::auth_sync::KeyStore`):
//! every put is conditional on the version its origin last read or put,
//! so of origins that change it from one version, exactly one puts and
//! the others take the bucket's, dropping their own change (the admin API
//! then answers 503, having changed nothing).

use std::path::Path;

use origin::region::auth_sync::{KeyStore, Published};

use crate::common::seaweed::Seaweed;

fn write(dir: &Path, text: &str) {
    std::fs::write(dir.join("keys.json"), text).unwrap();
}

fn local(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("keys.json")).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_store_put_over_a_newer_one_is_dropped_for_the_bucket_s() {
    let weed = Seaweed::start();
    let bucket = weed.store("keystore");
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (KeyStore::new(a_dir.path()), KeyStore::new(b_dir.path()));
    a.open(bucket.clone());
    b.open(bucket.clone());

    // The region's first: A's own is put as it adopts.
    write(a_dir.path(), "[a1]");
    a.adopt().await.unwrap();
    assert_eq!(a.publish().await.unwrap(), Published::Unchanged);
    b.adopt().await.unwrap();
    assert_eq!(local(b_dir.path()), "[a1]");

    // Both change it from [a1]: A first, then B, whose put is refused.
    write(a_dir.path(), "[a2]");
    assert_eq!(a.publish().await.unwrap(), Published::Put);
    write(b_dir.path(), "[b2]");
    assert_eq!(b.publish().await.unwrap(), Published::Overtaken);
    assert_eq!(local(b_dir.path()), "[a2]");
    assert_eq!(b.publish().await.unwrap(), Published::Unchanged);

    // B now holds the newest: its change goes in, and A's stale one is
    // refused in turn.
    write(b_dir.path(), "[b3]");
    assert_eq!(b.publish().await.unwrap(), Published::Put);
    write(a_dir.path(), "[a3]");
    assert_eq!(a.publish().await.unwrap(), Published::Overtaken);
    assert_eq!(local(a_dir.path()), "[b3]");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_key_store_puts_from_one_version_leave_exactly_one() {
    let weed = Seaweed::start();
    let bucket = weed.store("keyrace");
    let dirs: Vec<tempfile::TempDir> = (0..8).map(|_| tempfile::tempdir().unwrap()).collect();
    let stores: Vec<_> = dirs.iter().map(|d| KeyStore::new(d.path())).collect();
    write(dirs[0].path(), "[first]");
    for s in &stores {
        s.open(bucket.clone());
        s.adopt().await.unwrap();
    }
    for (i, d) in dirs.iter().enumerate() {
        assert_eq!(local(d.path()), "[first]");
        write(d.path(), &format!("[{i}]"));
    }
    let outcomes = futures::future::join_all(stores.iter().map(|s| s.publish())).await;
    let outcomes: Vec<Published> = outcomes.into_iter().map(Result::unwrap).collect();
    let winners: Vec<usize> = (0..8).filter(|&i| outcomes[i] == Published::Put).collect();
    assert_eq!(winners.len(), 1, "{outcomes:?}");
    let won = format!("[{}]", winners[0]);
    for d in &dirs {
        assert_eq!(local(d.path()), won);
    }
}

/// The owner of partition 0 takes a newer key store another origin put
/// (an older owner's change that landed after this owner read it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_owner_follows_a_key_store_put_after_it_read_it() {
    let weed = Seaweed::start();
    let bucket = weed.store("keyfollow");
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (KeyStore::new(a_dir.path()), KeyStore::new(b_dir.path()));
    a.open(bucket.clone());
    b.open(bucket.clone());
    write(a_dir.path(), "[1]");
    a.adopt().await.unwrap();
    b.adopt().await.unwrap();
    assert!(!b.follow().await.unwrap(), "nothing newer yet");
    // A (the older owner) changes it after B read it.
    let (made, published) = a
        .change(|| {
            write(a_dir.path(), "[1][2]");
            Ok(7)
        })
        .await
        .unwrap();
    assert_eq!((made, published), (7, Published::Put));
    assert!(b.follow().await.unwrap());
    assert_eq!(local(b_dir.path()), "[1][2]");
    assert!(!b.follow().await.unwrap());
    // And B's next change goes over it, not under.
    write(b_dir.path(), "[1][2][3]");
    assert_eq!(b.publish().await.unwrap(), Published::Put);
}
