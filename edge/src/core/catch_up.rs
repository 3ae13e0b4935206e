//! Catch-up reads answered from chunks: which chunk ranges make up an
//! answer, and the headers the origin would give it.
//!
//! A read from `start` answers `[start, min(tail, start + max_bytes))` (the
//! origin cuts binary and text reads anywhere). The edge answers it from
//! the chunks of the 4 MiB grid that cover that range, fetched by their
//! aligned URLs so every reader shares them; complete chunks are immutable
//! and come from the cache, the open one at the end from the origin. A read
//! that lies wholly in the open chunk gains nothing and goes to the origin.
//! The headers follow the origin's read rule: `Stream-Next-Offset`,
//! `Stream-Up-To-Date` and `Stream-Closed` at the end, and the `ETag` of
//! `shared::etag` for the same incarnation, range and closed state.

use shared::etag::read_etag;
use shared::offset::{Offset, CHUNK_BYTES};

/// Cache-Control of a read answer with bytes (the origin's read rule).
pub const CACHEABLE: &str = "public, max-age=60, stale-while-revalidate=300";

/// One chunk's part of an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The chunk's aligned start: its URL's offset.
    pub chunk: u64,
    /// The stream range `[from, to)` taken from it.
    pub from: u64,
    pub to: u64,
}

/// How one catch-up answer is made.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Plan {
    pub start: u64,
    pub end: u64,
    pub pieces: Vec<Piece>,
    pub up_to_date: bool,
    pub closed: bool,
}

/// The plan for a read from `start` of at most `max` bytes, against a tail
/// (and closed state) the origin just gave; `None` when the origin should
/// answer (past the end, or nothing but the open chunk).
pub fn plan(start: u64, max: u64, tail: u64, closed: bool) -> Option<Plan> {
    if start > tail || start / CHUNK_BYTES == tail / CHUNK_BYTES {
        return None;
    }
    let end = tail.min(start.saturating_add(max));
    let mut pieces = Vec::new();
    let mut pos = start;
    while pos < end {
        let chunk = pos - pos % CHUNK_BYTES;
        let to = end.min(chunk.saturating_add(CHUNK_BYTES));
        pieces.push(Piece {
            chunk,
            from: pos,
            to,
        });
        pos = to;
    }
    let up_to_date = end == tail;
    Some(Plan {
        start,
        end,
        pieces,
        up_to_date,
        closed: up_to_date && closed,
    })
}

impl Plan {
    pub fn etag(&self, incarnation: &str) -> String {
        read_etag(
            incarnation,
            Offset(self.start),
            Offset(self.end),
            self.closed,
        )
    }
}

/// Whether a stream whose tail is known to be at least `known_tail` has a
/// complete chunk at `start`, so asking for its state is worth a request.
pub fn worth_planning(start: u64, known_tail: u64) -> bool {
    start / CHUNK_BYTES < known_tail / CHUNK_BYTES
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: u64 = CHUNK_BYTES;

    #[test]
    fn pieces_follow_the_grid() {
        let p = plan(C - 10, 8 * 1024 * 1024, 2 * C + 5, false).unwrap();
        assert_eq!(p.end, 2 * C + 5);
        assert_eq!(
            p.pieces,
            vec![
                Piece {
                    chunk: 0,
                    from: C - 10,
                    to: C
                },
                Piece {
                    chunk: C,
                    from: C,
                    to: 2 * C
                },
                Piece {
                    chunk: 2 * C,
                    from: 2 * C,
                    to: 2 * C + 5
                },
            ]
        );
        assert!(p.up_to_date);
        let p = plan(0, 100, 2 * C, true).unwrap();
        assert_eq!((p.end, p.up_to_date, p.closed), (100, false, false));
        let p = plan(C, C, 2 * C, true).unwrap();
        assert_eq!((p.end, p.up_to_date, p.closed), (2 * C, true, true));
        assert_eq!(p.pieces.len(), 1);
    }

    #[test]
    fn the_origin_answers_the_rest() {
        assert_eq!(plan(5, 100, 10, false), None, "all in the open chunk");
        assert_eq!(plan(C + 1, 100, C, false), None, "past the end");
        assert_eq!(plan(C, 100, C + 3, false), None);
        assert!(worth_planning(0, C));
        assert!(!worth_planning(C, C + 3));
    }

    #[test]
    fn etag_is_the_origins() {
        let p = plan(0, 10, C, false).unwrap();
        assert_eq!(p.etag("i"), "\"i:0000000000000000:000000000000000a\"");
    }
}
