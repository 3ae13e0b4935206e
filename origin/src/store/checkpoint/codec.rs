//! One stream in binary: the record a checkpoint file holds per stream.
//!
//! Fields in the order of [`SavedStream`] and [`StreamCore`], integers as
//! LEB128, strings length-prefixed, flags and option tags as one byte:
//!
//! ```text
//! id path incarnation
//! content_type expiry(0 | 1 idle_secs | 2 at_ms) public
//! created_at len closed stream_seq(0 | 1 str)
//! producers: count (id epoch last_seq last_active receipts: count (seq start end-start)*)*
//! sealed retained snapshot(0 | 1 offset len digest content_type)
//! file_len extents: count (segment pos len start)*
//! [1 fork(0 | 1 source at anchor sub | 2 source at anchor sub restored)
//!    life(0 live | 1 soft-deleted | 2 soft-deleted and detached)]
//! [2 last_write_at]
//! ```
//! The last parts are written only for a stream that has them: forks and
//! soft deletes (part 1), and a last append's time other than the
//! creation's (part 2, for listings), so every record of an origin that
//! never forked nor appended is byte for byte what it was before them
//! (files stay version 2, and a compaction may move old and new records
//! together; a record without part 2 was last written when created). A cut that removes
//! exactly that part is caught by the record's length frame and the file's
//! checksum, as every cut is.
//! A receipt keeps its length rather than its end (wrapping, so any pair
//! round-trips): the end of a receipt is a large offset, its length a small
//! number, and receipts are most of a busy producer's bytes.
//!
//! Encoding destructures every struct, so a field added to any of them does
//! not compile until this format (and its version) says how it is kept.

use std::collections::{BTreeMap, VecDeque};

use super::error::Corruption;
use super::wire::{put_bool, put_len, put_str, put_u64, Reader};
use crate::core::config::{Expiry, StreamConfig};
use crate::core::fork::ForkOf;
use crate::core::producer::{ProducerState, Receipt};
use crate::core::snapshot::SnapshotMeta;
use crate::core::stream::StreamCore;
use crate::store::saved::{Extent, SavedStream};

/// The shortest record: every number one byte, every string empty, every
/// option absent, no producers, no extents.
pub const MIN_RECORD_BYTES: usize = 16;
/// A producer takes at least its id's length and four numbers.
const MIN_PRODUCER_BYTES: usize = 5;
const MIN_RECEIPT_BYTES: usize = 3;
const MIN_EXTENT_BYTES: usize = 4;

fn bad(what: &'static str) -> Corruption {
    Corruption::Format(what)
}

/// Every field of a saved stream, in the format's order (long by design:
/// the format in one place; [`decode`] mirrors it).
pub fn encode(s: &SavedStream, out: &mut Vec<u8>) {
    let SavedStream {
        core,
        file_len,
        extents,
        last_write_at,
    } = s;
    let StreamCore {
        id,
        path,
        incarnation,
        config,
        created_at,
        len,
        closed,
        stream_seq,
        producers,
        sealed,
        retained,
        snapshot,
        fork,
        soft_deleted,
        detached,
    } = core;
    let StreamConfig {
        content_type,
        expiry,
        public,
    } = config;
    put_u64(out, *id);
    put_str(out, &path[..]);
    put_str(out, &incarnation[..]);
    put_str(out, &content_type[..]);
    match *expiry {
        Expiry::Never => out.push(0),
        Expiry::IdleSecs(secs) => {
            out.push(1);
            put_u64(out, secs);
        }
        Expiry::At(at) => {
            out.push(2);
            put_u64(out, at);
        }
    }
    put_bool(out, *public);
    put_u64(out, *created_at);
    put_u64(out, *len);
    put_bool(out, *closed);
    put_bool(out, stream_seq.is_some());
    if let Some(seq) = stream_seq {
        put_str(out, &seq[..]);
    }
    put_len(out, producers.len());
    for (producer, state) in producers {
        put_str(out, &producer[..]);
        encode_producer(state, out);
    }
    put_u64(out, *sealed);
    put_u64(out, *retained);
    put_bool(out, snapshot.is_some());
    if let Some(SnapshotMeta {
        offset,
        len,
        digest,
        content_type,
    }) = snapshot.as_deref()
    {
        put_u64(out, *offset);
        put_u64(out, *len);
        put_str(out, &digest[..]);
        put_str(out, &content_type[..]);
    }
    put_u64(out, *file_len);
    put_len(out, extents.len());
    for &Extent {
        segment,
        pos,
        len,
        start,
    } in extents
    {
        put_u64(out, segment);
        put_u64(out, pos.into());
        put_u64(out, len.into());
        put_u64(out, start);
    }
    if fork.is_some() || *soft_deleted {
        out.push(1);
        match fork.as_deref() {
            None => out.push(0),
            Some(ForkOf {
                source,
                at,
                anchor,
                sub,
                restored,
            }) => {
                out.push(if restored.is_some() { 2 } else { 1 });
                put_u64(out, *source);
                put_u64(out, *at);
                put_u64(out, *anchor);
                put_u64(out, *sub);
                if let Some(r) = restored {
                    put_str(out, r);
                }
            }
        }
        out.push(match (*soft_deleted, *detached) {
            (false, _) => 0,
            (true, false) => 1,
            (true, true) => 2,
        });
    }
    if last_write_at != created_at {
        out.push(2);
        put_u64(out, *last_write_at);
    }
}

