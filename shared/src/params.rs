//! The read query: `offset`, `live`, `max_bytes`, `timeout_ms`, `cursor`,
//! `consistency`, `min_next_offset`. Parsing is strict where a wrong guess would return the
//! wrong bytes (offset, live, consistency) and lenient where the spec says to
//! fall back to a default (`max_bytes`, `timeout_ms`).

use crate::offset::{Offset, ReadFrom};

/// The query parameter of a read's floor (decision 0025): the
/// `Stream-Next-Offset` a write's answer gave; the answer must come from a
/// state of the stream whose end is at least it.
pub const MIN_NEXT_OFFSET: &str = "min_next_offset";

/// The most bytes one answer (or one SSE data event) carries.
pub const MAX_READ_BYTES: u64 = 8 * 1024 * 1024;
/// Long-poll wait when `timeout_ms` is absent or not a number.
pub const DEFAULT_LONG_POLL_MS: u64 = 1000;
/// The longest long-poll wait a reader may ask for.
pub const MAX_LONG_POLL_MS: u64 = 60_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Live {
    No,
    LongPoll,
    Sse,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Consistency {
    Local,
    Leader,
}

/// A parsed read query.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadParams {
    pub offset: ReadFrom,
    /// Whether the reader sent an offset at all (live reads require one).
    pub offset_given: bool,
    pub live: Live,
    pub max_bytes: u64,
    /// `timeout_ms` as given (clamped); `None` when absent or not a number.
    pub timeout_ms: Option<u64>,
    pub cursor: Option<String>,
    pub consistency: Consistency,
    /// `min_next_offset`: the answer reflects a state of the stream whose
    /// end is at or past it (read your writes through any origin or edge).
    pub floor: Option<Offset>,
}

/// Whether a stream whose end is `end` may answer a read with `floor`:
/// its state holds every byte below the floor. The one rule every server
/// that answers reads applies (owner, follower's replica, edge).
pub fn floor_reached(floor: Option<Offset>, end: u64) -> bool {
    floor.is_none_or(|f| end >= f.bytes())
}

impl ReadParams {
    /// The long-poll wait, with `default_ms` when the reader named none.
    pub fn long_poll_ms(&self, default_ms: u64) -> u64 {
        self.timeout_ms.unwrap_or(default_ms)
    }
}

/// Why a read query was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParamError {
    #[error("malformed offset {0:?}: send -1, now, or a Stream-Next-Offset an answer gave")]
    Offset(String),
    #[error("a live read needs an offset")]
    MissingOffset,
    #[error("live must be long-poll or sse, not {0:?}")]
    Live(String),
    #[error("consistency must be local or leader, not {0:?}")]
    Consistency(String),
    #[error("consistency=leader cannot be combined with live")]
    LeaderWithLive,
    #[error("malformed min_next_offset {0:?}: send the Stream-Next-Offset a write's answer gave")]
    Floor(String),
    #[error("the query parameter {0} appears more than once")]
    Repeated(&'static str),
}

impl ParamError {
    pub fn is_offset(&self) -> bool {
        matches!(
            self,
            ParamError::Offset(_) | ParamError::MissingOffset | ParamError::Floor(_)
        ) || matches!(self, ParamError::Repeated(name) if *name == MIN_NEXT_OFFSET)
    }
}

