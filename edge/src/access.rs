//! The edge's access gate: the origin's rules (`shared::auth`), enforced for
//! everything the edge answers itself, so a cached answer never reaches a
//! request whose credential was not verified for that stream.
//!
//! - **Open accounts** (same flag as the origin) pass as before.
//! - **Tokens** are verified here, with the origin's public key
//!   (`--token-public-key`, or fetched once from `/_auth/public-key`):
//!   signature, expiry, account, prefix, read-only. A verified token is served
//!   from the caches like anyone else, its answers marked `private`, and its
//!   misses filled with its own credential. A revoked key's tokens pass here
//!   until they expire (minutes); the origin refuses them at once.
//! - **Keys** cannot be checked without the key store: such requests go to
//!   the origin as they came (no cache). Exchange a key for a token to use
//!   the edge's caches.
//! - **No credential**: writes answer 401 here; reads pass only for a stream
//!   the origin says is public, which the edge asks with an anonymous `HEAD`
//!   and remembers for [`PUBLIC_TTL`] (making a stream private reaches the
//!   edge within that time; a CDN keeps what it cached under its own rules).
//!   What it remembers weighs at most `AccessConfig::public_memory` bytes
//!   (paths of any length); past it the least useful verdicts are dropped
//!   and asked again.
//! - **Limits** (requests per second, open tails) are charged once the
//!   caller is known, per edge, as on the origin (`shared::limits`): to the
//!   token's key, or for anonymous readers of a public stream to that
//!   account's public budget (requests only: the edge's fan-out serves many
//!   live readers of one stream, bounded by its own limits). A refused
//!   request spends no one's budget.
//!   Requests with a key are the origin's to count.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use http::{HeaderMap, Method, Request, Response};
use shared::auth::{credential, owner, Access, Credential, Denied, Verifier};
use shared::error::ErrorCode;
use shared::limits::{budget, LimitConfig, Limits, LiveReadGuard};

use crate::metrics;
use crate::upstream::Upstream;

/// How long the edge trusts the origin's word that a stream is public.
pub const PUBLIC_TTL: Duration = Duration::from_secs(5);
/// What one remembered verdict costs besides its path (the entry, its
/// key's allocation, moka's bookkeeping).
const PUBLIC_ENTRY_OVERHEAD: u32 = 96;

#[derive(Clone, Debug)]
pub struct AccessConfig {
    pub default_prefix: String,
    pub open_accounts: HashSet<String>,
    pub limits: LimitConfig,
    /// Hex Ed25519 key that verifies tokens; none: asked from the origin.
    pub token_public_key: Option<String>,
    /// Bytes of remembered public verdicts (paths plus a fixed overhead
    /// each); past it, verdicts are evicted and asked again.
    pub public_memory: u64,
}

impl Default for AccessConfig {
    fn default() -> Self {
        AccessConfig {
            default_prefix: "/v1/stream/".into(),
            open_accounts: [shared::auth::DEFAULT_ACCOUNT.to_owned()].into(),
            limits: LimitConfig::default(),
            token_public_key: None,
            public_memory: 16 * 1024 * 1024,
        }
    }
}

pub struct AccessGate {
    config: AccessConfig,
    limits: Arc<Limits>,
    verifier: tokio::sync::OnceCell<Verifier>,
    /// Path → (public, when the origin said so), by tokio's clock.
    public: moka::sync::Cache<String, (bool, Instant)>,
    /// Token expiry is checked against this (tokio's clock, see
    /// `shell::clock`).
    wall: shell::clock::WallClock,
}

/// What the gate decided.
pub enum Admit {
    /// Served by the edge as usual (an open account).
    Pass,
    /// An anonymous read of a public stream: served by the edge, its
    /// requests charged to the account's public budget (no tail count).
    Public {
        live: Option<LiveReadGuard>,
    },
    /// A verified token: served by the edge, answers private.
    Token {
        live: Option<LiveReadGuard>,
    },
    /// Only the origin can decide (an API key): forward as it came.
    ToOrigin,
    Refuse(Response<Body>),
}

fn refusal(code: ErrorCode, message: &str, retry_after: Option<u64>) -> Response<Body> {
    let mut r = crate::http::error::error_response(code, message);
    let h = r.headers_mut();
    if let Some(secs) = retry_after {
        h.insert("retry-after", http::HeaderValue::from(secs));
    }
    if code.status() == 401 {
        h.insert("www-authenticate", http::HeaderValue::from_static("Bearer"));
    }
    r
}

fn denied(d: Denied) -> Response<Body> {
    let (code, message) = d.answer();
    refusal(code, message, None)
}

fn limited(secs: u64) -> Response<Body> {
    refusal(
        ErrorCode::RateLimited,
        shared::auth::RATE_LIMITED_MESSAGE,
        Some(secs),
    )
}