fn encode_producer(state: &ProducerState, out: &mut Vec<u8>) {
    let ProducerState {
        epoch,
        last_seq,
        last_active,
        receipts,
    } = state;
    put_u64(out, *epoch);
    put_u64(out, *last_seq);
    put_u64(out, *last_active);
    put_len(out, receipts.len());
    for &Receipt { seq, start, end } in receipts {
        put_u64(out, seq);
        put_u64(out, start);
        put_u64(out, end.wrapping_sub(start));
    }
}

/// The stream id a record starts with, without decoding the rest (merging
/// checkpoint files moves records whole).
pub fn record_id(record: &[u8]) -> Result<u64, Corruption> {
    Reader::new(record).u64()
}

/// Decodes one whole record.
/// Field by field in [`encode`]'s order: long by design, so the two
/// read side by side.
pub fn decode(record: &[u8]) -> Result<SavedStream, Corruption> {
    let mut r = Reader::new(record);
    let id = r.u64()?;
    let path = r.str()?.into();
    let incarnation = r.str()?.into();
    let content_type = r.str()?.into();
    let expiry = match r.byte()? {
        0 => Expiry::Never,
        1 => Expiry::IdleSecs(r.u64()?),
        2 => Expiry::At(r.u64()?),
        _ => return Err(bad("unknown expiry kind")),
    };
    let public = r.bool()?;
    let created_at = r.u64()?;
    let len = r.u64()?;
    let closed = r.bool()?;
    let stream_seq = if r.bool()? {
        Some(r.str()?.into())
    } else {
        None
    };
    let mut producers = BTreeMap::new();
    for _ in 0..r.count(MIN_PRODUCER_BYTES)? {
        let producer: &str = r.str()?;
        let state = decode_producer(&mut r)?;
        if producers.insert(producer.into(), state).is_some() {
            return Err(bad("a producer appears twice"));
        }
    }
    let sealed = r.u64()?;
    let retained = r.u64()?;
    let snapshot = if r.bool()? {
        Some(SnapshotMeta {
            offset: r.u64()?,
            len: r.u64()?,
            digest: r.str()?.into(),
            content_type: r.str()?.into(),
        })
    } else {
        None
    };
    let file_len = r.u64()?;
    let n = r.count(MIN_EXTENT_BYTES)?;
    let mut extents = Vec::with_capacity(n);
    for _ in 0..n {
        extents.push(Extent {
            segment: r.u64()?,
            pos: r.u32()?,
            len: r.u32()?,
            start: r.u64()?,
        });
    }
    let mut part = next_part(&mut r)?;
    let (fork, soft_deleted, detached) = if part == Some(1) {
        let fork = match r.byte()? {
            0 => None,
            tag @ (1 | 2) => Some(Box::new(ForkOf {
                source: r.u64()?,
                at: r.u64()?,
                anchor: r.u64()?,
                sub: r.u64()?,
                restored: if tag == 2 {
                    Some(r.str()?.into())
                } else {
                    None
                },
            })),
            _ => return Err(bad("an unknown fork tag")),
        };
        let (soft_deleted, detached) = match r.byte()? {
            0 => (false, false),
            1 => (true, false),
            2 => (true, true),
            _ => return Err(bad("an unknown life tag")),
        };
        if fork.is_none() && !soft_deleted {
            return Err(bad("an empty fork part"));
        }
        part = next_part(&mut r)?;
        (fork, soft_deleted, detached)
    } else {
        (None, false, false)
    };
    let last_write_at = match part {
        None => created_at,
        Some(2) => {
            let at = r.u64()?;
            if at == created_at {
                return Err(bad("a last write part that says the creation time"));
            }
            at
        }
        Some(_) => return Err(bad("unknown part after a stream's extents")),
    };
    r.finish("bytes are left after a stream's record")?;
    let core = StreamCore {
        id,
        path,
        incarnation,
        config: StreamConfig {
            content_type,
            expiry,
            public,
        },
        created_at,
        len,
        closed,
        stream_seq,
        producers,
        sealed,
        retained,
        snapshot: snapshot.map(Box::new),
        fork,
        soft_deleted,
        detached,
    };
    Ok(SavedStream {
        core,
        file_len,
        extents,
        last_write_at,
    })
}

