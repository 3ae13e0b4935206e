//! The webhook signing keys (protocol §6.5, §7.1) and the secret that
//! signs callback and claim tokens (§12.9).
//!
//! Ed25519 key pairs, each named by its JWK thumbprint (RFC 7638) as
//! `ds_<thumbprint>`, so a `kid` is stable for its key's life and unique.
//! On one origin they live in `DATA/subscriptions/keys.json`, mode 0600,
//! written by write-then-rename, so a restart signs with the same key and
//! receivers keep verifying. In a region they are lines of the
//! subscriptions' journal instead ([`Keys::from_state`]): the journal is
//! in the bucket and moves with partition 0, so every origin that runs
//! the subscriptions in turn signs with the same keys and the same token
//! secret, and a rotation is durable before any key it adds is published.
//!
//! Rotation (every `webhook_key_rotation`) adds a key, which is published
//! at once but signs only once it has been published for `publish_ahead`
//! (the JWK Set's cache lifetime, 300 s): a receiver or CDN holding the
//! set it fetched just before never meets a `kid` it cannot find. The key
//! it replaces stays published for `webhook_key_retired_for` after that,
//! well past the five-minute replay window a receiver accepts and the
//! longest retry delay, then is dropped. The first key signs at once
//! (nobody can have cached a set without it).

use std::io::Write;
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine as _;
use parking_lot::RwLock;
use ring::signature::{Ed25519KeyPair, KeyPair};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::core::Millis;

/// The keys and the token secret as they are kept (the file's contents,
/// or a journal line's).
#[derive(Clone, Serialize, Deserialize)]
pub struct Stored {
    hmac: String,
    keys: Vec<StoredKey>,
}

#[derive(Clone, Serialize, Deserialize)]
struct StoredKey {
    pkcs8: String,
    created_at: Millis,
}

struct SigningKey {
    kid: String,
    /// The public key, base64url (the JWK's `x`).
    x: String,
    pair: Ed25519KeyPair,
    stored: StoredKey,
}

struct Ring {
    hmac: ring::hmac::Key,
    hmac_raw: Vec<u8>,
    /// Oldest first.
    keys: Vec<SigningKey>,
}

impl Ring {
    /// The key that signs at `now`: the newest published for `ahead`
    /// already, else the oldest.
    fn signer(&self, now: Millis, ahead: Millis) -> &SigningKey {
        self.keys
            .iter()
            .rev()
            .find(|k| k.stored.created_at.saturating_add(ahead) <= now)
            .or_else(|| self.keys.first())
            .expect("a key always signs")
    }
}

pub struct Keys {
    /// The file they are kept in; none: the journal keeps them.
    file: Option<PathBuf>,
    ring: RwLock<Ring>,
    /// How long a new key is published before it signs.
    ahead: Millis,
}

fn load_key(stored: StoredKey) -> std::io::Result<SigningKey> {
    let der = B64
        .decode(&stored.pkcs8)
        .map_err(|e| std::io::Error::other(format!("a signing key is not base64url: {e}")))?;
    let pair = Ed25519KeyPair::from_pkcs8(&der)
        .map_err(|_| std::io::Error::other("a signing key is not an Ed25519 PKCS#8 key"))?;
    let x = B64.encode(pair.public_key().as_ref());
    // RFC 7638: the required members, in lexicographic order, no spaces.
    let thumbprint = Sha256::digest(format!(r#"{{"crv":"Ed25519","kty":"OKP","x":"{x}"}}"#));
    Ok(SigningKey {
        kid: format!("ds_{}", B64.encode(thumbprint)),
        x,
        pair,
        stored,
    })
}

fn new_key(now: Millis) -> std::io::Result<SigningKey> {
    let rng = ring::rand::SystemRandom::new();
    let doc = Ed25519KeyPair::generate_pkcs8(&rng)
        .map_err(|_| std::io::Error::other("no randomness for a signing key"))?;
    load_key(StoredKey {
        pkcs8: B64.encode(doc.as_ref()),
        created_at: now,
    })
}

fn ring_of(stored: Stored) -> std::io::Result<Ring> {
    let hmac_raw = B64
        .decode(&stored.hmac)
        .map_err(|e| std::io::Error::other(format!("the token secret: {e}")))?;
    let keys = stored
        .keys
        .into_iter()
        .map(load_key)
        .collect::<std::io::Result<Vec<_>>>()?;
    if keys.is_empty() {
        return Err(std::io::Error::other("no signing key"));
    }
    Ok(Ring {
        hmac: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &hmac_raw),
        hmac_raw,
        keys,
    })
}

fn fresh_ring(now: Millis) -> std::io::Result<Ring> {
    let hmac_raw: Vec<u8> = (0..32).map(|_| rand::random::<u8>()).collect();
    Ok(Ring {
        hmac: ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &hmac_raw),
        hmac_raw,
        keys: vec![new_key(now)?],
    })
}

