//! The write-ahead log's record format (version 1).
//!
//! ```text
//! frame  = len:u32le crc:u32le body[len]        crc = CRC-32 of body
//! body   = version:u8 kind:u8 fields…
//! Create = id created_at path incarnation content_type expiry public effect payload
//! Fork   = id created_at path incarnation content_type expiry public
//!          source at anchor sub effect payload      a fork of stream `source`
//! Append = id effect payload
//! Delete = id at
//! Sealed = id through            bytes [0, through) are in object storage
//! Snapshot = id offset len digest content_type   the latest snapshot
//! Retain = id offset               reads before offset answer 410
//! Visibility = id public:u8        reads need no credential when public
//! Image = next_id state_len:u32le state payload   a stream as a bucket checkpoint keeps it
//! ImageMore = id payload           more of the image's unsealed bytes
//! Restore = previous state_len:u32le state   a rollback: stream `previous`
//!                                  leaves its path for the state's stream
//! effect = start len at flags:u8 [producer_id epoch seq] [stream_seq]
//! ```
//! Integers are u64 little-endian, strings u32le-length-prefixed UTF-8, and
//! the payload is the rest of the body (its length is the effect's `len`).
//! An `Image` (a region's checkpoint in the bucket, `region::checkpoint`)
//! carries a whole stream: its state as a local checkpoint encodes it
//! (`checkpoint::codec`, `file_len` meaning where its bytes here start) and
//! its unsealed bytes from there, the rest in `ImageMore` records when they
//! are more than [`IMAGE_PIECE`].
//! A frame that is cut short or fails its CRC ends the log: it was being
//! written when the process died, so it was never acknowledged.

use bytes::Bytes;

use crate::core::config::{Expiry, StreamConfig};
use crate::core::fork::ForkOf;
use crate::core::producer::ProducerClaim;
use crate::core::snapshot::SnapshotMeta;
use crate::core::stream::AppendEffect;
use crate::core::Millis;
use crate::store::checkpoint::codec;
use crate::store::saved::SavedStream;

pub const VERSION: u8 = 1;
const HEADER: usize = 8;
/// No body is larger: a body is at most one request (8 MiB) plus its fields.
pub const MAX_BODY: usize = 64 * 1024 * 1024;

const KIND_CREATE: u8 = 1;
const KIND_APPEND: u8 = 2;
const KIND_DELETE: u8 = 3;
const KIND_SEALED: u8 = 4;
const KIND_SNAPSHOT: u8 = 5;
const KIND_RETAIN: u8 = 6;
const KIND_VISIBILITY: u8 = 7;
const KIND_FORK: u8 = 8;
const KIND_IMAGE: u8 = 9;
const KIND_IMAGE_MORE: u8 = 10;
const KIND_FEED: u8 = 11;
const KIND_FEED_FROM: u8 = 12;
const KIND_RESTORE: u8 = 13;

/// The most of a stream's bytes one image record carries (a body stays
/// well under [`MAX_BODY`], and an image part near its size).
pub const IMAGE_PIECE: usize = 4 * 1024 * 1024;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateRecord {
    pub id: u64,
    pub created_at: Millis,
    pub path: String,
    pub incarnation: String,
    pub config: StreamConfig,
    /// The initial body (and whether the create also closed the stream).
    pub initial: AppendEffect,
    /// Set when the stream is a fork (logged as a `Fork` record).
    pub fork: Option<ForkOf>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Create(CreateRecord, Bytes),
    Append {
        id: u64,
        effect: AppendEffect,
        payload: Bytes,
    },
    Delete {
        id: u64,
        at: Millis,
    },
    /// Bytes `[0, through)` of the stream are sealed in object storage.
    Sealed {
        id: u64,
        through: u64,
    },
    /// `meta` is the stream's latest snapshot.
    Snapshot {
        id: u64,
        meta: SnapshotMeta,
    },
    /// Reads before `offset` answer 410.
    Retain {
        id: u64,
        offset: u64,
    },
    /// The stream became public (or private).
    Visibility {
        id: u64,
        public: bool,
    },
    /// A whole stream, as a checkpoint in the bucket keeps it: its state
    /// (`saved.file_len` is where `payload` starts; no extents) and stream
    /// ids below `next_id` taken.
    Image {
        saved: Box<SavedStream>,
        next_id: u64,
        payload: Bytes,
    },
    /// The image's next unsealed bytes, right after the last ones.
    ImageMore {
        id: u64,
        payload: Bytes,
    },
    /// An event of the invalidation feed, at its position, logged in the
    /// commit of the change it tells of (a region's feed: every owner of
    /// the partition answers the same positions; `store::invalidations`).
    Feed(shared::invalidation::Invalidation),
    /// An image's first record: the feed's next position at the image.
    FeedFrom {
        next: u64,
    },
    /// A rollback (`core::restore`): stream `previous` leaves its path
    /// (detached, or removed when nothing reads it) for the new
    /// incarnation `saved` (a fork of it or of an ancestor, with no bytes
    /// of its own yet), one record so that a crash leaves one or the other.
    Restore {
        previous: u64,
        saved: Box<SavedStream>,
    },
}