/// The tag of the next optional part of a record, none at its end.
fn next_part(r: &mut Reader<'_>) -> Result<Option<u8>, Corruption> {
    if r.finish("").is_ok() {
        Ok(None)
    } else {
        r.byte().map(Some)
    }
}

fn decode_producer(r: &mut Reader<'_>) -> Result<ProducerState, Corruption> {
    let epoch = r.u64()?;
    let last_seq = r.u64()?;
    let last_active = r.u64()?;
    let n = r.count(MIN_RECEIPT_BYTES)?;
    let mut receipts = VecDeque::with_capacity(n);
    for _ in 0..n {
        let seq = r.u64()?;
        let start = r.u64()?;
        let end = start.wrapping_add(r.u64()?);
        receipts.push_back(Receipt { seq, start, end });
    }
    Ok(ProducerState {
        epoch,
        last_seq,
        last_active,
        receipts,
    })
}

#[cfg(test)]
pub mod strategies {
    //! Arbitrary saved streams, for this module's tests and the files'.

    use super::*;
    use proptest::collection::{btree_map, vec, vec_deque};
    use proptest::option;
    use proptest::prelude::*;

    fn expiry() -> impl Strategy<Value = Expiry> {
        prop_oneof![
            Just(Expiry::Never),
            any::<u64>().prop_map(Expiry::IdleSecs),
            any::<u64>().prop_map(Expiry::At),
        ]
    }

    fn receipt() -> impl Strategy<Value = Receipt> {
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(|(seq, start, end)| Receipt {
            seq,
            start,
            end,
        })
    }

    fn producer() -> impl Strategy<Value = ProducerState> {
        (
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            vec_deque(receipt(), 0..4),
        )
            .prop_map(|(epoch, last_seq, last_active, receipts)| ProducerState {
                epoch,
                last_seq,
                last_active,
                receipts,
            })
    }

    fn snapshot() -> impl Strategy<Value = SnapshotMeta> {
        (any::<u64>(), any::<u64>(), "[0-9a-f]{0,64}", ".{0,12}").prop_map(
            |(offset, len, digest, content_type)| SnapshotMeta {
                offset,
                len,
                digest,
                content_type,
            },
        )
    }

