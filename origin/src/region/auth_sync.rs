//! A region's access control in its bucket: every origin of a region signs
//! tokens with one key and checks one key store, so a takeover keeps every
//! key and token working (and the public key edges verify tokens with
//! does not change).
//!
//! ```text
//! region/auth/token-signing.pk8   the Ed25519 signing key: made once, by a create-only put
//! region/auth/keys.json           the key store (hashes, never secrets), written by the owner
//! ```
//!
//! Before a claim opens its store, the claimant copies both into its data
//! directory, where `auth` reads them. A change made through the admin API
//! is put back before it is answered ([`KeyStore::publish`]), so a key
//! made or revoked and acknowledged outlives the machine that did it; a
//! change by the CLI on the owner's machine is put back within a second.
//! Each put is conditional on the ETag this origin last read or put
//! (`If-Match`): an owner paused past its lease cannot put a key store
//! older than the region's over it (a revoked key would come back). A put
//! that finds the bucket's changed takes the bucket's, drops its own
//! change and says so ([`Published::Overtaken`]; the admin API then
//! answers 503, having changed nothing). A key made with the CLI on a
//! follower's machine is overwritten at its next claim: in a region, make
//! keys through the admin API (forwarded to the owner) or on the owner.
//! The bucket then holds the private signing key: who may read the
//! bucket's `region/` may mint tokens (it may read every stream anyway).
//!
//! With several partitions the key store lives with partition 0 (where
//! `/_admin` is routed): its owner puts it back when it changes, and every
//! other origin serving a partition reads it again at each look when its
//! ETag changed ([`refresh`]), so a key made or revoked there works or
//! stops working everywhere within a renewal or two.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use object_store::{
    GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, UpdateVersion,
};

use crate::objects::keys;

const SIGNING_KEY: &str = "token-signing.pk8";
const KEY_STORE: &str = "keys.json";

/// Copies the region's signing key into `data`, making it (from this
/// origin's own, or new) if the region has none, and the region's key
/// store too through `keys` (None: an origin that serves partition 0, the
/// admin API's, holds the region's newest one itself).
pub async fn fetch(
    store: &dyn ObjectStore,
    data: &Path,
    keys: Option<&KeyStore>,
) -> std::io::Result<()> {
    let signing = keys::region_auth(SIGNING_KEY);
    let key = match read(store, &signing).await? {
        Some(key) => key,
        None => {
            let local = data.join(SIGNING_KEY);
            let ours = match std::fs::read(&local) {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    shared::auth::Signer::generate()
                }
                Err(e) => return Err(e),
            };
            let create = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            match store
                .put_opts(&signing, PutPayload::from(ours.clone()), create)
                .await
            {
                Ok(_) => ours,
                // Another origin made it first: theirs is the region's.
                Err(object_store::Error::AlreadyExists { .. }) => read(store, &signing)
                    .await?
                    .ok_or_else(|| std::io::Error::other("the region's signing key vanished"))?,
                Err(e) => return Err(std::io::Error::other(e)),
            }
        }
    };
    write_private(&data.join(SIGNING_KEY), &key)?;
    match keys {
        Some(keys) => keys.adopt().await,
        None => Ok(()),
    }
}

/// What [`KeyStore::publish`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Published {
    /// The local key store is the one last read or put: nothing to put.
    Unchanged,
    /// Put in the bucket (or found there already, from a try whose answer
    /// was lost).
    Put,
    /// The bucket's changed since this origin read it (another owner put
    /// it): the bucket's replaced the local one, whose change is dropped.
    Overtaken,
}

/// The region's key store as this origin last read it from the bucket or
/// put it there (its bytes and their ETag): every put is conditional on
/// it. One per origin; one publish at a time.
pub struct KeyStore {
    data: PathBuf,
    /// Set once the origin opens the bucket.
    objects: OnceLock<Arc<dyn ObjectStore>>,
    synced: tokio::sync::Mutex<Synced>,
}

#[derive(Default)]
struct Synced {
    bytes: Vec<u8>,
    etag: Option<String>,
}

