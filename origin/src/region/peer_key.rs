//! The key the origins of a region prove to one another: 32 random bytes
//! (hex) in the bucket at `region/peer.key`, made by the first origin that
//! needs it with a create-only put (a racing second one reads the winner's).
//! Whoever can read the bucket is of the region; a request carrying the
//! key in `ds-region-peer` is another origin's and needs no credential.
//! Origins send it only to one another (the region's own streams, see
//! `region::across`); an origin never puts it in an answer.

use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

use crate::objects::keys;

/// The region's peer key, made if the bucket has none yet.
pub async fn load(store: &dyn ObjectStore) -> std::io::Result<String> {
    let key = keys::region_peer_key();
    for _ in 0..2 {
        match store.get(&key).await {
            Ok(got) => {
                let bytes = got.bytes().await.map_err(std::io::Error::other)?;
                let text = String::from_utf8(bytes.to_vec()).map_err(std::io::Error::other)?;
                return Ok(text.trim().to_owned());
            }
            Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(std::io::Error::other(e)),
        }
        let fresh: [u8; 32] = rand::random();
        let hex: String = fresh.iter().map(|b| format!("{b:02x}")).collect();
        let create = PutOptions {
            mode: PutMode::Create,
            ..Default::default()
        };
        match store
            .put_opts(&key, PutPayload::from(hex.clone()), create)
            .await
        {
            Ok(_) => return Ok(hex),
            // Another origin made it first (or this put's retry found its
            // own): read what is there.
            Err(object_store::Error::AlreadyExists { .. }) => {}
            Err(e) => return Err(std::io::Error::other(e)),
        }
    }
    Err(std::io::Error::other(
        "the region's peer key was neither there nor could be made",
    ))
}

/// Whether `sent` is `key`, in time independent of where they differ.
pub fn matches(key: &str, sent: &[u8]) -> bool {
    let key = key.as_bytes();
    key.len() == sent.len() && key.iter().zip(sent).fold(0u8, |d, (a, b)| d | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_key_for_every_origin() {
        let store = object_store::memory::InMemory::new();
        let a = load(&store).await.unwrap();
        let b = load(&store).await.unwrap();
        assert_eq!(a, b);
        assert_eq!(a.len(), 64);
        assert!(matches(&a, a.as_bytes()));
        assert!(!matches(&a, b"short"));
        let mut wrong = a.clone().into_bytes();
        wrong[63] ^= 1;
        assert!(!matches(&a, &wrong));
    }
}
