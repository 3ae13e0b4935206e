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
//! directory, where `auth` reads them; while it serves, it puts
//! `keys.json` back whenever the file changed (the admin API, or the CLI on
//! the owner's machine, picked up within a second). A key made with the
//! CLI on a follower's machine is overwritten at its next claim: in a
//! region, make keys through the admin API (forwarded to the owner) or on
//! the owner. The bucket then holds the private signing key: who may read
//! the bucket's `region/` may mint tokens (it may read every stream
//! anyway).
//!
//! With several partitions the key store lives with partition 0 (where
//! `/_admin` is routed): its owner puts it back when it changes, and every
//! other origin serving a partition reads it again at each look when its
//! ETag changed ([`refresh`]), so a key made or revoked there works or
//! stops working everywhere within a renewal or two.

use std::io::Write;
use std::path::Path;

use object_store::{GetOptions, ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::objects::keys;

const SIGNING_KEY: &str = "token-signing.pk8";
const KEY_STORE: &str = "keys.json";

/// Copies the region's signing key and key store into `data`, making the
/// signing key (from this origin's own, or new) if the region has none.
/// The key store is left alone when `key_store` is false: an origin that serves
/// partition 0 (the admin API's) holds the region's newest one itself.
pub async fn fetch(store: &dyn ObjectStore, data: &Path, key_store: bool) -> std::io::Result<()> {
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
    if !key_store {
        return Ok(());
    }
    match read(store, &keys::region_auth(KEY_STORE)).await? {
        Some(bytes) => write_private(&data.join(KEY_STORE), &bytes)?,
        // The region's first owner: the keys it has are the region's.
        None => publish(store, data, &mut Vec::new()).await?,
    }
    Ok(())
}

/// Puts `data`'s key store in the bucket if it changed since `last`
/// (which it then holds).
pub async fn publish(
    store: &dyn ObjectStore,
    data: &Path,
    last: &mut Vec<u8>,
) -> std::io::Result<()> {
    let bytes = match std::fs::read(data.join(KEY_STORE)) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if bytes == *last {
        return Ok(());
    }
    store
        .put(
            &keys::region_auth(KEY_STORE),
            PutPayload::from(bytes.clone()),
        )
        .await
        .map_err(std::io::Error::other)?;
    *last = bytes;
    Ok(())
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