impl KeyStore {
    /// The key store in `data` (`keys.json`), not yet tied to a bucket.
    pub fn new(data: &Path) -> Arc<KeyStore> {
        Arc::new(KeyStore {
            data: data.to_owned(),
            objects: OnceLock::new(),
            synced: Default::default(),
        })
    }

    /// Ties it to the region's bucket (once).
    pub fn open(&self, objects: Arc<dyn ObjectStore>) {
        let _ = self.objects.set(objects);
    }

    fn objects(&self) -> std::io::Result<&dyn ObjectStore> {
        self.objects
            .get()
            .map(|o| &**o)
            .ok_or_else(|| std::io::Error::other("the region's bucket is not open yet"))
    }

    /// Copies the bucket's key store into `data` (before a claim); with
    /// none there, this origin's is the region's first.
    pub async fn adopt(&self) -> std::io::Result<()> {
        let objects = self.objects()?;
        let mut synced = self.synced.lock().await;
        match read_tagged(objects, &keys::region_auth(KEY_STORE)).await? {
            Some((bytes, etag)) => {
                write_private(&self.data.join(KEY_STORE), &bytes)?;
                *synced = Synced {
                    bytes,
                    etag: Some(etag.ok_or_else(no_etag)?),
                };
            }
            None => {
                *synced = Synced::default();
                drop(synced);
                self.publish().await?;
            }
        }
        Ok(())
    }

    /// Puts the local key store in the bucket if it changed since it was
    /// last read or put, on condition that the bucket's is still that one.
    pub async fn publish(&self) -> std::io::Result<Published> {
        let objects = self.objects()?;
        let mut synced = self.synced.lock().await;
        self.publish_locked(objects, &mut synced).await
    }

    /// Makes a change to the local key store with `change` (which reads it
    /// first: the file may be newer than what was loaded) and puts it in
    /// the bucket, both under the one lock, so no other publish, adoption
    /// or refresh rewrites the file between them. `Unchanged` means the
    /// change changed nothing.
    pub async fn change<T>(
        &self,
        change: impl FnOnce() -> std::io::Result<T>,
    ) -> std::io::Result<(T, Published)> {
        let objects = self.objects()?;
        let mut synced = self.synced.lock().await;
        let made = change()?;
        let published =
            tokio::time::timeout(PUT_PATIENCE, self.publish_locked(objects, &mut synced))
                .await
                .map_err(|_| {
                    std::io::Error::other("the bucket did not take the key store in time")
                })??;
        Ok((made, published))
    }

    /// For the owner of partition 0: copies the bucket's key store here if
    /// another origin put a newer one (an older owner's change that landed
    /// after this owner's claim read it), dropping a local change not yet
    /// put. Returns whether it did.
    pub async fn follow(&self) -> std::io::Result<bool> {
        let objects = self.objects()?;
        let mut synced = self.synced.lock().await;
        let options = GetOptions {
            if_none_match: synced.etag.clone(),
            ..Default::default()
        };
        match objects
            .get_opts(&keys::region_auth(KEY_STORE), options)
            .await
        {
            Ok(got) => {
                let etag = got.meta.e_tag.clone();
                let bytes = got.bytes().await.map_err(std::io::Error::other)?.to_vec();
                if bytes == synced.bytes {
                    synced.etag = etag;
                    return Ok(false);
                }
                write_private(&self.data.join(KEY_STORE), &bytes)?;
                *synced = Synced { bytes, etag };
                Ok(true)
            }
            Err(object_store::Error::NotModified { .. } | object_store::Error::NotFound { .. }) => {
                Ok(false)
            }
            Err(e) => Err(std::io::Error::other(e)),
        }
    }