/// Why a frame could not be read.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("the frame is cut short")]
    Torn,
    #[error("the frame's checksum does not match")]
    Checksum,
    #[error("the frame is malformed: {0}")]
    Malformed(&'static str),
}

/// Appends one framed record to `out`; returns where its payload starts in
/// `out` (the frame's end for records without one). Small streams' bytes
/// are read from the log there (see `warm`). One arm per record kind
/// (long by design: the format in one place).
pub fn encode(record: &Record, out: &mut Vec<u8>) -> usize {
    let at = out.len();
    out.extend_from_slice(&[0; HEADER]);
    out.push(VERSION);
    match record {
        Record::Create(c, payload) => {
            out.push(if c.fork.is_some() {
                KIND_FORK
            } else {
                KIND_CREATE
            });
            put_u64(out, c.id);
            put_u64(out, c.created_at);
            put_str(out, &c.path);
            put_str(out, &c.incarnation);
            put_str(out, &c.config.content_type);
            match c.config.expiry {
                Expiry::Never => {
                    out.push(0);
                    put_u64(out, 0)
                }
                Expiry::IdleSecs(s) => {
                    out.push(1);
                    put_u64(out, s)
                }
                Expiry::At(t) => {
                    out.push(2);
                    put_u64(out, t)
                }
            }
            out.push(c.config.public as u8);
            if let Some(f) = &c.fork {
                put_u64(out, f.source);
                put_u64(out, f.at);
                put_u64(out, f.anchor);
                put_u64(out, f.sub);
            }
            put_effect(out, &c.initial);
            out.extend_from_slice(payload);
        }
        Record::Append {
            id,
            effect,
            payload,
        } => {
            out.push(KIND_APPEND);
            put_u64(out, *id);
            put_effect(out, effect);
            out.extend_from_slice(payload);
        }
        Record::Sealed { id, through } => {
            out.push(KIND_SEALED);
            put_u64(out, *id);
            put_u64(out, *through);
        }
        Record::Snapshot { id, meta } => {
            out.push(KIND_SNAPSHOT);
            put_u64(out, *id);
            put_u64(out, meta.offset);
            put_u64(out, meta.len);
            put_str(out, &meta.digest);
            put_str(out, &meta.content_type);
        }
        Record::Retain { id, offset } => {
            out.push(KIND_RETAIN);
            put_u64(out, *id);
            put_u64(out, *offset);
        }
        Record::Visibility { id, public } => {
            out.push(KIND_VISIBILITY);
            put_u64(out, *id);
            out.push(*public as u8);
        }
        Record::Delete { id, at } => {
            out.push(KIND_DELETE);
            put_u64(out, *id);
            put_u64(out, *at);
        }
        Record::Image {
            saved,
            next_id,
            payload,
        } => {
            out.push(KIND_IMAGE);
            put_u64(out, *next_id);
            put_state(out, saved);
            out.extend_from_slice(payload);
        }
        Record::Restore { previous, saved } => {
            out.push(KIND_RESTORE);
            put_u64(out, *previous);
            put_state(out, saved);
        }
        Record::ImageMore { id, payload } => {
            out.push(KIND_IMAGE_MORE);
            put_u64(out, *id);
            out.extend_from_slice(payload);
        }
        Record::Feed(e) => {
            out.push(KIND_FEED);
            put_u64(out, e.seq);
            put_u64(out, e.stream);
            put_str(out, &e.incarnation);
            out.push(change_tag(e.change));
            out.push(e.retained.is_some() as u8);
            put_u64(out, e.retained.unwrap_or(0));
        }
        Record::FeedFrom { next } => {
            out.push(KIND_FEED_FROM);
            put_u64(out, *next);
        }
    }
    let body_len = out.len() - at - HEADER;
    let crc = crc32fast::hash(&out[at + HEADER..]);
    out[at..at + 4].copy_from_slice(&(body_len as u32).to_le_bytes());
    out[at + 4..at + 8].copy_from_slice(&crc.to_le_bytes());
    out.len() - payload_len(record)
}

impl Record {
    /// The stream the record changes.
    pub fn stream_id(&self) -> u64 {
        match self {
            Record::Create(c, _) => c.id,
            Record::Append { id, .. }
            | Record::Delete { id, .. }
            | Record::Sealed { id, .. }
            | Record::Snapshot { id, .. }
            | Record::Retain { id, .. }
            | Record::Visibility { id, .. }
            | Record::ImageMore { id, .. } => *id,
            Record::Image { saved, .. } | Record::Restore { saved, .. } => saved.core.id,
            // Of no stream (ids start at 1).
            Record::Feed(_) | Record::FeedFrom { .. } => 0,
        }
    }
}

