//! Who may do what to a stream: the pure rules that origin and edge share.
//!
//! - The **account** owning a stream is the first segment of its path
//!   (`/{account}/s.{name}`); paths under the default prefix (`/v1/stream/`,
//!   configurable) and one-segment paths belong to the default account.
//! - A **grant** is what a verified credential allows: one account, maybe
//!   narrowed to stream names with a prefix, maybe read-only, maybe expiring.
//! - **Tokens** are short-lived grants signed by the origin with Ed25519:
//!   `dst_` + base64url(JSON claims) + `.` + base64url(signature). Edges
//!   verify them with the public key alone, never asking the origin; so a
//!   token stays good until it expires even if its key is revoked (the origin
//!   itself checks revocation), which is why tokens live minutes, not days.
//!
//! Deciding on the path alone, before looking the stream up, is what keeps
//! a 404 from telling a credential that cannot see a stream whether it
//! exists: a credential that does not cover the path gets 403 either way.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ring::signature::{self, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use serde::{Deserialize, Serialize};

/// The account of streams under the default prefix.
pub const DEFAULT_ACCOUNT: &str = "default";

/// Prefix of every API key (`dsk_{id}_{secret}`) and token (`dst_…`).
pub const KEY_PREFIX: &str = "dsk_";
pub const TOKEN_PREFIX: &str = "dst_";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Read,
    Write,
}

/// A comma-separated list of accounts (a command-line flag); "" is none.
pub fn account_list(s: &str) -> std::collections::HashSet<String> {
    s.split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
        .map(str::to_owned)
        .collect()
}

/// An answer to a request with a credential is never for shared caches:
/// `Cache-Control: public…` becomes `private…`.
pub fn privatize(headers: &mut http::HeaderMap) {
    let cc = headers.get(http::header::CACHE_CONTROL);
    if let Some(rest) = cc
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("public"))
    {
        if let Ok(v) = http::HeaderValue::from_str(&format!("private{rest}")) {
            headers.insert(http::header::CACHE_CONTROL, v);
        }
    }
}

/// The account and the name (the rest of the path) of a stream.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Owner<'a> {
    pub account: &'a str,
    pub name: &'a str,
}

/// Who owns the stream at `path`.
pub fn owner<'a>(path: &'a str, default_prefix: &str) -> Owner<'a> {
    if let Some(name) = path.strip_prefix(default_prefix) {
        return Owner {
            account: DEFAULT_ACCOUNT,
            name,
        };
    }
    let trimmed = path.strip_prefix('/').unwrap_or(path);
    match trimmed.split_once('/') {
        Some((account, name)) if !account.is_empty() => Owner { account, name },
        _ => Owner {
            account: DEFAULT_ACCOUNT,
            name: trimmed,
        },
    }
}

/// What a verified credential allows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    #[serde(rename = "acct")]
    pub account: String,
    /// Only streams whose name starts with this.
    #[serde(rename = "pfx", default, skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    #[serde(rename = "ro", default)]
    pub read_only: bool,
    /// Unix seconds after which the grant is void (tokens).
    #[serde(rename = "exp", default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<u64>,
    /// The key the grant came from (tokens name it; the origin checks that
    /// it was not revoked).
    #[serde(rename = "kid")]
    pub key_id: String,
}

/// The stream a request concerns and whether it reads or writes it; none
/// for the server's own paths and for preflights, which need no credential,
/// and for control APIs, whose operations each admit what they touch.
pub fn request_access<'a>(
    target: &crate::paths::Target<'a>,
    method: &http::Method,
) -> Option<(&'a str, Access)> {
    use crate::paths::Target;
    let stream = match *target {
        Target::Stream(s) => s,
        Target::Chunk { stream, .. }
        | Target::IncarnationSnapshot { stream, .. }
        | Target::Snapshot { stream, .. }
        | Target::Restore { stream, .. } => stream,
        Target::Control { .. } | Target::Reserved => return None,
    };
    let access = match *method {
        http::Method::OPTIONS => return None,
        http::Method::GET | http::Method::HEAD => Access::Read,
        _ => Access::Write,
    };
    Some((stream, access))
}

/// Why a credential was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Denied {
    /// 401: missing, unknown, expired or revoked.
    Unauthorized,
    /// 401 `exchange_required`: an agent key sent directly.
    ExchangeRequired,
    /// 403: the credential does not reach the stream, or reads only.
    Forbidden,
}

impl Denied {
    /// The error code and message of the refusal, the same from origin and
    /// edge. 401s also carry `WWW-Authenticate: Bearer`.
    pub fn answer(self) -> (crate::error::ErrorCode, &'static str) {
        use crate::error::ErrorCode;
        match self {
            Denied::Unauthorized => (
                ErrorCode::Unauthorized,
                "a valid key or token is needed (Authorization: Bearer …)",
            ),
            Denied::ExchangeRequired => (
                ErrorCode::ExchangeRequired,
                "this key acts for an agent: exchange it for a token at POST /_auth/token",
            ),
            Denied::Forbidden => (
                ErrorCode::Forbidden,
                "the credential does not reach this stream, or it only reads",
            ),
        }
    }
}