/// Parses a raw query string (without `?`).
pub fn parse_read_query(query: Option<&str>) -> Result<ReadParams, ParamError> {
    let mut offset = None;
    let mut live = None;
    let mut max_bytes = None;
    let mut timeout = None;
    let mut cursor = None;
    let mut consistency = None;
    let mut floor = None;
    fn once<T>(slot: &mut Option<T>, value: T, name: &'static str) -> Result<(), ParamError> {
        if slot.replace(value).is_some() {
            return Err(ParamError::Repeated(name));
        }
        Ok(())
    }
    for (k, v) in form_urlencoded::parse(query.unwrap_or("").as_bytes()) {
        match &*k {
            "offset" => once(&mut offset, v.into_owned(), "offset")?,
            "live" => once(&mut live, v.into_owned(), "live")?,
            "max_bytes" => once(&mut max_bytes, v.into_owned(), "max_bytes")?,
            "timeout_ms" => once(&mut timeout, v.into_owned(), "timeout_ms")?,
            "cursor" => once(&mut cursor, v.into_owned(), "cursor")?,
            "consistency" => once(&mut consistency, v.into_owned(), "consistency")?,
            MIN_NEXT_OFFSET => once(&mut floor, v.into_owned(), MIN_NEXT_OFFSET)?,
            _ => {}
        }
    }
    let live = match live.as_deref() {
        None => Live::No,
        Some("long-poll") => Live::LongPoll,
        Some("sse") => Live::Sse,
        Some(other) => return Err(ParamError::Live(other.to_owned())),
    };
    let offset_given = offset.is_some();
    let offset = match offset.as_deref() {
        None => {
            if live != Live::No {
                return Err(ParamError::MissingOffset);
            }
            ReadFrom::Start
        }
        Some(s) => ReadFrom::parse(s).ok_or_else(|| ParamError::Offset(s.to_owned()))?,
    };
    let consistency = match consistency.as_deref() {
        None | Some("local") => Consistency::Local,
        Some("leader") => Consistency::Leader,
        Some(other) => return Err(ParamError::Consistency(other.to_owned())),
    };
    if consistency == Consistency::Leader && live != Live::No {
        return Err(ParamError::LeaderWithLive);
    }
    // Only an offset a write's answer gives: `-1` and `now` name no write.
    let floor = match floor {
        None => None,
        Some(s) => Some(Offset::parse(&s).ok_or(ParamError::Floor(s))?),
    };
    let max_bytes = match max_bytes.and_then(|s| s.parse::<u64>().ok()) {
        Some(n) if n > 0 => n.min(MAX_READ_BYTES),
        _ => MAX_READ_BYTES,
    };
    let timeout_ms = timeout
        .and_then(|s| s.parse::<u64>().ok())
        .map(|n| n.clamp(1, MAX_LONG_POLL_MS));
    Ok(ReadParams {
        offset,
        offset_given,
        live,
        max_bytes,
        timeout_ms,
        cursor,
        consistency,
        floor,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::offset::Offset;

    #[test]
    fn defaults() {
        let p = parse_read_query(None).unwrap();
        assert_eq!(p.offset, ReadFrom::Start);
        assert_eq!(p.live, Live::No);
        assert_eq!(p.max_bytes, MAX_READ_BYTES);
        assert_eq!(p.long_poll_ms(DEFAULT_LONG_POLL_MS), 1000);
        assert_eq!(p.consistency, Consistency::Local);
    }

    #[test]
    fn values() {
        let p = parse_read_query(Some(
            "offset=0000000000000010&live=long-poll&timeout_ms=999999&cursor=5&max_bytes=7",
        ))
        .unwrap();
        assert_eq!(p.offset, ReadFrom::At(Offset(16)));
        assert_eq!(p.live, Live::LongPoll);
        assert_eq!(p.timeout_ms, Some(MAX_LONG_POLL_MS));
        assert_eq!(p.cursor.as_deref(), Some("5"));
        assert_eq!(p.max_bytes, 7);
        assert_eq!(
            parse_read_query(Some("max_bytes=abc")).unwrap().max_bytes,
            MAX_READ_BYTES
        );
        assert_eq!(
            parse_read_query(Some("max_bytes=999999999999"))
                .unwrap()
                .max_bytes,
            MAX_READ_BYTES
        );
        assert_eq!(
            parse_read_query(Some("offset=-1&live=sse&timeout_ms=x"))
                .unwrap()
                .timeout_ms,
            None
        );
        assert_eq!(
            parse_read_query(Some("offset=now&live=long-poll&timeout_ms=0"))
                .unwrap()
                .timeout_ms,
            Some(1)
        );
    }

    #[test]
    fn refusals() {
        assert!(matches!(
            parse_read_query(Some("offset=abc")),
            Err(ParamError::Offset(_))
        ));
        assert!(matches!(
            parse_read_query(Some("live=sse")),
            Err(ParamError::MissingOffset)
        ));
        assert!(matches!(
            parse_read_query(Some("offset=-1&live=poll")),
            Err(ParamError::Live(_))
        ));
        assert!(matches!(
            parse_read_query(Some("consistency=strong")),
            Err(ParamError::Consistency(_))
        ));
        assert!(matches!(
            parse_read_query(Some("offset=-1&consistency=leader&live=long-poll")),
            Err(ParamError::LeaderWithLive)
        ));
        assert!(matches!(
            parse_read_query(Some("offset=-1&offset=now")),
            Err(ParamError::Repeated("offset"))
        ));
        assert!(parse_read_query(Some("consistency=leader")).is_ok());
    }

    #[test]
    fn a_floor_is_an_offset_a_write_gave() {
        assert_eq!(parse_read_query(None).unwrap().floor, None);
        let p = parse_read_query(Some("offset=-1&min_next_offset=0000000000000010")).unwrap();
        assert_eq!(p.floor, Some(Offset(16)));
        for bad in ["-1", "now", "10", "zz00000000000010", ""] {
            let got = parse_read_query(Some(&format!("min_next_offset={bad}")));
            assert!(matches!(got, Err(ParamError::Floor(_))), "{bad:?}");
            assert!(got.unwrap_err().is_offset());
        }
        let repeated = parse_read_query(Some(
            "min_next_offset=0000000000000010&min_next_offset=0000000000000011",
        ));
        assert!(matches!(
            repeated,
            Err(ParamError::Repeated(MIN_NEXT_OFFSET))
        ));
        assert!(repeated.unwrap_err().is_offset(), "INVALID_OFFSET");
    }

    #[test]
    fn a_floor_is_reached_at_or_past_it() {
        assert!(floor_reached(None, 0));
        assert!(floor_reached(Some(Offset(16)), 16));
        assert!(floor_reached(Some(Offset(16)), 17));
        assert!(!floor_reached(Some(Offset(16)), 15));
        assert!(!floor_reached(Some(Offset(1)), 0));
    }
}
