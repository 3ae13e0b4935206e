//! Which part of a stream is ready to be sealed into an immutable chunk.
//!
//! Chunk *k* holds bytes `[k·4 MiB, (k+1)·4 MiB)`. It can be sealed once the
//! stream has passed its end, or, for the last chunk, once the stream is
//! closed (it can never change again). Sealing goes in order, so a stream's
//! sealed bytes are always a prefix: `sealed` is the end of that prefix.

use shared::offset::{Offset, CHUNK_BYTES};

/// The next range to seal after `sealed`, if one is ready.
pub fn next_sealable(len: u64, closed: bool, sealed: u64) -> Option<(u64, u64)> {
    let boundary = Offset(sealed).next_chunk_boundary().bytes();
    let start = sealed - sealed % CHUNK_BYTES;
    if !sealed.is_multiple_of(CHUNK_BYTES) {
        // Only a closed stream's last chunk is sealed short of a boundary,
        // and nothing follows it.
        return None;
    }
    if len >= boundary {
        Some((start, boundary))
    } else if closed && len > sealed {
        Some((start, len))
    } else {
        None
    }
}

/// Every range ready to seal after `sealed`, in order.
pub fn all_sealable(len: u64, closed: bool, mut sealed: u64) -> Vec<(u64, u64)> {
    let mut out = Vec::new();
    while let Some((start, end)) = next_sealable(len, closed, sealed) {
        out.push((start, end));
        sealed = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const C: u64 = CHUNK_BYTES;

    #[test]
    fn full_chunks_seal_in_order() {
        assert_eq!(next_sealable(C - 1, false, 0), None);
        assert_eq!(next_sealable(C, false, 0), Some((0, C)));
        assert_eq!(next_sealable(2 * C + 5, false, C), Some((C, 2 * C)));
        assert_eq!(
            all_sealable(3 * C + 1, false, 0),
            vec![(0, C), (C, 2 * C), (2 * C, 3 * C)]
        );
    }

    #[test]
    fn a_closed_stream_seals_its_last_partial_chunk() {
        assert_eq!(all_sealable(C + 10, true, 0), vec![(0, C), (C, C + 10)]);
        assert_eq!(
            next_sealable(C + 10, true, C + 10),
            None,
            "nothing after a short last chunk"
        );
        assert_eq!(
            next_sealable(0, true, 0),
            None,
            "an empty stream has no chunk"
        );
        assert_eq!(next_sealable(C, true, C), None);
    }
}