/// The refusal of an account over its request rate or open tails (429).
pub const RATE_LIMITED_MESSAGE: &str = "the account is over its request rate or its open tails";

impl Grant {
    pub fn covers(&self, owner: &Owner<'_>) -> bool {
        self.account == owner.account
            && self
                .prefix
                .as_deref()
                .is_none_or(|p| owner.name.starts_with(p))
    }

    /// Whether the grant allows `access` to the stream of `owner` at `now`.
    pub fn allows(&self, owner: &Owner<'_>, access: Access, now: u64) -> Result<(), Denied> {
        if self.expires_at.is_some_and(|e| now >= e) {
            return Err(Denied::Unauthorized);
        }
        if !self.covers(owner) || (self.read_only && access == Access::Write) {
            return Err(Denied::Forbidden);
        }
        Ok(())
    }

    /// A grant no wider than `self`: `narrow` may only add a prefix within
    /// this one, read-only, or an earlier expiry.
    pub fn narrowed(
        &self,
        prefix: Option<String>,
        read_only: bool,
        expires_at: u64,
    ) -> Option<Grant> {
        let prefix = match (&self.prefix, prefix) {
            (None, p) => p,
            (Some(mine), None) => Some(mine.clone()),
            (Some(mine), Some(p)) if p.starts_with(mine.as_str()) => Some(p),
            (Some(_), Some(_)) => return None,
        };
        Some(Grant {
            account: self.account.clone(),
            prefix,
            read_only: self.read_only || read_only,
            expires_at: Some(self.expires_at.map_or(expires_at, |e| e.min(expires_at))),
            key_id: self.key_id.clone(),
        })
    }
}

/// The credential a request carries (`Authorization: Bearer …`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Credential<'a> {
    Key { id: &'a str, secret: &'a str },
    Token(&'a str),
}

/// The token of an `Authorization: Bearer …` value.
pub fn bearer(authorization: &str) -> Option<&str> {
    authorization
        .strip_prefix("Bearer ")
        .or_else(|| authorization.strip_prefix("bearer "))
        .map(str::trim)
}

/// Reads `Authorization`; `Err` for a header that is there but no credential
/// this server gives.
pub fn credential(authorization: Option<&str>) -> Result<Option<Credential<'_>>, Denied> {
    let Some(value) = authorization else {
        return Ok(None);
    };
    let bearer = bearer(value).ok_or(Denied::Unauthorized)?;
    if let Some(rest) = bearer.strip_prefix(KEY_PREFIX) {
        let (id, secret) = rest.split_once('_').ok_or(Denied::Unauthorized)?;
        return Ok(Some(Credential::Key { id, secret }));
    }
    if bearer.starts_with(TOKEN_PREFIX) {
        return Ok(Some(Credential::Token(bearer)));
    }
    Err(Denied::Unauthorized)
}

/// Signs grants into tokens.
pub struct Signer {
    pair: Ed25519KeyPair,
}

impl Signer {
    /// A new key pair, as PKCS#8 bytes to keep.
    pub fn generate() -> Vec<u8> {
        let rng = ring::rand::SystemRandom::new();
        Ed25519KeyPair::generate_pkcs8(&rng)
            .expect("the system random source works")
            .as_ref()
            .to_vec()
    }

    pub fn from_pkcs8(bytes: &[u8]) -> Option<Signer> {
        Ed25519KeyPair::from_pkcs8(bytes)
            .ok()
            .map(|pair| Signer { pair })
    }

    /// The public key, hex, for verifiers.
    pub fn public_key_hex(&self) -> String {
        hex_encode(self.pair.public_key().as_ref())
    }

    pub fn sign(&self, grant: &Grant) -> String {
        let claims = B64.encode(serde_json::to_vec(grant).expect("grants serialize"));
        let sig = B64.encode(self.pair.sign(claims.as_bytes()).as_ref());
        format!("{TOKEN_PREFIX}{claims}.{sig}")
    }
}

/// Checks tokens with the origin's public key.
#[derive(Clone, Debug)]
pub struct Verifier {
    public_key: Vec<u8>,
}

impl Verifier {
    pub fn from_hex(public_key: &str) -> Option<Verifier> {
        let bytes = hex_decode(public_key.trim())?;
        (bytes.len() == 32).then_some(Verifier { public_key: bytes })
    }

    /// The grant a token carries, if its signature holds and it has not
    /// expired at `now` (Unix seconds).
    pub fn verify(&self, token: &str, now: u64) -> Result<Grant, Denied> {
        let body = token
            .strip_prefix(TOKEN_PREFIX)
            .ok_or(Denied::Unauthorized)?;
        let (claims, sig) = body.split_once('.').ok_or(Denied::Unauthorized)?;
        let sig = B64.decode(sig).map_err(|_| Denied::Unauthorized)?;
        UnparsedPublicKey::new(&signature::ED25519, &self.public_key)
            .verify(claims.as_bytes(), &sig)
            .map_err(|_| Denied::Unauthorized)?;
        let json = B64.decode(claims).map_err(|_| Denied::Unauthorized)?;
        let grant: Grant = serde_json::from_slice(&json).map_err(|_| Denied::Unauthorized)?;
        match grant.expires_at {
            Some(e) if now < e => Ok(grant),
            _ => Err(Denied::Unauthorized),
        }
    }
}

