//! Checkpoint files as bytes: a *base* holds every live stream, a *delta*
//! the streams changed since the checkpoint before it and the ids of the
//! streams deleted since then.
//!
//! ```text
//! file:   magic:4 version:u8 crc32(body):u32le body
//! base:   "DSCB"  body = seq replay_from_segment next_stream_id count record*
//! delta:  "DSCD"  body = seq replay_from_segment next_stream_id changed deleted record* id*
//! record: len stream          (see `codec`; the stream starts with its id)
//! ```
//! Numbers are LEB128. Version 2 (version 1 was the single JSON file, see
//! `legacy`). A base's records are in strictly increasing order of id, so
//! merging a base with its deltas is one pass and a duplicate is caught.
//! Records are framed by their length so that a merge moves them whole,
//! without decoding the streams it does not change.

use std::path::Path;

use super::codec::{self, MIN_RECORD_BYTES};
use super::error::Corruption;
use super::wire::{put_len, put_u64, Reader};
use super::Delta;
use crate::store::saved::SavedStream;

pub const BASE_MAGIC: &[u8; 4] = b"DSCB";
pub const DELTA_MAGIC: &[u8; 4] = b"DSCD";
pub const VERSION: u8 = 2;
/// Magic, version and checksum.
const PREFIX_BYTES: usize = 9;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Base,
    Delta,
}

impl Kind {
    fn magic(self) -> &'static [u8; 4] {
        match self {
            Kind::Base => BASE_MAGIC,
            Kind::Delta => DELTA_MAGIC,
        }
    }
}

/// What every file says about the checkpoint it is part of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Header {
    /// The checkpoint's number; a base has the number of the last delta it
    /// took in.
    pub seq: u64,
    pub replay_from_segment: u64,
    pub next_stream_id: u64,
}

/// One stream's record, still encoded, and the file it is in (for errors).
#[derive(Clone, Copy, Debug)]
pub struct Record<'a> {
    pub id: u64,
    pub bytes: &'a [u8],
    pub file: &'a Path,
}

/// A checked file, its records not yet decoded.
#[derive(Debug)]
pub struct FileView<'a> {
    pub header: Header,
    pub records: Vec<Record<'a>>,
    /// Deltas only.
    pub deleted: Vec<u64>,
}

fn begin(kind: Kind, header: &Header, capacity: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(capacity + 64);
    out.extend_from_slice(kind.magic());
    out.push(VERSION);
    out.extend_from_slice(&[0; 4]);
    put_u64(&mut out, header.seq);
    put_u64(&mut out, header.replay_from_segment);
    put_u64(&mut out, header.next_stream_id);
    out
}

fn finish(mut out: Vec<u8>) -> Vec<u8> {
    let crc = crc32fast::hash(&out[PREFIX_BYTES..]);
    out[5..PREFIX_BYTES].copy_from_slice(&crc.to_le_bytes());
    out
}

fn put_record(out: &mut Vec<u8>, bytes: &[u8]) {
    put_len(out, bytes.len());
    out.extend_from_slice(bytes);
}

pub fn encode_delta(seq: u64, delta: &Delta) -> Vec<u8> {
    let header = Header {
        seq,
        replay_from_segment: delta.replay_from_segment,
        next_stream_id: delta.next_stream_id,
    };
    let mut out = begin(Kind::Delta, &header, 0);
    put_len(&mut out, delta.changed.len());
    put_len(&mut out, delta.deleted.len());
    let mut scratch = Vec::new();
    for s in &delta.changed {
        scratch.clear();
        codec::encode(s, &mut scratch);
        put_record(&mut out, &scratch);
    }
    for &id in &delta.deleted {
        put_u64(&mut out, id);
    }
    finish(out)
}

