//! The persisted formats of a region: a WAL object, an epoch claim and a
//! checkpoint's manifest (a checkpoint's image parts are WAL objects: data,
//! its frames `Image` records).
//!
//! A WAL object is what one group commit of a partition's owner leaves in
//! object storage (or, with no frames, a fence). Its header names the epoch
//! of the owner that wrote it and a random put id, so a writer that finds
//! an object at its number can tell its own put (an ambiguous earlier try)
//! from anybody else's (see `fence`). The frames are the local log's own
//! records (`store::record`), so replaying a partition is replaying a log.
//!
//! ```text
//! WAL object:  "DSWL" | version u8 | kind u8 | epoch u64 | put id [16] | frames … | crc32 u32
//! epoch claim: "DSEP" | version u8 | epoch u64 | put id [16] | node len u16 | node | url len u16 | url | crc32 u32
//! checkpoint:  "DSCK" | version u8 | number u64 | epoch u64 | put id [16] | parts u32 | streams u64 | bytes u64 | crc32 u32
//! ```
//! Integers are little-endian; the CRC covers every byte before it.

use bytes::{BufMut, Bytes, BytesMut};

const WAL_MAGIC: &[u8; 4] = b"DSWL";
const EPOCH_MAGIC: &[u8; 4] = b"DSEP";
const CHECKPOINT_MAGIC: &[u8; 4] = b"DSCK";
const CHECKPOINT_LEN: usize = 4 + 1 + 8 + 8 + 16 + 4 + 8 + 8 + CRC;
pub(in crate::region) const VERSION: u8 = 1;
/// Magic, version, kind, epoch, put id.
const WAL_HEADER: usize = 4 + 1 + 1 + 8 + 16;
pub(in crate::region) const CRC: usize = 4;

/// A random name for one put, the same on every try of it.
pub type PutId = [u8; 16];

/// What a WAL object is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Written by a new owner at every free number it must close to older
    /// owners (see `fence`); carries no frames.
    Fence,
    /// One group commit's log records.
    Data,
}

/// The header of a WAL object: whose it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalHeader {
    pub kind: Kind,
    pub epoch: u64,
    pub put_id: PutId,
}

/// A decoded WAL object: its header and the frames it carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalObject {
    pub header: WalHeader,
    pub frames: Bytes,
}

/// Why bytes read back are not an object of ours.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    #[error("too short")]
    Short,
    #[error("not a {0} object")]
    Magic(&'static str),
    #[error("unknown version {0}")]
    Version(u8),
    #[error("unknown kind {0}")]
    Kind(u8),
    #[error("checksum mismatch")]
    Checksum,
    #[error("malformed: {0}")]
    Malformed(&'static str),
}

/// Encodes a WAL object: one copy of `frames`.
pub fn encode_wal(header: &WalHeader, frames: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(WAL_HEADER + frames.len() + CRC);
    out.put_slice(WAL_MAGIC);
    out.put_u8(VERSION);
    out.put_u8(match header.kind {
        Kind::Fence => 0,
        Kind::Data => 1,
    });
    out.put_u64_le(header.epoch);
    out.put_slice(&header.put_id);
    out.put_slice(frames);
    with_crc(out)
}

pub fn decode_wal(bytes: &Bytes) -> Result<WalObject, FormatError> {
    if bytes.len() < WAL_HEADER + CRC {
        return Err(FormatError::Short);
    }
    let body = checked(bytes, WAL_MAGIC, "WAL")?;
    let kind = match body[5] {
        0 => Kind::Fence,
        1 => Kind::Data,
        k => return Err(FormatError::Kind(k)),
    };
    let epoch = u64::from_le_bytes(body[6..14].try_into().expect("8 bytes"));
    let put_id: PutId = body[14..30].try_into().expect("16 bytes");
    let frames = bytes.slice(WAL_HEADER..bytes.len() - CRC);
    if kind == Kind::Fence && !frames.is_empty() {
        return Err(FormatError::Malformed("a fence carries no frames"));
    }
    Ok(WalObject {
        header: WalHeader {
            kind,
            epoch,
            put_id,
        },
        frames,
    })
}

/// Who claimed a partition at an epoch: written once, by create, at the
/// epoch's own key, so no two owners ever share an epoch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EpochClaim {
    pub epoch: u64,
    pub put_id: PutId,
    pub node: String,
    /// Where the owner answers (for forwarding).
    pub url: String,
}

pub fn encode_claim(claim: &EpochClaim) -> Bytes {
    let mut out =
        BytesMut::with_capacity(4 + 1 + 8 + 16 + 4 + claim.node.len() + claim.url.len() + CRC);
    out.put_slice(EPOCH_MAGIC);
    out.put_u8(VERSION);
    out.put_u64_le(claim.epoch);
    out.put_slice(&claim.put_id);
    put_str(&mut out, &claim.node);
    put_str(&mut out, &claim.url);
    with_crc(out)
}

pub fn decode_claim(bytes: &Bytes) -> Result<EpochClaim, FormatError> {
    if bytes.len() < 4 + 1 + 8 + 16 + 4 + CRC {
        return Err(FormatError::Short);
    }
    let body = checked(bytes, EPOCH_MAGIC, "epoch claim")?;
    let epoch = u64::from_le_bytes(body[5..13].try_into().expect("8 bytes"));
    let put_id: PutId = body[13..29].try_into().expect("16 bytes");
    let mut rest = &body[29..];
    let node = take_str(&mut rest)?;
    let url = take_str(&mut rest)?;
    if !rest.is_empty() {
        return Err(FormatError::Malformed("bytes after the claim"));
    }
    Ok(EpochClaim {
        epoch,
        put_id,
        node,
        url,
    })
}