/// The bytes of a record's payload (the end of its body).
pub fn payload_len(record: &Record) -> usize {
    match record {
        Record::Create(_, payload)
        | Record::Append { payload, .. }
        | Record::Image { payload, .. }
        | Record::ImageMore { payload, .. } => payload.len(),
        _ => 0,
    }
}

/// Reads the frame at the start of `buf`: `Ok(None)` at a clean end (no
/// bytes, or zeroes where the next header would be).
pub fn decode(buf: &[u8]) -> Result<Option<(Record, usize)>, FrameError> {
    if buf.is_empty() {
        return Ok(None);
    }
    if buf.len() < HEADER {
        return Err(FrameError::Torn);
    }
    let len = u32::from_le_bytes(buf[0..4].try_into().expect("4 bytes")) as usize;
    let crc = u32::from_le_bytes(buf[4..8].try_into().expect("4 bytes"));
    if len == 0 && crc == 0 {
        return Ok(None);
    }
    if len > MAX_BODY {
        return Err(FrameError::Malformed("length over the largest body"));
    }
    let Some(body) = buf.get(HEADER..HEADER + len) else {
        return Err(FrameError::Torn);
    };
    if crc32fast::hash(body) != crc {
        return Err(FrameError::Checksum);
    }
    let record = decode_body(body)?;
    Ok(Some((record, HEADER + len)))
}

/// One arm per record kind, in kind order, beside [`encode`]'s: long by
/// design, so the format reads in one place.
fn decode_body(body: &[u8]) -> Result<Record, FrameError> {
    let mut r = Reader { buf: body };
    if r.u8()? != VERSION {
        return Err(FrameError::Malformed("unknown version"));
    }
    let record = match r.u8()? {
        kind @ (KIND_CREATE | KIND_FORK) => {
            let id = r.u64()?;
            let created_at = r.u64()?;
            let path = r.str()?;
            let incarnation = r.str()?;
            let content_type = r.str()?;
            let tag = r.u8()?;
            let value = r.u64()?;
            let expiry = match tag {
                0 if value == 0 => Expiry::Never,
                1 => Expiry::IdleSecs(value),
                2 => Expiry::At(value),
                _ => return Err(FrameError::Malformed("unknown expiry")),
            };
            let public = r.flag()?;
            let fork = if kind == KIND_FORK {
                Some(ForkOf {
                    source: r.u64()?,
                    at: r.u64()?,
                    anchor: r.u64()?,
                    sub: r.u64()?,
                    restored: None,
                })
            } else {
                None
            };
            let initial = r.effect()?;
            let payload = r.payload(initial.len)?;
            let config = StreamConfig {
                content_type: content_type.into(),
                expiry,
                public,
            };
            Record::Create(
                CreateRecord {
                    id,
                    created_at,
                    path,
                    incarnation,
                    config,
                    initial,
                    fork,
                },
                payload,
            )
        }
        KIND_APPEND => {
            let id = r.u64()?;
            let effect = r.effect()?;
            let payload = r.payload(effect.len)?;
            Record::Append {
                id,
                effect,
                payload,
            }
        }
        KIND_SEALED => Record::Sealed {
            id: r.u64()?,
            through: r.u64()?,
        },
        KIND_SNAPSHOT => Record::Snapshot {
            id: r.u64()?,
            meta: SnapshotMeta {
                offset: r.u64()?,
                len: r.u64()?,
                digest: r.str()?,
                content_type: r.str()?,
            },
        },
        KIND_RETAIN => Record::Retain {
            id: r.u64()?,
            offset: r.u64()?,
        },
        KIND_VISIBILITY => Record::Visibility {
            id: r.u64()?,
            public: r.flag()?,
        },
        KIND_DELETE => Record::Delete {
            id: r.u64()?,
            at: r.u64()?,
        },
        KIND_IMAGE => {
            let next_id = r.u64()?;
            Record::Image {
                saved: Box::new(r.state()?),
                next_id,
                payload: r.rest(),
            }
        }
        KIND_RESTORE => Record::Restore {
            previous: r.u64()?,
            saved: Box::new(r.state()?),
        },
        KIND_IMAGE_MORE => Record::ImageMore {
            id: r.u64()?,
            payload: r.rest(),
        },
        KIND_FEED => {
            let seq = r.u64()?;
            let stream = r.u64()?;
            let incarnation = r.str()?;
            let change = change_of(r.u8()?)?;
            let has = r.flag()?;
            let retained = r.u64()?;
            if !has && retained != 0 {
                return Err(FrameError::Malformed("a retained offset without its flag"));
            }
            Record::Feed(shared::invalidation::Invalidation {
                seq,
                stream,
                incarnation,
                change,
                retained: has.then_some(retained),
            })
        }
        KIND_FEED_FROM => Record::FeedFrom { next: r.u64()? },
        _ => return Err(FrameError::Malformed("unknown kind")),
    };
    if !r.buf.is_empty() {
        return Err(FrameError::Malformed("bytes after the record's fields"));
    }
    Ok(record)
}