/// A base of records already encoded, in strictly increasing order of id.
pub fn encode_base(header: &Header, records: &[Record<'_>]) -> Vec<u8> {
    debug_assert!(records.windows(2).all(|w| w[0].id < w[1].id));
    let bytes = records.iter().map(|r| r.bytes.len() + 5).sum();
    let mut out = begin(Kind::Base, header, bytes);
    put_len(&mut out, records.len());
    for r in records {
        put_record(&mut out, r.bytes);
    }
    finish(out)
}

/// A base of streams (any order; each id once).
pub fn encode_base_streams(header: &Header, streams: &[SavedStream]) -> Vec<u8> {
    let mut sorted: Vec<&SavedStream> = streams.iter().collect();
    sorted.sort_unstable_by_key(|s| s.core.id);
    let mut out = begin(Kind::Base, header, 0);
    put_len(&mut out, sorted.len());
    let mut scratch = Vec::new();
    for s in sorted {
        scratch.clear();
        codec::encode(s, &mut scratch);
        put_record(&mut out, &scratch);
    }
    finish(out)
}

fn bad(what: &'static str) -> Corruption {
    Corruption::Format(what)
}

/// Checks a file of `kind` and finds its records; `file` names it in the
/// records (and so in the errors of decoding them later).
pub fn parse<'a>(buf: &'a [u8], kind: Kind, file: &'a Path) -> Result<FileView<'a>, Corruption> {
    if buf.len() < PREFIX_BYTES {
        return Err(bad("shorter than the file prefix"));
    }
    if &buf[..4] != kind.magic() {
        return Err(bad("bad magic"));
    }
    if buf[4] != VERSION {
        return Err(bad("unknown version"));
    }
    let crc = u32::from_le_bytes(buf[5..PREFIX_BYTES].try_into().expect("4 bytes"));
    let body = &buf[PREFIX_BYTES..];
    if crc32fast::hash(body) != crc {
        return Err(bad("checksum mismatch"));
    }
    let mut r = Reader::new(body);
    let header = Header {
        seq: r.u64()?,
        replay_from_segment: r.u64()?,
        next_stream_id: r.u64()?,
    };
    let n_records = r.count(MIN_RECORD_BYTES + 1)?;
    let n_deleted = match kind {
        Kind::Base => 0,
        Kind::Delta => r.count(1)?,
    };
    let mut records = Vec::with_capacity(n_records);
    for _ in 0..n_records {
        let bytes = r.framed()?;
        let id = codec::record_id(bytes)?;
        if kind == Kind::Base && records.last().is_some_and(|l: &Record<'_>| l.id >= id) {
            return Err(bad("the base's records are not in increasing order of id"));
        }
        records.push(Record { id, bytes, file });
    }
    let mut deleted = Vec::with_capacity(n_deleted);
    for _ in 0..n_deleted {
        deleted.push(r.u64()?);
    }
    r.finish("bytes are left after the last record")?;
    Ok(FileView {
        header,
        records,
        deleted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::checkpoint::codec::strategies::saved_stream;
    use proptest::prelude::*;
    use proptest::strategy::ValueTree;

    const FILE: &str = "f";

    fn header(seq: u64) -> Header {
        Header {
            seq,
            replay_from_segment: 7,
            next_stream_id: 99,
        }
    }

    fn decoded(view: &FileView<'_>) -> Vec<SavedStream> {
        view.records
            .iter()
            .map(|r| codec::decode(r.bytes).unwrap())
            .collect()
    }

    proptest! {
        #[test]
        fn deltas_round_trip(changed in proptest::collection::vec(saved_stream(), 0..4), deleted in proptest::collection::vec(any::<u64>(), 0..4), seq in any::<u64>()) {
            let delta = Delta { replay_from_segment: 7, next_stream_id: 99, changed, deleted };
            let buf = encode_delta(seq, &delta);
            let view = parse(&buf, Kind::Delta, Path::new(FILE)).unwrap();
            prop_assert_eq!(view.header, header(seq));
            prop_assert_eq!(&view.deleted, &delta.deleted);
            prop_assert_eq!(decoded(&view), delta.changed);
        }

        #[test]
        fn bases_round_trip_in_order_of_id(streams in proptest::collection::btree_map(any::<u64>(), saved_stream(), 0..4)) {
            let streams: Vec<SavedStream> = streams.into_iter().rev().map(|(id, mut s)| { s.core.id = id; s }).collect();
            let buf = encode_base_streams(&header(3), &streams);
            let view = parse(&buf, Kind::Base, Path::new(FILE)).unwrap();
            let mut expected = streams.clone();
            expected.sort_by_key(|s| s.core.id);
            prop_assert_eq!(decoded(&view), expected);
            // Moving the records whole gives the same file.
            prop_assert_eq!(encode_base(&header(3), &view.records), buf);
        }

        #[test]
        fn random_bytes_never_panic(mut bytes in proptest::collection::vec(any::<u8>(), 0..512), base in any::<bool>()) {
            let kind = if base { Kind::Base } else { Kind::Delta };
            let _ = parse(&bytes, kind, Path::new(FILE));
            // The same bytes behind a valid prefix reach the body's decoder.
            let body = bytes.clone();
            bytes.splice(0..0, kind.magic().iter().copied().chain([VERSION]).chain(crc32fast::hash(&body).to_le_bytes()));
            if let Ok(view) = parse(&bytes, kind, Path::new(FILE)) {
                for r in &view.records {
                    let _ = codec::decode(r.bytes);
                }
            }
        }
    }

    fn sample_delta() -> Vec<u8> {
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let changed = (0..3)
            .map(|_| saved_stream().new_tree(&mut runner).unwrap().current())
            .collect();
        encode_delta(
            5,
            &Delta {
                replay_from_segment: 1,
                next_stream_id: 2,
                changed,
                deleted: vec![4, 8],
            },
        )
    }

    #[test]
    fn every_flipped_bit_and_every_cut_is_caught() {
        let buf = sample_delta();
        assert!(parse(&buf, Kind::Delta, Path::new(FILE)).is_ok());
        for i in 0..buf.len() {
            for bit in 0..8 {
                let mut bad = buf.clone();
                bad[i] ^= 1 << bit;
                assert!(
                    parse(&bad, Kind::Delta, Path::new(FILE)).is_err(),
                    "byte {i} bit {bit}"
                );
            }
            assert!(
                parse(&buf[..i], Kind::Delta, Path::new(FILE)).is_err(),
                "cut at {i}"
            );
        }
    }

    #[test]
    fn a_delta_is_not_a_base() {
        let buf = sample_delta();
        assert!(matches!(
            parse(&buf, Kind::Base, Path::new(FILE)),
            Err(Corruption::Format("bad magic"))
        ));
    }

    #[test]
    fn a_base_out_of_order_is_refused() {
        let buf = encode_base_streams(&header(1), &[]);
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let mut s = saved_stream().new_tree(&mut runner).unwrap().current();
        s.core.id = 9;
        let mut record = Vec::new();
        codec::encode(&s, &mut record);
        let r = Record {
            id: 9,
            bytes: &record,
            file: Path::new(FILE),
        };
        // Bypass the encoder's own check by framing the records by hand.
        let mut out = buf[..buf.len() - 1].to_vec();
        put_len(&mut out, 2);
        put_record(&mut out, r.bytes);
        put_record(&mut out, r.bytes);
        let out = finish(out);
        assert!(matches!(
            parse(&out, Kind::Base, Path::new(FILE)),
            Err(Corruption::Format(m)) if m.contains("order")
        ));
    }
}
