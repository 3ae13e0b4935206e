//! Offsets: opaque to readers, byte positions to us.
//!
//! An offset is the position of a byte in the stream's log, written as exactly
//! 16 lowercase hexadecimal digits. Fixed width makes the string order the same
//! as the numeric order, which the protocol requires, and lets a reader or a
//! cache compare offsets without parsing them. Because an offset *is* a byte
//! position, the 4 MiB chunk grid is plain arithmetic on it (see
//! `docs/decisions/0001-offsets.md`).

use std::fmt;

/// Width of an encoded offset in characters.
pub const OFFSET_WIDTH: usize = 16;

/// Size of one chunk of the immutable chunk grid.
pub const CHUNK_BYTES: u64 = 4 * 1024 * 1024;

/// A byte position in a stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Offset(pub u64);

impl Offset {
    pub const ZERO: Offset = Offset(0);

    pub fn bytes(self) -> u64 {
        self.0
    }

    /// Parses the exact 16-hex-digit form this server hands out.
    pub fn parse(s: &str) -> Option<Offset> {
        if s.len() != OFFSET_WIDTH
            || !s
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return None;
        }
        u64::from_str_radix(s, 16).ok().map(Offset)
    }

    /// The offset as a header value, formatted without allocating a string.
    pub fn header_value(self) -> http::HeaderValue {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut buf = [0u8; OFFSET_WIDTH];
        for (i, b) in buf.iter_mut().enumerate() {
            *b = HEX[((self.0 >> (4 * (OFFSET_WIDTH - 1 - i))) & 0xf) as usize];
        }
        http::HeaderValue::from_bytes(&buf).expect("hex digits are a valid header value")
    }

    /// Index of the chunk of the grid that holds this byte.
    pub fn chunk_index(self) -> u64 {
        self.0 / CHUNK_BYTES
    }

    /// The first offset of the next chunk boundary strictly after this
    /// offset (the largest offset for one in the last chunk of the range:
    /// offsets come from requests, and no stream gets that far).
    pub fn next_chunk_boundary(self) -> Offset {
        Offset((self.chunk_index() + 1).saturating_mul(CHUNK_BYTES))
    }
}

impl fmt::Display for Offset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

/// What a reader may send as `offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadFrom {
    /// `-1` or no offset: the start of the stream (or of its retention).
    Start,
    /// `now`: the stream's current end.
    Now,
    /// An offset an earlier answer gave.
    At(Offset),
}

impl ReadFrom {
    pub fn parse(s: &str) -> Option<ReadFrom> {
        match s {
            "-1" => Some(ReadFrom::Start),
            "now" => Some(ReadFrom::Now),
            other => Offset::parse(other).map(ReadFrom::At),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn the_last_chunk_of_the_range_does_not_wrap() {
        assert_eq!(Offset(0).next_chunk_boundary(), Offset(CHUNK_BYTES));
        assert_eq!(Offset(u64::MAX).next_chunk_boundary(), Offset(u64::MAX));
        assert_eq!(
            Offset(u64::MAX - CHUNK_BYTES).next_chunk_boundary(),
            Offset(u64::MAX - u64::MAX % CHUNK_BYTES)
        );
    }

    #[test]
    fn encodes_fixed_width() {
        assert_eq!(Offset(0).to_string(), "0000000000000000");
        assert_eq!(Offset(CHUNK_BYTES).to_string(), "0000000000400000");
        assert_eq!(Offset(u64::MAX).to_string(), "ffffffffffffffff");
    }

    #[test]
    fn rejects_foreign_forms() {
        for bad in [
            "",
            "0",
            "abc",
            "000000000000000G",
            "0000000000000000 ",
            "000000000000000A",
            "-2",
            "00000000000000000",
        ] {
            assert_eq!(Offset::parse(bad), None, "{bad:?}");
        }
        assert_eq!(ReadFrom::parse("-1"), Some(ReadFrom::Start));
        assert_eq!(ReadFrom::parse("now"), Some(ReadFrom::Now));
        assert_eq!(ReadFrom::parse("NOW"), None);
    }

    #[test]
    fn header_value_is_the_display_form() {
        for n in [0, 1, 0xabc, CHUNK_BYTES, u64::MAX] {
            assert_eq!(
                Offset(n).header_value().to_str().unwrap(),
                Offset(n).to_string()
            );
        }
    }

    #[test]
    fn chunk_grid() {
        assert_eq!(Offset(0).chunk_index(), 0);
        assert_eq!(Offset(CHUNK_BYTES - 1).chunk_index(), 0);
        assert_eq!(Offset(CHUNK_BYTES).chunk_index(), 1);
        assert_eq!(Offset(5).next_chunk_boundary(), Offset(CHUNK_BYTES));
        assert_eq!(
            Offset(CHUNK_BYTES).next_chunk_boundary(),
            Offset(2 * CHUNK_BYTES)
        );
    }

    proptest! {
        #[test]
        fn round_trips(n in any::<u64>()) {
            let s = Offset(n).to_string();
            prop_assert_eq!(s.len(), OFFSET_WIDTH);
            prop_assert_eq!(Offset::parse(&s), Some(Offset(n)));
        }

        #[test]
        fn string_order_is_numeric_order(a in any::<u64>(), b in any::<u64>()) {
            prop_assert_eq!(Offset(a).to_string().cmp(&Offset(b).to_string()), a.cmp(&b));
        }
    }
}
