//! Access control: who may read and write which streams, and how much.
//!
//! The rules are `shared::auth` (pure, shared with the edge); this module is
//! the origin's shell around them: the durable key store ([`keys`]), the
//! token signing key, and the per-account limits (`shared::limits`).
//!
//! Accounts listed as open (`--open-accounts`, by default the default
//! account that `/v1/stream/…` maps to, so the public conformance suite and a
//! first `curl` work without keys) take every request without a credential
//! and without limits. Every other account needs a key or token for writes,
//! and for reads of streams that are not public.

pub mod keys;

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;

use shared::auth::{credential, owner, Access, Credential, Denied, Grant, Signer, Verifier};

use keys::KeyStore;
use shared::limits::{self as limits, LimitConfig, Limits, RetryAfter};

#[derive(Clone, Debug)]
pub struct AuthConfig {
    /// Streams under this prefix belong to the default account.
    pub default_prefix: String,
    /// Accounts anyone may use without a credential (and without limits).
    pub open_accounts: HashSet<String>,
    pub limits: LimitConfig,
    /// Longest token lifetime an exchange gives, in seconds.
    pub max_token_secs: u64,
    /// The admin API's bearer token (none: the admin API is off).
    pub admin_token: Option<String>,
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig {
            default_prefix: "/v1/stream/".into(),
            open_accounts: [shared::auth::DEFAULT_ACCOUNT.to_owned()].into(),
            limits: LimitConfig::default(),
            max_token_secs: 3600,
            admin_token: None,
        }
    }
}

pub struct Auth {
    pub config: AuthConfig,
    /// `config.open_accounts`, asked on every request: foldhash instead of
    /// SipHash (seeded per process all the same).
    open: HashSet<String, foldhash::fast::RandomState>,
    pub keys: KeyStore,
    pub signer: Signer,
    pub verifier: Verifier,
    pub limits: Arc<Limits>,
}

/// Who a request acts as, once admitted.
#[derive(Clone, Debug)]
pub struct Caller {
    pub account: String,
    /// None: no credential (an open account, or a read of a public stream).
    pub grant: Option<Grant>,
    /// Whose budget (requests, open tails) the request spends: its key's
    /// (tokens spend the key's they were exchanged for), or, without a
    /// credential, the anonymous readers' of the account's public streams.
    pub budget: String,
}

/// Why a request is not admitted.
#[derive(Debug, PartialEq, Eq)]
pub enum Refusal {
    Denied(Denied),
    RateLimited(RetryAfter),
}