    async fn publish_locked(
        &self,
        objects: &dyn ObjectStore,
        synced: &mut Synced,
    ) -> std::io::Result<Published> {
        let bytes = match std::fs::read(self.data.join(KEY_STORE)) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Published::Unchanged),
            Err(e) => return Err(e),
        };
        if bytes == synced.bytes {
            return Ok(Published::Unchanged);
        }
        let key = keys::region_auth(KEY_STORE);
        let mode = match &synced.etag {
            Some(etag) => PutMode::Update(UpdateVersion {
                e_tag: Some(etag.clone()),
                version: None,
            }),
            None => PutMode::Create,
        };
        let options = PutOptions {
            mode,
            ..Default::default()
        };
        match objects
            .put_opts(&key, PutPayload::from(bytes.clone()), options)
            .await
        {
            Ok(put) => {
                let etag = match put.e_tag {
                    Some(etag) => etag,
                    None => objects
                        .head(&key)
                        .await
                        .map_err(std::io::Error::other)?
                        .e_tag
                        .ok_or_else(no_etag)?,
                };
                *synced = Synced {
                    bytes,
                    etag: Some(etag),
                };
                Ok(Published::Put)
            }
            // Not the one last read: whose is it now?
            Err(object_store::Error::Precondition { .. })
            | Err(object_store::Error::AlreadyExists { .. }) => {
                let (theirs, etag) = read_tagged(objects, &key)
                    .await?
                    .ok_or_else(|| std::io::Error::other("the region's key store vanished"))?;
                let ours = theirs == bytes;
                if !ours {
                    write_private(&self.data.join(KEY_STORE), &theirs)?;
                }
                *synced = Synced {
                    bytes: theirs,
                    etag: Some(etag.ok_or_else(no_etag)?),
                };
                Ok(if ours {
                    Published::Put
                } else {
                    Published::Overtaken
                })
            }
            Err(e) => Err(std::io::Error::other(e)),
        }
    }
}

/// How long a change through the admin API waits for the bucket to take
/// the key store; then it answers 503 (the change may still land).
const PUT_PATIENCE: std::time::Duration = std::time::Duration::from_secs(10);

/// A bucket that names no version of the key store cannot be written on
/// condition: every put after would be refused. Said loudly, never
/// dropped silently.
fn no_etag() -> std::io::Error {
    std::io::Error::other("the bucket gave no ETag for the key store; conditional puts need one")
}

/// Copies the region's key store into `data` if it changed in the bucket
/// since `etag` (the ETag it was last read at, which it then holds).
pub async fn refresh(
    store: &dyn ObjectStore,
    data: &Path,
    etag: &mut Option<String>,
) -> std::io::Result<()> {
    let options = GetOptions {
        if_none_match: etag.clone(),
        ..Default::default()
    };
    match store.get_opts(&keys::region_auth(KEY_STORE), options).await {
        Ok(got) => {
            let tag = got.meta.e_tag.clone();
            let bytes = got.bytes().await.map_err(std::io::Error::other)?;
            write_private(&data.join(KEY_STORE), &bytes)?;
            *etag = tag;
            Ok(())
        }
        Err(object_store::Error::NotModified { .. } | object_store::Error::NotFound { .. }) => {
            Ok(())
        }
        Err(e) => Err(std::io::Error::other(e)),
    }
}

/// `key`'s bytes and ETag, if it exists.
async fn read_tagged(
    store: &dyn ObjectStore,
    key: &object_store::path::Path,
) -> std::io::Result<Option<(Vec<u8>, Option<String>)>> {
    match store.get(key).await {
        Ok(got) => {
            let etag = got.meta.e_tag.clone();
            let bytes = got.bytes().await.map_err(std::io::Error::other)?.to_vec();
            Ok(Some((bytes, etag)))
        }
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

async fn read(
    store: &dyn ObjectStore,
    key: &object_store::path::Path,
) -> std::io::Result<Option<Vec<u8>>> {
    match store.get(key).await {
        Ok(got) => Ok(Some(
            got.bytes().await.map_err(std::io::Error::other)?.to_vec(),
        )),
        Err(object_store::Error::NotFound { .. }) => Ok(None),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

/// Replaces `path` with `bytes`, readable by the owner only, never torn.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if std::fs::read(path).is_ok_and(|b| b == bytes) {
        return Ok(());
    }
    let tmp = path.with_extension("sync.tmp");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}