/// A checkpoint of a partition: what the epoch rule replays of every WAL
/// number below `number`, as image parts (`region::checkpoint`). Written
/// once, by create, after its parts; never changed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointManifest {
    /// Every WAL number below it is in the image.
    pub number: u64,
    /// The highest epoch among the objects below `number` (the epoch rule
    /// goes on from it).
    pub epoch: u64,
    /// Names the parts (`keys::partition_image_part`).
    pub put_id: PutId,
    pub parts: u32,
    pub streams: u64,
    /// Bytes of the parts together.
    pub bytes: u64,
}

pub fn encode_checkpoint(m: &CheckpointManifest) -> Bytes {
    let mut out = BytesMut::with_capacity(CHECKPOINT_LEN);
    out.put_slice(CHECKPOINT_MAGIC);
    out.put_u8(VERSION);
    out.put_u64_le(m.number);
    out.put_u64_le(m.epoch);
    out.put_slice(&m.put_id);
    out.put_u32_le(m.parts);
    out.put_u64_le(m.streams);
    out.put_u64_le(m.bytes);
    with_crc(out)
}

pub fn decode_checkpoint(bytes: &Bytes) -> Result<CheckpointManifest, FormatError> {
    if bytes.len() != CHECKPOINT_LEN {
        return Err(FormatError::Short);
    }
    let body = checked(bytes, CHECKPOINT_MAGIC, "checkpoint")?;
    let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
    Ok(CheckpointManifest {
        number: u64_at(5),
        epoch: u64_at(13),
        put_id: body[21..37].try_into().expect("16 bytes"),
        parts: u32::from_le_bytes(body[37..41].try_into().expect("4 bytes")),
        streams: u64_at(41),
        bytes: u64_at(49),
    })
}

/// `out` with its CRC appended: every object here ends so.
pub(in crate::region) fn with_crc(mut out: BytesMut) -> Bytes {
    let crc = crc32fast::hash(&out);
    out.put_u32_le(crc);
    out.freeze()
}

/// The body before the checksum, once magic, version and checksum match.
pub(in crate::region) fn checked<'a>(
    bytes: &'a [u8],
    magic: &[u8; 4],
    what: &'static str,
) -> Result<&'a [u8], FormatError> {
    let (body, crc) = bytes.split_at(bytes.len() - CRC);
    if &body[..4] != magic {
        return Err(FormatError::Magic(what));
    }
    if crc32fast::hash(body) != u32::from_le_bytes(crc.try_into().expect("4 bytes")) {
        return Err(FormatError::Checksum);
    }
    if body[4] != VERSION {
        return Err(FormatError::Version(body[4]));
    }
    Ok(body)
}

/// A string as [`take_str`] reads it: its length (u16) and bytes, cut at
/// 65,535 bytes.
pub(in crate::region) fn put_str(out: &mut BytesMut, s: &str) {
    let bytes = &s.as_bytes()[..s.len().min(u16::MAX as usize)];
    out.put_u16_le(bytes.len() as u16);
    out.put_slice(bytes);
}

pub(in crate::region) fn take_str(rest: &mut &[u8]) -> Result<String, FormatError> {
    if rest.len() < 2 {
        return Err(FormatError::Short);
    }
    let len = u16::from_le_bytes([rest[0], rest[1]]) as usize;
    if rest.len() < 2 + len {
        return Err(FormatError::Short);
    }
    let s = std::str::from_utf8(&rest[2..2 + len])
        .map_err(|_| FormatError::Malformed("not UTF-8"))?
        .to_owned();
    *rest = &rest[2 + len..];
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn wal_objects_round_trip(epoch: u64, put_id: PutId, frames: Vec<u8>, fence: bool) {
            let kind = if fence { Kind::Fence } else { Kind::Data };
            let frames = if fence { Vec::new() } else { frames };
            let header = WalHeader { kind, epoch, put_id };
            let bytes = encode_wal(&header, &frames);
            let back = decode_wal(&bytes).unwrap();
            prop_assert_eq!(back.header, header);
            prop_assert_eq!(&back.frames[..], &frames[..]);
        }

        #[test]
        fn claims_round_trip(epoch: u64, put_id: PutId, node in ".{0,40}", url in ".{0,80}") {
            let claim = EpochClaim { epoch, put_id, node, url };
            prop_assert_eq!(decode_claim(&encode_claim(&claim)).unwrap(), claim);
        }

        #[test]
        fn checkpoints_round_trip(number: u64, epoch: u64, put_id: PutId, parts: u32, streams: u64, bytes: u64) {
            let m = CheckpointManifest { number, epoch, put_id, parts, streams, bytes };
            prop_assert_eq!(decode_checkpoint(&encode_checkpoint(&m)).unwrap(), m);
        }

        #[test]
        fn any_flipped_byte_is_caught(frames: Vec<u8>, at: usize, bit in 0u8..8) {
            let header = WalHeader { kind: Kind::Data, epoch: 7, put_id: [3; 16] };
            let bytes = encode_wal(&header, &frames);
            let mut bad = bytes.to_vec();
            let at = at % bad.len();
            bad[at] ^= 1 << bit;
            prop_assert!(decode_wal(&Bytes::from(bad)).is_err());
        }
    }

    #[test]
    fn foreign_bytes_are_refused() {
        assert_eq!(
            decode_wal(&Bytes::from_static(b"x")),
            Err(FormatError::Short)
        );
        let claim = encode_claim(&EpochClaim {
            epoch: 1,
            put_id: [0; 16],
            node: "a".into(),
            url: "http://a".into(),
        });
        assert_eq!(decode_wal(&claim), Err(FormatError::Magic("WAL")));
    }
}
