//! Callback and claim tokens (protocol §7.1, §7.2, §12.9): bearer tokens
//! scoped to one subscription and one wake, signed with the server's HMAC
//! secret (`keys`), checked on every callback, ack and release.
//!
//! A token is `base64url(claims JSON) "." base64url(HMAC-SHA256)`. Its
//! wake id is random (128 bits), so a token of a deleted subscription or
//! of an earlier wake never matches a later one, even one with the same
//! subscription id and generation. It expires after [`TOKEN_TTL_MS`]: past
//! any lease a worker keeps alive by heartbeats for long, a worker asks for
//! a new wake.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use super::keys::Keys;
use crate::core::Millis;

/// How long a token is valid from its wake's issue or claim.
pub const TOKEN_TTL_MS: Millis = 24 * 3_600_000;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    pub root: String,
    pub id: String,
    pub generation: u64,
    pub wake_id: String,
    pub expires: Millis,
}

#[derive(Debug, PartialEq, Eq)]
pub enum TokenError {
    Invalid,
    Expired,
}

pub fn issue(keys: &Keys, claims: &Claims) -> String {
    let payload = serde_json::to_vec(claims).expect("claims serialize");
    let tag = keys.mac(&payload);
    format!("{}.{}", B64.encode(&payload), B64.encode(tag))
}

/// The token of one wake of the subscription `key`, valid from `now`.
pub fn for_wake(
    keys: &Keys,
    key: &super::Key,
    generation: u64,
    wake_id: &str,
    now: Millis,
) -> String {
    issue(
        keys,
        &Claims {
            root: key.0.clone(),
            id: key.1.clone(),
            generation,
            wake_id: wake_id.to_owned(),
            expires: now.saturating_add(TOKEN_TTL_MS),
        },
    )
}

/// The claims of a token this server signed, unless it expired.
pub fn check(keys: &Keys, token: &str, now: Millis) -> Result<Claims, TokenError> {
    let (payload, tag) = token.split_once('.').ok_or(TokenError::Invalid)?;
    let payload = B64.decode(payload).map_err(|_| TokenError::Invalid)?;
    let tag = B64.decode(tag).map_err(|_| TokenError::Invalid)?;
    if !keys.verify_mac(&payload, &tag) {
        return Err(TokenError::Invalid);
    }
    let claims: Claims = serde_json::from_slice(&payload).map_err(|_| TokenError::Invalid)?;
    if claims.expires <= now {
        return Err(TokenError::Expired);
    }
    Ok(claims)
}

/// The token of an `Authorization: Bearer …` header.
pub fn bearer(headers: &http::HeaderMap) -> Option<&str> {
    shared::auth::bearer(headers.get(http::header::AUTHORIZATION)?.to_str().ok()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_signed_scoped_and_expire() {
        let dir = tempfile::tempdir().unwrap();
        let keys = Keys::open(dir.path(), 0, 0).unwrap();
        let claims = Claims {
            root: "/v1/stream".into(),
            id: "s".into(),
            generation: 3,
            wake_id: "w_1".into(),
            expires: 100,
        };
        let t = issue(&keys, &claims);
        assert_eq!(check(&keys, &t, 99), Ok(claims.clone()));
        assert_eq!(check(&keys, &t, 100), Err(TokenError::Expired));
        // Any change to the claims breaks the MAC.
        let forged = format!(
            "{}.{}",
            B64.encode(
                serde_json::to_vec(&Claims {
                    generation: 4,
                    ..claims
                })
                .unwrap()
            ),
            t.split_once('.').unwrap().1
        );
        assert_eq!(check(&keys, &forged, 0), Err(TokenError::Invalid));
        assert_eq!(check(&keys, "junk", 0), Err(TokenError::Invalid));
        // Another server's secret.
        let other = tempfile::tempdir().unwrap();
        assert_eq!(
            check(&Keys::open(other.path(), 0, 0).unwrap(), &t, 0),
            Err(TokenError::Invalid)
        );
    }
}
