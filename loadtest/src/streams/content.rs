//! What `ds-load streams` writes into each stream, and how it checks that it
//! reads back the same.
//!
//! Every write is a *piece*: write `k` of stream `i` (`k = 0` is the body of
//! the create, `k = 1, 2, …` the appends) is the text `"{i}.{k};"` repeated
//! to the body size. A stream's whole content is its pieces in order, so a
//! read that returns another stream's bytes, loses a write, or has two
//! writes swapped does not compare equal, and nothing needs remembering.

use bytes::Bytes;
use http_body_util::Full;
use hyper::Request;

use crate::pool::{Answer, Job};

/// Write `k` of stream `i`, `len` bytes.
pub fn piece(i: usize, k: usize, len: usize) -> Vec<u8> {
    let unit = format!("{i}.{k};");
    unit.bytes().cycle().take(len).collect()
}

/// Everything stream `i` holds after its create and `appends` appends.
pub fn whole(i: usize, appends: usize, len: usize) -> Vec<u8> {
    (0..=appends).flat_map(|k| piece(i, k, len)).collect()
}

/// The origin's offsets are byte positions, 16 lowercase hex digits.
pub fn offset(bytes: usize) -> String {
    format!("{bytes:016x}")
}

/// Stream `i`'s path.
fn path(prefix: &str, i: usize) -> String {
    format!("{prefix}{i}")
}

fn octets(
    req: hyper::http::request::Builder,
    body: Vec<u8>,
) -> anyhow::Result<Request<Full<Bytes>>> {
    Ok(req
        .header("content-type", "application/octet-stream")
        .body(Full::new(Bytes::from(body)))?)
}

/// `PUT` with the first piece.
pub struct Create {
    pub prefix: String,
    pub body: usize,
}

impl Job for Create {
    fn request(&self, i: usize) -> anyhow::Result<Request<Full<Bytes>>> {
        octets(Request::put(path(&self.prefix, i)), piece(i, 0, self.body))
    }
}

/// `POST` of piece `k`.
pub struct Append {
    pub prefix: String,
    pub body: usize,
    pub k: usize,
}

impl Job for Append {
    fn request(&self, i: usize) -> anyhow::Result<Request<Full<Bytes>>> {
        octets(
            Request::post(path(&self.prefix, i)),
            piece(i, self.k, self.body),
        )
    }
}

/// `GET ?offset=-1`: the whole stream in one answer (it is small), checked
/// byte for byte, and its `Stream-Next-Offset` against its length.
pub struct Verify {
    pub prefix: String,
    pub body: usize,
    pub appends: usize,
}

impl Verify {
    pub fn path(&self, i: usize) -> String {
        format!("{}?offset=-1", path(&self.prefix, i))
    }
}

impl Job for Verify {
    fn request(&self, i: usize) -> anyhow::Result<Request<Full<Bytes>>> {
        Ok(Request::get(self.path(i)).body(Full::new(Bytes::new()))?)
    }

    fn check(&self, i: usize, answer: &Answer) -> Result<(), String> {
        let expected = whole(i, self.appends, self.body);
        let next = answer.header("stream-next-offset");
        if next != Some(offset(expected.len()).as_str()) {
            return Err(format!(
                "Stream-Next-Offset {next:?}, expected {:?} ({} bytes)",
                offset(expected.len()),
                expected.len()
            ));
        }
        if answer.body[..] != expected[..] {
            let at = answer
                .body
                .iter()
                .zip(&expected)
                .position(|(a, b)| a != b)
                .unwrap_or(answer.body.len().min(expected.len()));
            return Err(format!(
                "{} bytes read, {} expected, first difference at byte {at}",
                answer.body.len(),
                expected.len()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_name_their_stream_and_write() {
        assert_eq!(piece(42, 0, 10), b"42.0;42.0;");
        assert_eq!(piece(7, 3, 6), b"7.3;7.");
        assert_eq!(piece(7, 3, 0), b"");
        assert_eq!(whole(5, 2, 4), b"5.0;5.1;5.2;");
        assert_ne!(whole(1, 1, 8), whole(11, 1, 8));
    }

    #[test]
    fn offsets_are_sixteen_hex_digits() {
        assert_eq!(offset(200), "00000000000000c8");
    }

    fn answer(next: &str, body: &[u8]) -> Answer {
        let mut headers = hyper::HeaderMap::new();
        headers.insert("stream-next-offset", next.parse().expect("header"));
        Answer {
            status: 200,
            headers,
            body: Bytes::copy_from_slice(body),
        }
    }

    #[test]
    fn a_read_must_match_in_length_and_in_every_byte() {
        let v = Verify {
            prefix: "/v1/stream/s-".into(),
            body: 4,
            appends: 1,
        };
        assert_eq!(v.path(3), "/v1/stream/s-3?offset=-1");
        assert!(v.check(3, &answer(&offset(8), b"3.0;3.1;")).is_ok());
        let short = v.check(3, &answer(&offset(4), b"3.0;")).unwrap_err();
        assert!(short.contains("expected \"0000000000000008\""), "{short}");
        let swapped = v.check(3, &answer(&offset(8), b"3.1;3.0;")).unwrap_err();
        assert!(swapped.contains("first difference at byte 2"), "{swapped}");
    }
}