fn stored_of(ring: &Ring) -> Stored {
    Stored {
        hmac: B64.encode(&ring.hmac_raw),
        keys: ring.keys.iter().map(|k| k.stored.clone()).collect(),
    }
}

impl Keys {
    /// Loads the keys under `dir`, or makes the first ones; a new key
    /// signs once published for `ahead`.
    pub fn open(dir: &Path, now: Millis, ahead: Millis) -> std::io::Result<Keys> {
        std::fs::create_dir_all(dir)?;
        let file = dir.join("keys.json");
        let ring = match std::fs::read(&file) {
            Ok(bytes) => {
                let stored: Stored = serde_json::from_slice(&bytes)
                    .map_err(|e| std::io::Error::other(format!("{}: {e}", file.display())))?;
                ring_of(stored)
                    .map_err(|e| std::io::Error::other(format!("{}: {e}", file.display())))?
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => fresh_ring(now)?,
            Err(e) => return Err(e),
        };
        let keys = Keys {
            file: Some(file),
            ring: RwLock::new(ring),
            ahead,
        };
        keys.save(&stored_of(&keys.ring.read()))?;
        Ok(keys)
    }

    /// The keys a journal kept (none yet: new ones, and their state, which
    /// the caller logs before it serves).
    pub fn from_state(
        state: Option<Stored>,
        now: Millis,
        ahead: Millis,
    ) -> std::io::Result<(Keys, Option<Stored>)> {
        let (ring, made) = match state {
            Some(stored) => (ring_of(stored)?, false),
            None => (fresh_ring(now)?, true),
        };
        let made = made.then(|| stored_of(&ring));
        let keys = Keys {
            file: None,
            ring: RwLock::new(ring),
            ahead,
        };
        Ok((keys, made))
    }

    /// Whether the journal keeps them (else their file).
    pub fn in_journal(&self) -> bool {
        self.file.is_none()
    }

    /// Their state now, as kept.
    pub fn state(&self) -> Stored {
        stored_of(&self.ring.read())
    }

    fn save(&self, stored: &Stored) -> std::io::Result<()> {
        let Some(file) = &self.file else {
            return Ok(());
        };
        let tmp = file.with_extension("json.tmp");
        {
            let mut options = std::fs::OpenOptions::new();
            options.write(true).create(true).truncate(true);
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let mut f = options.open(&tmp)?;
            f.write_all(&serde_json::to_vec(stored).expect("keys serialize"))?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, file)?;
        if let Some(dir) = file.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    }

    /// Adds the next key when the newest is older than `every`, and drops
    /// keys replaced for longer than `retired_for`, keeping them in their
    /// file first. Answers whether anything changed.
    pub fn rotate_if_due(
        &self,
        now: Millis,
        every: Millis,
        retired_for: Millis,
    ) -> std::io::Result<bool> {
        match self.rotation(now, every, retired_for)? {
            Some(next) => {
                self.install(next)?;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Kept (in the file, when they have one), then used from now on.
    pub fn install(&self, next: Stored) -> std::io::Result<()> {
        let ring = ring_of(next.clone())?;
        self.save(&next)?;
        *self.ring.write() = ring;
        Ok(())
    }

    /// What the keys become at `now` if a rotation is due (the next key
    /// when the newest is older than `every`; keys replaced for longer
    /// than `retired_for` dropped: replaced, a newer key signs), not
    /// applied: none when nothing changes.
    pub fn rotation(
        &self,
        now: Millis,
        every: Millis,
        retired_for: Millis,
    ) -> std::io::Result<Option<Stored>> {
        let ring = self.ring.read();
        let due = ring
            .keys
            .last()
            .is_some_and(|k| now.saturating_sub(k.stored.created_at) >= every.max(1));
        // A key older than the signer was replaced when the signer began.
        let signer = ring.signer(now, self.ahead).stored.created_at;
        let replaced_for = now.saturating_sub(signer.saturating_add(self.ahead));
        let mut next = stored_of(&ring);
        drop(ring);
        let before = next.keys.len();
        next.keys
            .retain(|k| k.created_at >= signer || replaced_for < retired_for);
        if !due && next.keys.len() == before {
            return Ok(None);
        }
        if due {
            next.keys.push(new_key(now)?.stored);
        }
        Ok(Some(next))
    }

    /// The `kid` that signs at `now`.
    pub fn active_kid(&self, now: Millis) -> String {
        self.ring.read().signer(now, self.ahead).kid.clone()
    }

    /// `Webhook-Signature` for `body` sent at `now`: the signature of
    /// `"<t>.<body>"`, `t` in Unix seconds.
    pub fn sign(&self, now: Millis, body: &[u8]) -> String {
        let ring = self.ring.read();
        let key = ring.signer(now, self.ahead);
        let t = now / 1000;
        let mut message = format!("{t}.").into_bytes();
        message.extend_from_slice(body);
        let sig = key.pair.sign(&message);
        format!("t={t},kid={},ed25519={}", key.kid, B64.encode(sig.as_ref()))
    }

    /// The JWK Set: every published public key.
    pub fn jwks(&self) -> serde_json::Value {
        let ring = self.ring.read();
        let keys: Vec<_> = ring
            .keys
            .iter()
            .map(|k| {
                serde_json::json!({
                    "kty": "OKP", "crv": "Ed25519", "kid": k.kid, "use": "sig", "alg": "EdDSA", "x": k.x,
                })
            })
            .collect();
        serde_json::json!({ "keys": keys })
    }

    /// Signs a token's payload (HMAC-SHA256).
    pub fn mac(&self, payload: &[u8]) -> Vec<u8> {
        ring::hmac::sign(&self.ring.read().hmac, payload)
            .as_ref()
            .to_vec()
    }

    /// Whether `tag` is this server's MAC of `payload` (constant time).
    pub fn verify_mac(&self, payload: &[u8], tag: &[u8]) -> bool {
        ring::hmac::verify(&self.ring.read().hmac, payload, tag).is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_persist_rotate_and_verify() {
        let dir = tempfile::tempdir().unwrap();
        let keys = Keys::open(dir.path(), 1_000, 300).unwrap();
        let kid = keys.active_kid(1_000);
        assert!(kid.starts_with("ds_"));
        let mode = std::fs::metadata(dir.path().join("keys.json")).unwrap();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode.permissions()) & 0o777,
            0o600
        );
        // The same key after a restart.
        let again = Keys::open(dir.path(), 2_000, 300).unwrap();
        assert_eq!(again.active_kid(2_000), kid);
        let sig = again.sign(7_000, b"{}");
        assert!(sig.starts_with(&format!("t=7,kid={kid},ed25519=")));
        // Verified with the published key.
        let x = again.jwks()["keys"][0]["x"].as_str().unwrap().to_owned();
        let public = ring::signature::UnparsedPublicKey::new(
            &ring::signature::ED25519,
            B64.decode(x).unwrap(),
        );
        let raw = B64.decode(sig.rsplit_once("ed25519=").unwrap().1).unwrap();
        assert!(public.verify(b"7.{}", &raw).is_ok());
        // Rotation: the next key is published at once, signs 300 ms later.
        assert!(!again.rotate_if_due(2_000, 10_000, 5_000).unwrap());
        assert!(again.rotate_if_due(11_000, 10_000, 5_000).unwrap());
        assert_eq!(again.jwks()["keys"].as_array().unwrap().len(), 2);
        assert_eq!(again.active_kid(11_299), kid);
        let next = again.active_kid(11_300);
        assert_ne!(next, kid);
        // The replaced key stays published 5 s after the next one signs.
        assert!(!again.rotate_if_due(16_299, 10_000, 5_000).unwrap());
        assert_eq!(again.jwks()["keys"].as_array().unwrap().len(), 2);
        assert!(again.rotate_if_due(16_300, 10_000, 5_000).unwrap());
        assert_eq!(again.jwks()["keys"].as_array().unwrap().len(), 1);
        assert_eq!(again.active_kid(16_300), next);
        // Tokens: the MAC verifies and survives a restart.
        let tag = again.mac(b"p");
        let reopened = Keys::open(dir.path(), 16_000, 300).unwrap();
        assert!(reopened.verify_mac(b"p", &tag));
        assert!(!reopened.verify_mac(b"q", &tag));
    }
}