/// A stream's state as a checkpoint encodes it, after its length.
fn put_state(out: &mut Vec<u8>, saved: &SavedStream) {
    let len_at = out.len();
    out.extend_from_slice(&[0; 4]);
    codec::encode(saved, out);
    let state_len = (out.len() - len_at - 4) as u32;
    out[len_at..len_at + 4].copy_from_slice(&state_len.to_le_bytes());
}

fn change_tag(c: shared::invalidation::Change) -> u8 {
    use shared::invalidation::Change;
    match c {
        Change::Deleted => 0,
        Change::Created => 1,
        Change::Retained => 2,
        Change::SnapshotReplaced => 3,
    }
}

fn change_of(tag: u8) -> Result<shared::invalidation::Change, FrameError> {
    use shared::invalidation::Change;
    Ok(match tag {
        0 => Change::Deleted,
        1 => Change::Created,
        2 => Change::Retained,
        3 => Change::SnapshotReplaced,
        _ => return Err(FrameError::Malformed("unknown feed change")),
    })
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u32).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn put_effect(out: &mut Vec<u8>, e: &AppendEffect) {
    put_u64(out, e.start);
    put_u64(out, e.len);
    put_u64(out, e.at);
    let flags =
        e.close as u8 | (e.producer.is_some() as u8) << 1 | (e.stream_seq.is_some() as u8) << 2;
    out.push(flags);
    if let Some(p) = &e.producer {
        put_str(out, &p.id);
        put_u64(out, p.epoch);
        put_u64(out, p.seq);
    }
    if let Some(s) = &e.stream_seq {
        put_str(out, s);
    }
}

struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A stream's state after its length, in its one encoding (as every
    /// other field has one).
    fn state(&mut self) -> Result<SavedStream, FrameError> {
        let state_len = u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize;
        let state = self.take(state_len)?;
        let saved = codec::decode(state)
            .map_err(|_| FrameError::Malformed("a stream's state does not decode"))?;
        let mut canonical = Vec::with_capacity(state.len());
        codec::encode(&saved, &mut canonical);
        if canonical != state {
            return Err(FrameError::Malformed(
                "a stream's state is not as it encodes",
            ));
        }
        Ok(saved)
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], FrameError> {
        if self.buf.len() < n {
            return Err(FrameError::Malformed("body shorter than its fields"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, FrameError> {
        Ok(self.take(1)?[0])
    }
    /// A boolean: 0 or 1 (one encoding per value, so a record re-encodes
    /// as read).
    fn flag(&mut self) -> Result<bool, FrameError> {
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(FrameError::Malformed("a flag other than 0 or 1")),
        }
    }
    fn u64(&mut self) -> Result<u64, FrameError> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().expect("8 bytes"),
        ))
    }
    fn str(&mut self) -> Result<String, FrameError> {
        let len = u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")) as usize;
        String::from_utf8(self.take(len)?.to_vec())
            .map_err(|_| FrameError::Malformed("string is not UTF-8"))
    }
    fn effect(&mut self) -> Result<AppendEffect, FrameError> {
        let start = self.u64()?;
        let len = self.u64()?;
        let at = self.u64()?;
        let flags = self.u8()?;
        if flags & !7 != 0 {
            return Err(FrameError::Malformed("unknown append flags"));
        }
        let producer = if flags & 2 != 0 {
            Some(ProducerClaim {
                id: self.str()?,
                epoch: self.u64()?,
                seq: self.u64()?,
            })
        } else {
            None
        };
        let stream_seq = if flags & 4 != 0 {
            Some(self.str()?)
        } else {
            None
        };
        Ok(AppendEffect {
            start,
            len,
            close: flags & 1 != 0,
            producer,
            stream_seq,
            at,
        })
    }
    fn rest(&mut self) -> Bytes {
        Bytes::copy_from_slice(std::mem::take(&mut self.buf))
    }
    fn payload(&mut self, len: u64) -> Result<Bytes, FrameError> {
        if self.buf.len() as u64 != len {
            return Err(FrameError::Malformed(
                "payload length differs from the effect",
            ));
        }
        Ok(Bytes::copy_from_slice(self.take(self.buf.len())?))
    }
}

#[cfg(test)]
mod tests;