impl Auth {
    /// Opens the key store and the token signing key in `data` (made on
    /// first start, readable by the owner only).
    pub fn open(data: &Path, config: AuthConfig) -> std::io::Result<Auth> {
        std::fs::create_dir_all(data)?;
        let key_path = data.join("token-signing.pk8");
        let pkcs8 = match std::fs::read(&key_path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let b = Signer::generate();
                let tmp = key_path.with_extension("tmp");
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode_owner_only()
                    .open(&tmp)?;
                f.write_all(&b)?;
                f.sync_all()?;
                std::fs::rename(&tmp, &key_path)?;
                b
            }
            Err(e) => return Err(e),
        };
        let signer = Signer::from_pkcs8(&pkcs8)
            .ok_or_else(|| std::io::Error::other("token-signing.pk8 is not an Ed25519 key"))?;
        let verifier = Verifier::from_hex(&signer.public_key_hex()).expect("own public key");
        Ok(Auth {
            limits: Limits::new(config.limits),
            open: config.open_accounts.iter().cloned().collect(),
            keys: KeyStore::open(data)?,
            config,
            signer,
            verifier,
        })
    }

    pub fn is_open(&self, account: &str) -> bool {
        self.open.contains(account)
    }

    /// The grant of a key or token, if it is valid at `now` (Unix seconds).
    pub fn grant(&self, cred: Credential<'_>, now: u64) -> Result<Grant, Denied> {
        match cred {
            Credential::Key { id, secret } => self.keys.check(id, secret, false),
            Credential::Token(t) => {
                let g = self.verifier.verify(t, now)?;
                // The origin also honours revocation at once.
                if !self.keys.live(&g.key_id) {
                    return Err(Denied::Unauthorized);
                }
                Ok(g)
            }
        }
    }

    /// Admits a request to the stream at `path`, or says why not. `public`
    /// tells whether the stream exists and is public; it is asked only for a
    /// read without a credential; `now` (Unix seconds) only for a credential.
    /// The caller is `None` for an open account.
    pub fn admit(
        &self,
        path: &str,
        access: Access,
        authorization: Option<&str>,
        public: impl FnOnce() -> bool,
        now: impl FnOnce() -> u64,
    ) -> Result<Option<Caller>, Refusal> {
        let owner = owner(path, &self.config.default_prefix);
        // An open account has no credential and no limits: nothing about
        // the caller needs remembering (and the hot path allocates nothing).
        if self.is_open(owner.account) {
            return Ok(None);
        }
        let account = owner.account.to_owned();
        let (grant, now) = match credential(authorization).map_err(Refusal::Denied)? {
            None => (None, 0),
            Some(cred) => {
                let now = now();
                (Some(self.grant(cred, now).map_err(Refusal::Denied)?), now)
            }
        };
        allowed(&owner, access, grant.as_ref(), public, || now).map_err(Refusal::Denied)?;
        // Charged only once the request is known to be its caller's: a
        // refused credential spends no one's budget, and anonymous readers
        // of a public stream do not spend its owner's.
        let budget = limits::budget(grant.as_ref(), &account);
        self.limits
            .request(&budget, shell::clock::now())
            .map_err(Refusal::RateLimited)?;
        Ok(Some(Caller {
            account,
            grant,
            budget,
        }))
    }

    /// Whether a caller known already (its grant; none without a
    /// credential) may read the stream at `path`: the rule of
    /// [`Auth::admit`], charging no one. A listing asks it of every path
    /// it shows (`http::list`).
    pub fn reads(
        &self,
        path: &str,
        grant: Option<&Grant>,
        public: impl FnOnce() -> bool,
        now: u64,
    ) -> bool {
        let owner = owner(path, &self.config.default_prefix);
        self.is_open(owner.account) || allowed(&owner, Access::Read, grant, public, || now).is_ok()
    }

    /// Admits a listing (`GET /_streams`): its caller's grant (none
    /// without a credential), its request charged once to the key's
    /// budget, or, without a credential, to the anonymous listers' shared
    /// one unless `within_open` (every stream the listing may show is in
    /// an open account, which has no limits). What each path shows is
    /// then [`Auth::reads`].
    pub fn admit_listing(
        &self,
        authorization: Option<&str>,
        within_open: bool,
        now: u64,
    ) -> Result<Option<Grant>, Refusal> {
        let grant = match credential(authorization).map_err(Refusal::Denied)? {
            None => None,
            Some(cred) => Some(self.grant(cred, now).map_err(Refusal::Denied)?),
        };
        if grant.is_some() || !within_open {
            let budget = limits::budget(grant.as_ref(), ANONYMOUS_LISTERS);
            self.limits
                .request(&budget, shell::clock::now())
                .map_err(Refusal::RateLimited)?;
        }
        Ok(grant)
    }

    /// Opens a tail (long-poll or SSE) for the caller's account.
    pub fn open_tail(&self, caller: &Caller) -> Result<Option<limits::LiveReadGuard>, RetryAfter> {
        if self.is_open(&caller.account) {
            return Ok(None);
        }
        self.limits
            .open_tail(&caller.budget, shell::clock::now())
            .map(Some)
    }
}

/// The budget anonymous listings share (as `public {account}` for an
/// account's anonymous readers; no account is named with parentheses).
const ANONYMOUS_LISTERS: &str = "(listings)";

/// The access rule once the credential is known: without one, reads of
/// public streams; with one, what its grant allows (`now` is asked only
/// then). Open accounts are the caller's to decide before.
fn allowed(
    owner: &shared::auth::Owner<'_>,
    access: Access,
    grant: Option<&Grant>,
    public: impl FnOnce() -> bool,
    now: impl FnOnce() -> u64,
) -> Result<(), Denied> {
    match grant {
        None if access == Access::Read && public() => Ok(()),
        None => Err(Denied::Unauthorized),
        Some(g) => g.allows(owner, access, now()),
    }
}

/// `OpenOptions::mode(0o600)` under a name that says why.
trait OwnerOnly {
    fn mode_owner_only(&mut self) -> &mut Self;
}

impl OwnerOnly for std::fs::OpenOptions {
    fn mode_owner_only(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o600)
    }
}