    /// A stream with extents that cover its tail from a file length.
    pub fn saved_stream() -> impl Strategy<Value = SavedStream> {
        let core = (
            any::<u64>(),
            ".{0,24}",
            ".{0,12}",
            ".{0,16}",
            expiry(),
            any::<bool>(),
            any::<u64>(),
            any::<bool>(),
            option::of(".{0,8}"),
            btree_map(".{0,6}", producer(), 0..3),
            (any::<u64>(), any::<u64>(), option::of(snapshot())),
        );
        let tail = (
            0..u64::MAX / 2,
            vec((any::<u64>(), any::<u32>(), any::<u32>()), 0..4),
            option::of((any::<(u64, u64, u64, u64)>(), option::of(".{0,12}"))),
            0..3u8,
            option::of(any::<u64>()),
        );
        (core, tail).prop_map(|(core, (file_len, runs, fork, life, wrote))| {
            let (soft_deleted, detached) = (life > 0, life == 2);
            let (
                id,
                path,
                incarnation,
                content_type,
                expiry,
                public,
                created_at,
                closed,
                stream_seq,
                producers,
                (sealed, retained, snapshot),
            ) = core;
            let mut at = file_len;
            let extents = runs
                .into_iter()
                .map(|(segment, pos, len)| {
                    let e = Extent {
                        segment,
                        pos,
                        len,
                        start: at,
                    };
                    at += u64::from(len);
                    e
                })
                .collect();
            SavedStream {
                core: StreamCore {
                    id,
                    path: path.into(),
                    incarnation: incarnation.into(),
                    config: StreamConfig {
                        content_type: content_type.into(),
                        expiry,
                        public,
                    },
                    created_at,
                    len: at,
                    closed,
                    stream_seq,
                    producers,
                    sealed,
                    retained,
                    snapshot: snapshot.map(Box::new),
                    fork: fork.map(|((source, at, anchor, sub), restored)| {
                        Box::new(ForkOf {
                            source,
                            at,
                            anchor,
                            sub,
                            restored: restored.map(Into::into),
                        })
                    }),
                    soft_deleted,
                    detached,
                },
                file_len,
                extents,
                last_write_at: wrote.unwrap_or(created_at),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::strategies::saved_stream;
    use super::*;
    use proptest::prelude::*;

    fn encoded(s: &SavedStream) -> Vec<u8> {
        let mut out = Vec::new();
        encode(s, &mut out);
        out
    }

    proptest! {
        #[test]
        fn round_trips(s in saved_stream()) {
            prop_assert!(s.extents_cover_tail());
            let bytes = encoded(&s);
            prop_assert!(bytes.len() >= MIN_RECORD_BYTES);
            prop_assert_eq!(record_id(&bytes).unwrap(), s.core.id);
            prop_assert_eq!(decode(&bytes).unwrap(), s);
        }

        #[test]
        fn every_cut_is_an_error(s in saved_stream()) {
            let bytes = encoded(&s);
            // The cuts that drop exactly the optional parts (the last
            // write's; the fork's with it) are records of the stream
            // without them (the frame and checksum catch those cuts).
            let mut unwritten = s.clone();
            unwritten.last_write_at = unwritten.core.created_at;
            let mut plain = unwritten.clone();
            plain.core.fork = None;
            plain.core.soft_deleted = false;
            plain.core.detached = false;
            let (short, shortest) = (encoded(&unwritten).len(), encoded(&plain).len());
            for cut in 0..bytes.len() {
                if cut == short {
                    prop_assert_eq!(decode(&bytes[..cut]).unwrap(), unwritten.clone());
                    continue;
                }
                if cut == shortest {
                    prop_assert_eq!(decode(&bytes[..cut]).unwrap(), plain.clone());
                    continue;
                }
                prop_assert!(decode(&bytes[..cut]).is_err());
            }
            let mut longer = bytes.clone();
            longer.push(0);
            prop_assert!(decode(&longer).is_err());
        }

        #[test]
        fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn flipped_bits_never_panic(s in saved_stream(), at in any::<prop::sample::Index>(), bit in 0..8u8) {
            let mut bytes = encoded(&s);
            let i = at.index(bytes.len());
            bytes[i] ^= 1 << bit;
            let _ = decode(&bytes);
        }
    }

    #[test]
    fn the_shortest_record() {
        let config = StreamConfig {
            content_type: "".into(),
            expiry: Expiry::Never,
            public: false,
        };
        let core = StreamCore::new(0, "".into(), "".into(), config, 0);
        let bytes = encoded(&SavedStream::in_file(core));
        assert_eq!(bytes.len(), MIN_RECORD_BYTES);
    }

    #[test]
    fn a_huge_count_is_refused_before_allocating() {
        let config = StreamConfig {
            content_type: "a".into(),
            expiry: Expiry::Never,
            public: false,
        };
        let mut bytes = encoded(&SavedStream::in_file(StreamCore::new(
            1,
            "/p".into(),
            "i".into(),
            config,
            0,
        )));
        // The extents' count is the last byte; claim a billion of them.
        bytes.pop();
        put_u64(&mut bytes, 1 << 30);
        assert!(matches!(decode(&bytes), Err(Corruption::Format(m)) if m.contains("count")));
    }
}