fn hex_encode(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hex_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// Compares two secrets (or their hashes) in time independent of where
/// they differ.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(prefix: Option<&str>, read_only: bool, exp: Option<u64>) -> Grant {
        Grant {
            account: "acme".into(),
            prefix: prefix.map(str::to_owned),
            read_only,
            expires_at: exp,
            key_id: "k1".into(),
        }
    }

    #[test]
    fn owners() {
        let d = "/v1/stream/";
        assert_eq!(
            owner("/v1/stream/chat", d),
            Owner {
                account: "default",
                name: "chat"
            }
        );
        assert_eq!(
            owner("/acme/s.chat", d),
            Owner {
                account: "acme",
                name: "s.chat"
            }
        );
        assert_eq!(
            owner("/acme/a/b", d),
            Owner {
                account: "acme",
                name: "a/b"
            }
        );
        assert_eq!(
            owner("/solo", d),
            Owner {
                account: "default",
                name: "solo"
            }
        );
    }

    #[test]
    fn grants_cover_account_prefix_and_mode() {
        let acme = owner("/acme/s.chat", "/v1/stream/");
        let other = owner("/other/s.chat", "/v1/stream/");
        assert_eq!(
            grant(None, false, None).allows(&acme, Access::Write, 0),
            Ok(())
        );
        assert_eq!(
            grant(None, false, None).allows(&other, Access::Read, 0),
            Err(Denied::Forbidden)
        );
        assert_eq!(
            grant(Some("s.ch"), false, None).allows(&acme, Access::Read, 0),
            Ok(())
        );
        assert_eq!(
            grant(Some("s.x"), false, None).allows(&acme, Access::Read, 0),
            Err(Denied::Forbidden)
        );
        assert_eq!(
            grant(None, true, None).allows(&acme, Access::Read, 0),
            Ok(())
        );
        assert_eq!(
            grant(None, true, None).allows(&acme, Access::Write, 0),
            Err(Denied::Forbidden)
        );
        assert_eq!(
            grant(None, false, Some(10)).allows(&acme, Access::Read, 10),
            Err(Denied::Unauthorized)
        );
    }

    #[test]
    fn narrowing_never_widens() {
        let g = grant(Some("s."), false, None);
        let n = g.narrowed(Some("s.chat".into()), true, 100).unwrap();
        assert_eq!(n.prefix.as_deref(), Some("s.chat"));
        assert!(n.read_only);
        assert_eq!(n.expires_at, Some(100));
        assert!(g.narrowed(Some("x.".into()), false, 100).is_none());
        let ro = grant(None, true, Some(50));
        let n = ro.narrowed(None, false, 100).unwrap();
        assert!(n.read_only);
        assert_eq!(n.expires_at, Some(50));
    }

    #[test]
    fn tokens_sign_and_verify() {
        let signer = Signer::from_pkcs8(&Signer::generate()).unwrap();
        let verifier = Verifier::from_hex(&signer.public_key_hex()).unwrap();
        let g = grant(Some("s."), true, Some(1000));
        let token = signer.sign(&g);
        assert!(token.starts_with(TOKEN_PREFIX));
        assert_eq!(verifier.verify(&token, 999), Ok(g));
        assert_eq!(verifier.verify(&token, 1000), Err(Denied::Unauthorized));
        // Any change to the claims breaks the signature.
        let (head, sig) = token.split_once('.').unwrap();
        let forged = format!("{}x.{sig}", head);
        assert_eq!(verifier.verify(&forged, 1), Err(Denied::Unauthorized));
        let other = Verifier::from_hex(
            &Signer::from_pkcs8(&Signer::generate())
                .unwrap()
                .public_key_hex(),
        )
        .unwrap();
        assert_eq!(other.verify(&token, 1), Err(Denied::Unauthorized));
        // A token without an expiry is never valid.
        let forever = signer.sign(&grant(None, false, None));
        assert_eq!(verifier.verify(&forever, 1), Err(Denied::Unauthorized));
    }

    #[test]
    fn credentials_parse() {
        assert_eq!(credential(None), Ok(None));
        assert_eq!(
            credential(Some("Bearer dsk_ab12_s3cret")),
            Ok(Some(Credential::Key {
                id: "ab12",
                secret: "s3cret"
            }))
        );
        assert_eq!(
            credential(Some("Bearer dst_x.y")),
            Ok(Some(Credential::Token("dst_x.y")))
        );
        assert_eq!(credential(Some("Basic abc")), Err(Denied::Unauthorized));
        assert_eq!(credential(Some("Bearer nope")), Err(Denied::Unauthorized));
        assert!(same_secret(b"abc", b"abc"));
        assert!(!same_secret(b"abc", b"abd"));
        assert!(!same_secret(b"abc", b"ab"));
    }
}
