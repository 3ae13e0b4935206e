//! API keys, kept durably as hashes: `{data}/keys.json` holds each key's id,
//! account, narrowing and the SHA-256 of its secret, never the secret. The
//! secret is shown once, when the key is made.
//!
//! Writes go to a temporary file that is synced and renamed over the old
//! one, so a crash leaves the old set or the new, never a torn file. The
//! admin CLI and the admin HTTP API both write here; a running origin picks
//! up changes made by the CLI within a second ([`KeyStore::reload_if_changed`]).

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use shared::auth::{same_secret, Denied, Grant, KEY_PREFIX};

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyRecord {
    pub id: String,
    pub account: String,
    /// Hex SHA-256 of the secret.
    pub secret_sha256: String,
    #[serde(default)]
    pub read_only: bool,
    /// Only streams whose name starts with this.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// An agent's key: must be exchanged for a token, never sent directly.
    #[serde(default)]
    pub agent: bool,
    pub created_at: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<u64>,
}

/// What a new key may do.
#[derive(Clone, Debug, Default, Deserialize)]
pub struct NewKey {
    pub account: String,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default)]
    pub prefix: Option<String>,
    #[serde(default)]
    pub agent: bool,
}

pub struct KeyStore {
    path: PathBuf,
    keys: RwLock<HashMap<String, KeyRecord>>,
    /// The file's bytes as last read or written. Compared whole: file times
    /// are too coarse to tell two writes in the same millisecond apart, and
    /// the file is small.
    loaded: RwLock<Vec<u8>>,
}

fn sha256_hex(s: &str) -> String {
    hex::encode(Sha256::digest(s.as_bytes()))
}

fn random_hex(bytes: usize) -> String {
    (0..bytes)
        .map(|_| format!("{:02x}", rand::random::<u8>()))
        .collect()
}

impl KeyStore {
    pub fn open(data: &Path) -> std::io::Result<KeyStore> {
        let store = KeyStore {
            path: data.join("keys.json"),
            keys: RwLock::new(HashMap::new()),
            loaded: RwLock::new(b"-".to_vec()),
        };
        store.reload_if_changed()?;
        Ok(store)
    }

    /// Reloads the file if it changed since it was read or written. Runs
    /// under the write lock that changes take too, so a reload never brings
    /// back the set from before a change made here.
    pub fn reload_if_changed(&self) -> std::io::Result<()> {
        let mut keys = self.keys.write();
        let bytes = match std::fs::read(&self.path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        if bytes == *self.loaded.read() {
            return Ok(());
        }
        let list: Vec<KeyRecord> = if bytes.is_empty() {
            Vec::new()
        } else {
            serde_json::from_slice(&bytes).map_err(std::io::Error::other)?
        };
        *keys = list.into_iter().map(|k| (k.id.clone(), k)).collect();
        *self.loaded.write() = bytes;
        Ok(())
    }

    fn save(&self, keys: &HashMap<String, KeyRecord>) -> std::io::Result<()> {
        let mut list: Vec<&KeyRecord> = keys.values().collect();
        list.sort_by(|a, b| a.id.cmp(&b.id));
        let tmp = self.path.with_extension("json.tmp");
        let bytes = serde_json::to_vec_pretty(&list).expect("keys serialize");
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        std::fs::rename(&tmp, &self.path)?;
        if let Some(dir) = self.path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        *self.loaded.write() = bytes;
        Ok(())
    }

    /// Makes a key; returns its record and the full key, shown only now.
    pub fn create(&self, new: NewKey, now: u64) -> std::io::Result<(KeyRecord, String)> {
        let id = random_hex(6);
        let secret = random_hex(24);
        let record = KeyRecord {
            id: id.clone(),
            account: new.account,
            secret_sha256: sha256_hex(&secret),
            read_only: new.read_only,
            prefix: new.prefix.filter(|p| !p.is_empty()),
            agent: new.agent,
            created_at: now,
            revoked_at: None,
        };
        let mut keys = self.keys.write();
        keys.insert(id.clone(), record.clone());
        self.save(&keys)?;
        Ok((record, format!("{KEY_PREFIX}{id}_{secret}")))
    }

    /// Revokes a key; false when there is no such key.
    pub fn revoke(&self, id: &str, now: u64) -> std::io::Result<bool> {
        let mut keys = self.keys.write();
        let Some(k) = keys.get_mut(id) else {
            return Ok(false);
        };
        k.revoked_at.get_or_insert(now);
        self.save(&keys)?;
        Ok(true)
    }

    pub fn list(&self, account: Option<&str>) -> Vec<KeyRecord> {
        let mut v: Vec<KeyRecord> = self
            .keys
            .read()
            .values()
            .filter(|k| account.is_none_or(|a| k.account == a))
            .cloned()
            .collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// Whether the key `id` exists and is not revoked.
    pub fn live(&self, id: &str) -> bool {
        self.keys
            .read()
            .get(id)
            .is_some_and(|k| k.revoked_at.is_none())
    }

    /// The grant of a key sent directly. `exchange` is true for the token
    /// exchange, the one place an agent key may be sent.
    pub fn check(&self, id: &str, secret: &str, exchange: bool) -> Result<Grant, Denied> {
        let keys = self.keys.read();
        let k = keys.get(id).ok_or(Denied::Unauthorized)?;
        if !same_secret(sha256_hex(secret).as_bytes(), k.secret_sha256.as_bytes())
            || k.revoked_at.is_some()
        {
            return Err(Denied::Unauthorized);
        }
        if k.agent && !exchange {
            return Err(Denied::ExchangeRequired);
        }
        Ok(Grant {
            account: k.account.clone(),
            prefix: k.prefix.clone(),
            read_only: k.read_only,
            expires_at: None,
            key_id: k.id.clone(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_kept_as_hashes_and_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        let (rec, key) = store
            .create(
                NewKey {
                    account: "acme".into(),
                    read_only: true,
                    prefix: Some("s.".into()),
                    agent: false,
                },
                1,
            )
            .unwrap();
        let (id, secret) = key
            .strip_prefix(KEY_PREFIX)
            .unwrap()
            .split_once('_')
            .unwrap();
        assert_eq!(id, rec.id);
        let file = std::fs::read_to_string(dir.path().join("keys.json")).unwrap();
        assert!(!file.contains(secret), "the secret is never stored");
        let again = KeyStore::open(dir.path()).unwrap();
        let grant = again.check(id, secret, false).unwrap();
        assert!(grant.read_only);
        assert_eq!(grant.prefix.as_deref(), Some("s."));
        assert_eq!(again.check(id, "wrong", false), Err(Denied::Unauthorized));
        assert!(again.revoke(id, 2).unwrap());
        assert_eq!(again.check(id, secret, false), Err(Denied::Unauthorized));
        // The first store sees the change once it reloads.
        store.reload_if_changed().unwrap();
        assert!(!store.live(id));
    }

    #[test]
    fn agent_keys_only_exchange() {
        let dir = tempfile::tempdir().unwrap();
        let store = KeyStore::open(dir.path()).unwrap();
        let (_, key) = store
            .create(
                NewKey {
                    account: "acme".into(),
                    agent: true,
                    ..NewKey::default()
                },
                1,
            )
            .unwrap();
        let (id, secret) = key[4..].split_once('_').unwrap();
        assert_eq!(
            store.check(id, secret, false),
            Err(Denied::ExchangeRequired)
        );
        assert!(store.check(id, secret, true).is_ok());
    }
}
