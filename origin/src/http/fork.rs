//! The fork headers of a `PUT` (protocol §4.2), and resolving them against
//! the source: where the inherited prefix ends and what configuration the
//! fork gets (see `core::fork` for the rules, `store::writer::creating` for
//! the create itself).
//!
//! `Stream-Fork-Offset` takes this server's offsets, and also the form the
//! reference server gives (`{seq}_{byte}`, decimal), read as its byte part:
//! the conformance suite names the start of a stream as
//! `0000000000000000_0000000000000000`. Reads take only this server's form.
//!
//! `Stream-Fork-Sub-Offset` counts past the anchor: bytes on a binary
//! stream, messages on a JSON stream (found by reading the source's NDJSON
//! from the anchor: the only part of a fork that costs time with its size,
//! and only with the sub-offset's, at most one request's worth, 8 MiB: the
//! messages of one append, as the reference server bounds it). It may
//! reach the source's end and no further. A JSON fork point must fall
//! between messages.

use http::HeaderMap;
use shared::headers as h;
use shared::offset::Offset;

use super::error::ApiError;
use super::request::{self, text};
use super::Shared;
use crate::core::config::Expiry;
use crate::core::fork::{self, ForkRefusal, ForkRequest};
use crate::store::{ForkPlan, ResolvedFork, StoreError, StreamView};

/// How much of a JSON source one step of counting messages reads.
const COUNT_STEP: u64 = 1024 * 1024;

/// The fork a `PUT` asks for, or None for a plain create (which may not
/// carry a sub-offset).
pub fn request(
    headers: &HeaderMap,
    content_type: Option<&str>,
    expiry: Expiry,
) -> Result<Option<ForkRequest>, ApiError> {
    let sub = match text(headers, &h::STREAM_FORK_SUB_OFFSET)? {
        None => None,
        Some(v) => Some(request::strict_uint(v).ok_or_else(|| {
            ApiError::bad(format!(
                "Stream-Fork-Sub-Offset is a whole number without sign or leading zeros, not {v:?}"
            ))
        })?),
    };
    let Some(from) = text(headers, &h::STREAM_FORKED_FROM)? else {
        if sub.is_some() {
            return Err(ApiError::bad(
                "Stream-Fork-Sub-Offset needs Stream-Forked-From",
            ));
        }
        return Ok(None);
    };
    let offset = match text(headers, &h::STREAM_FORK_OFFSET)? {
        None => None,
        Some(v) => Some(fork_offset(v).ok_or_else(|| {
            ApiError::Invalid(
                shared::error::ErrorCode::InvalidOffset,
                format!("{v:?} is not an offset this server gives"),
            )
        })?),
    };
    let sent_expiry =
        headers.contains_key(&h::STREAM_TTL) || headers.contains_key(&h::STREAM_EXPIRES_AT);
    Ok(Some(ForkRequest {
        from: from.to_owned(),
        offset,
        sub: sub.unwrap_or(0),
        content_type: content_type.map(str::to_owned),
        expiry: sent_expiry.then_some(expiry),
    }))
}

/// An offset of this server, or of the reference server's form.
fn fork_offset(v: &str) -> Option<u64> {
    if let Some(o) = Offset::parse(v) {
        return Some(o.bytes());
    }
    let (seq, byte) = v.split_once('_')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (digits(seq) && digits(byte))
        .then(|| byte.parse().ok())
        .flatten()
}

/// Resolves `req` for `path` against its source (not when a stream is at
/// `path`, or no source: the writer then only matches what is there).
pub async fn plan(state: &Shared, path: &str, req: ForkRequest) -> Result<ForkPlan, ApiError> {
    let unresolved = |request| ForkPlan {
        request,
        resolved: None,
    };
    if matches!(state.store.find(path), Ok(_) | Err(StoreError::SoftDeleted)) {
        return Ok(unresolved(req));
    }
    let source = match state.store.find(&req.from) {
        Ok(view) => view,
        Err(StoreError::NotFound) => return Ok(unresolved(req)),
        Err(StoreError::SoftDeleted) => {
            return Err(ApiError::Store(StoreError::ForkSourceDeleted));
        }
        Err(e) => return Err(e.into()),
    };
    let config = fork::config(&req, &source.config).map_err(refused)?;
    let tail = source.end().next;
    let anchor = req.offset.unwrap_or(tail);
    // A fork starts where a read could: not before the source's retention.
    let retained = source.end().retained;
    if anchor < retained {
        return Err(ApiError::Gone { retained });
    }
    let at = if source.is_json() {
        json_point(
            &source,
            anchor,
            retained,
            req.sub,
            tail,
            state.config.max_body,
        )
        .await?
    } else {
        fork::binary_point(anchor, req.sub, tail).map_err(refused)?
    };
    Ok(ForkPlan {
        request: req,
        resolved: Some(ResolvedFork {
            source,
            anchor,
            at,
            config,
        }),
    })
}

fn refused(r: ForkRefusal) -> ApiError {
    ApiError::Store(StoreError::ForkRefused(r))
}

/// The end of the `sub`-th message from `anchor` of a JSON source, which
/// must itself fall between messages, within `limit` bytes of it. The
/// retained offset is between messages by construction (retention moves
/// only to a snapshot's offset, which is), and the byte before it may be
/// gone: it is not read.
async fn json_point(
    source: &std::sync::Arc<StreamView>,
    anchor: u64,
    retained: u64,
    sub: u64,
    tail: u64,
    limit: u64,
) -> Result<u64, ApiError> {
    if anchor > tail {
        return Err(refused(ForkRefusal::BeyondTail { tail }));
    }
    if anchor > retained && source.read(anchor - 1, anchor).await?.as_ref() != b"\n" {
        return Err(ApiError::Invalid(
            shared::error::ErrorCode::InvalidOffset,
            "a JSON stream forks between messages".to_owned(),
        ));
    }
    let (mut at, mut left) = (anchor, sub);
    let bound = tail.min(anchor.saturating_add(limit));
    while left > 0 {
        if at >= tail {
            return Err(refused(ForkRefusal::BeyondTail { tail }));
        }
        if at >= bound {
            return Err(refused(ForkRefusal::SubOffsetTooFar { limit }));
        }
        let end = bound.min(at.saturating_add(COUNT_STEP));
        let bytes = source.read(at, end).await?;
        for (i, b) in bytes.iter().enumerate() {
            if *b == b'\n' {
                left -= 1;
                if left == 0 {
                    return Ok(at + i as u64 + 1);
                }
            }
        }
        at = end;
    }
    Ok(at)
}

#[cfg(test)]
mod tests {
    use super::fork_offset;

    #[test]
    fn fork_offsets_of_both_forms() {
        assert_eq!(fork_offset("0000000000000000"), Some(0));
        assert_eq!(fork_offset("00000000000000ff"), Some(255));
        assert_eq!(fork_offset("0000000000000000_0000000000000000"), Some(0));
        assert_eq!(fork_offset("0_42"), Some(42));
        assert_eq!(
            fork_offset("9999999999999999_9999999999999999"),
            Some(9_999_999_999_999_999)
        );
        for bad in [
            "",
            "_",
            "1_",
            "_1",
            "a_1",
            "1_-1",
            "1_99999999999999999999",
            "-1",
        ] {
            assert_eq!(fork_offset(bad), None, "{bad:?}");
        }
    }
}