impl AccessGate {
    pub fn new(config: AccessConfig) -> AccessGate {
        let verifier = tokio::sync::OnceCell::new();
        if let Some(v) = config
            .token_public_key
            .as_deref()
            .and_then(Verifier::from_hex)
        {
            let _ = verifier.set(v);
        }
        AccessGate {
            limits: Limits::new(config.limits),
            verifier,
            wall: shell::clock::WallClock::start(),
            public: moka::sync::Cache::builder()
                .max_capacity(config.public_memory)
                .weigher(|path: &String, _| {
                    u32::try_from(path.len())
                        .unwrap_or(u32::MAX)
                        .saturating_add(PUBLIC_ENTRY_OVERHEAD)
                })
                .build(),
            config,
        }
    }

    pub fn limits(&self) -> &Arc<Limits> {
        &self.limits
    }

    /// Bytes the remembered public verdicts weigh (after moka's pending
    /// evictions ran).
    pub fn public_memory_used(&self) -> u64 {
        self.public.run_pending_tasks();
        self.public.weighted_size()
    }

    async fn verifier(&self, upstream: &Upstream) -> Option<&Verifier> {
        self.verifier
            .get_or_try_init(|| async {
                let answer = upstream
                    .get(
                        "/_auth/public-key",
                        HeaderMap::new(),
                        metrics::Upstream::Forward,
                    )
                    .await
                    .map_err(|_| ())?;
                let text = std::str::from_utf8(&answer.body).map_err(|_| ())?;
                Verifier::from_hex(text).ok_or(())
            })
            .await
            .ok()
    }

    /// Whether the origin says anyone may read `stream` (remembered briefly).
    async fn is_public(&self, upstream: &Upstream, stream: &str) -> Result<bool, ()> {
        let now = shell::clock::now();
        if let Some((p, at)) = self.public.get(stream) {
            if now.saturating_duration_since(at) < PUBLIC_TTL {
                return Ok(p);
            }
        }
        let mut req = Request::new(Body::empty());
        *req.method_mut() = Method::HEAD;
        *req.uri_mut() = stream.parse().map_err(|_| ())?;
        let resp = upstream
            .forward(req, metrics::Upstream::Forward)
            .await
            .map_err(|_| ())?;
        let public = match resp.status().as_u16() {
            200 => true,
            401 | 403 | 404 => false,
            _ => return Err(()),
        };
        self.public.insert(stream.to_owned(), (public, now));
        Ok(public)
    }

    /// Decides a request to `stream`; `live` when it opens a tail.
    pub async fn admit(
        &self,
        upstream: &Upstream,
        stream: &str,
        access: Access,
        headers: &HeaderMap,
        live: bool,
    ) -> Admit {
        let owner = owner(stream, &self.config.default_prefix);
        if self.config.open_accounts.contains(owner.account) {
            return Admit::Pass;
        }
        let authorization = headers
            .get(http::header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap_or("\u{0}"));
        let cred = match credential(authorization) {
            Ok(c) => c,
            Err(d) => return Admit::Refuse(denied(d)),
        };
        // Charged once the caller is known: a refused request spends no
        // one's budget.
        // Anonymous readers of a public stream are counted in requests, not
        // tails: the edge's fan-out is for many readers of one stream, and
        // its own bounds (waiters, SSE readers) cap their tails.
        let charge = |budget: &str, tails: bool| -> Result<Option<LiveReadGuard>, u64> {
            let now = shell::clock::now();
            self.limits.request(budget, now).map_err(|a| a.0)?;
            if !live || !tails {
                return Ok(None);
            }
            self.limits
                .open_tail(budget, now)
                .map(Some)
                .map_err(|a| a.0)
        };
        match cred {
            None if access == Access::Write => Admit::Refuse(denied(Denied::Unauthorized)),
            None => match self.is_public(upstream, stream).await {
                Ok(true) => match charge(&budget(None, owner.account), false) {
                    Ok(live) => Admit::Public { live },
                    Err(after) => Admit::Refuse(limited(after)),
                },
                Ok(false) => Admit::Refuse(denied(Denied::Unauthorized)),
                // The origin cannot say: let it answer the request itself.
                Err(()) => Admit::ToOrigin,
            },
            Some(Credential::Key { .. }) => Admit::ToOrigin,
            Some(Credential::Token(token)) => {
                let Some(verifier) = self.verifier(upstream).await else {
                    return Admit::ToOrigin;
                };
                let now = self.wall.now_secs();
                match verifier
                    .verify(token, now)
                    .and_then(|g| g.allows(&owner, access, now).map(|()| g))
                {
                    Ok(grant) => match charge(&budget(Some(&grant), owner.account), true) {
                        Ok(live) => Admit::Token { live },
                        Err(after) => Admit::Refuse(limited(after)),
                    },
                    Err(d) => Admit::Refuse(denied(d)),
                }
            }
        }
    }
}
