//! The primitives of the binary checkpoint format: LEB128 integers,
//! length-prefixed UTF-8 strings, one-byte flags.
//!
//! The reader checks every length and count against the bytes that are
//! left before it slices or allocates, so a damaged file yields an error,
//! never a panic and never an allocation larger than the file could hold.

use super::error::Corruption;

pub fn put_u64(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push(v as u8 | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

pub fn put_len(out: &mut Vec<u8>, n: usize) {
    put_u64(out, n as u64);
}

pub fn put_str(out: &mut Vec<u8>, s: &str) {
    put_len(out, s.len());
    out.extend_from_slice(s.as_bytes());
}

pub fn put_bool(out: &mut Vec<u8>, b: bool) {
    out.push(u8::from(b));
}

/// Reads the primitives off the front of a buffer.
pub struct Reader<'a> {
    rest: &'a [u8],
}

fn bad(what: &'static str) -> Corruption {
    Corruption::Format(what)
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { rest: buf }
    }

    pub fn u64(&mut self) -> Result<u64, Corruption> {
        let mut v = 0u64;
        for (i, &b) in self.rest.iter().take(10).enumerate() {
            // The tenth byte holds bit 63 only.
            if i == 9 && b > 1 {
                return Err(bad("a number does not fit in 64 bits"));
            }
            v |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.rest = &self.rest[i + 1..];
                return Ok(v);
            }
        }
        Err(bad("a number runs past the end"))
    }

    pub fn u32(&mut self) -> Result<u32, Corruption> {
        u32::try_from(self.u64()?).map_err(|_| bad("a number does not fit in 32 bits"))
    }

    pub fn byte(&mut self) -> Result<u8, Corruption> {
        let (&b, rest) = self
            .rest
            .split_first()
            .ok_or(bad("a flag runs past the end"))?;
        self.rest = rest;
        Ok(b)
    }

    pub fn bool(&mut self) -> Result<bool, Corruption> {
        match self.byte()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(bad("a flag is neither 0 nor 1")),
        }
    }

    /// `n` bytes, which must be there.
    pub fn bytes(&mut self, n: usize) -> Result<&'a [u8], Corruption> {
        if n > self.rest.len() {
            return Err(bad("a length runs past the end"));
        }
        let (head, rest) = self.rest.split_at(n);
        self.rest = rest;
        Ok(head)
    }

    /// A byte length, which must fit in what is left.
    pub fn byte_len(&mut self) -> Result<usize, Corruption> {
        let n = self.u64()?;
        match usize::try_from(n) {
            Ok(n) if n <= self.rest.len() => Ok(n),
            _ => Err(bad("a length runs past the end")),
        }
    }

    /// A length-prefixed byte string.
    pub fn framed(&mut self) -> Result<&'a [u8], Corruption> {
        let n = self.byte_len()?;
        self.bytes(n)
    }

    pub fn str(&mut self) -> Result<&'a str, Corruption> {
        std::str::from_utf8(self.framed()?).map_err(|_| bad("a string is not UTF-8"))
    }

    /// A number of items that take at least `min_bytes` each: it must fit in
    /// what is left, so a damaged count cannot make the caller reserve room
    /// for more items than the buffer holds.
    pub fn count(&mut self, min_bytes: usize) -> Result<usize, Corruption> {
        let n = self.u64()?;
        let min_bytes = min_bytes.max(1);
        let fits = usize::try_from(n).ok().filter(|&n| {
            n.checked_mul(min_bytes)
                .is_some_and(|b| b <= self.rest.len())
        });
        fits.ok_or(bad("a count is larger than the bytes left could hold"))
    }

    /// Fails unless every byte was read.
    pub fn finish(&self, what: &'static str) -> Result<(), Corruption> {
        if self.rest.is_empty() {
            Ok(())
        } else {
            Err(bad(what))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn numbers_round_trip(v in any::<u64>()) {
            let mut out = Vec::new();
            put_u64(&mut out, v);
            prop_assert!(out.len() <= 10);
            let mut r = Reader::new(&out);
            prop_assert_eq!(r.u64().unwrap(), v);
            prop_assert!(r.finish("left over").is_ok());
        }

        #[test]
        fn strings_round_trip(s in ".*") {
            let mut out = Vec::new();
            put_str(&mut out, &s);
            let mut r = Reader::new(&out);
            prop_assert_eq!(r.str().unwrap(), s.as_str());
            prop_assert!(r.finish("left over").is_ok());
        }
    }

    #[test]
    fn edges_of_numbers() {
        let mut out = Vec::new();
        put_u64(&mut out, u64::MAX);
        assert_eq!(out.len(), 10);
        assert_eq!(*out.last().unwrap(), 1);
        *out.last_mut().unwrap() = 2;
        assert!(Reader::new(&out).u64().is_err(), "bit 64 set");
        assert!(Reader::new(&[0x80; 10]).u64().is_err(), "eleven bytes");
        assert!(Reader::new(&[0x80]).u64().is_err(), "cut short");
        assert!(Reader::new(&[]).u64().is_err());
        let mut big = Vec::new();
        put_u64(&mut big, u64::from(u32::MAX) + 1);
        assert!(Reader::new(&big).u32().is_err());
    }

    #[test]
    fn lengths_and_counts_are_checked_against_what_is_left() {
        assert!(Reader::new(&[5, b'a', b'b']).str().is_err());
        assert!(Reader::new(&[2, 0xff, 0xfe]).str().is_err(), "not UTF-8");
        assert!(Reader::new(&[3, 0, 0, 0]).count(1).is_ok());
        assert!(Reader::new(&[3, 0, 0, 0]).count(2).is_err());
        let mut huge = Vec::new();
        put_u64(&mut huge, u64::MAX);
        assert!(Reader::new(&huge).count(0).is_err());
        assert!(Reader::new(&huge).byte_len().is_err());
        assert!(Reader::new(&[2]).bool().is_err());
    }
}
