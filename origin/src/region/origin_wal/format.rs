//! The objects of one WAL per origin (decision 0028): a log object, one
//! group commit of every partition the origin serves (or a fence); a
//! tenure, one stretch of a partition's history; a stand, the manifest of
//! a partition checkpoint (its image parts are WAL-format objects, as a
//! partition WAL's checkpoint's are: `region::format`).
//!
//! ```text
//! log object: "DSOW" | version u8 | kind u8 | put id [16] | sections u32 | section … | crc32 u32
//!   section:  partition u32 | flags u8 (bit 0: releases it) | frames len u32 | frames
//! tenure:     "DSTN" | version u8 | log [16] | from u64 | ended u8 | previous end u64
//!             | put id [16] | node len u16 | node | url len u16 | url | crc32 u32
//! stand:      "DSST" | version u8 | tenure u64 | number u64 | put id [16] | parts u32
//!             | bytes u64 | crc32 u32
//! ```
//! Integers are little-endian; the CRC covers every byte before it. A log
//! has one writer, so a log object needs no epoch: what is not the
//! writer's own is a fence (`tenure::Found`).

use bytes::{BufMut, Bytes, BytesMut};

use crate::region::format::{
    checked, put_str, take_str, with_crc, FormatError, PutId, CRC, VERSION,
};
use crate::region::tenure::Stand;

const LOG_MAGIC: &[u8; 4] = b"DSOW";
const TENURE_MAGIC: &[u8; 4] = b"DSTN";
const STAND_MAGIC: &[u8; 4] = b"DSST";
const STAND_LEN: usize = 4 + 1 + 8 + 8 + 16 + 4 + 8 + CRC;
/// Magic, version, kind, put id, section count.
const LOG_HEADER: usize = 4 + 1 + 1 + 16 + 4;
const SECTION_HEADER: usize = 4 + 1 + 4;
const RELEASES: u8 = 1;

/// The epoch of a log's writer as `tenure`'s walk counts it; a fence is
/// any other (a log has one writer, so its objects carry no epoch).
pub const WRITER_EPOCH: u64 = 1;
const FENCE_EPOCH: u64 = 2;

/// A log's name: random, one per process start of its writer.
pub type LogId = [u8; 16];

/// One partition's part of a log object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    pub partition: u32,
    /// This object ends the writer's tenure of the partition (a hand-off);
    /// a release carries no frames.
    pub releases: bool,
    /// The partition's local log records (`store::record`).
    pub frames: Bytes,
}

/// A decoded log object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogObject {
    /// Put by a taker at a missing number, ending every tenure open there.
    pub fence: bool,
    pub put_id: PutId,
    pub sections: Vec<Section>,
}

impl LogObject {
    /// What a walk of `partition` finds in this object.
    pub fn found(&self, partition: u32) -> crate::region::tenure::Found {
        crate::region::tenure::Found::Object {
            // The writer's objects are epoch 1 of their log, fences another.
            epoch: if self.fence {
                FENCE_EPOCH
            } else {
                WRITER_EPOCH
            },
            releases: self
                .sections
                .iter()
                .any(|s| s.partition == partition && s.releases),
        }
    }

    /// The frames this object holds of `partition`.
    pub fn frames_of(&self, partition: u32) -> impl Iterator<Item = &Bytes> {
        self.sections
            .iter()
            .filter(move |s| s.partition == partition && !s.releases)
            .map(|s| &s.frames)
    }
}

pub fn encode_log(object: &LogObject) -> Bytes {
    let frames: usize = object.sections.iter().map(|s| s.frames.len()).sum();
    let mut out =
        BytesMut::with_capacity(LOG_HEADER + object.sections.len() * SECTION_HEADER + frames + CRC);
    out.put_slice(LOG_MAGIC);
    out.put_u8(VERSION);
    out.put_u8(u8::from(!object.fence));
    out.put_slice(&object.put_id);
    out.put_u32_le(u32::try_from(object.sections.len()).expect("sections are bounded"));
    for s in &object.sections {
        out.put_u32_le(s.partition);
        out.put_u8(if s.releases { RELEASES } else { 0 });
        out.put_u32_le(u32::try_from(s.frames.len()).expect("an object is bounded"));
        out.put_slice(&s.frames);
    }
    with_crc(out)
}

pub fn decode_log(bytes: &Bytes) -> Result<LogObject, FormatError> {
    if bytes.len() < LOG_HEADER + CRC {
        return Err(FormatError::Short);
    }
    let body = checked(bytes, LOG_MAGIC, "log")?;
    let fence = match body[5] {
        0 => true,
        1 => false,
        k => return Err(FormatError::Kind(k)),
    };
    let put_id: PutId = body[6..22].try_into().expect("16 bytes");
    let count = u32::from_le_bytes(body[22..26].try_into().expect("4 bytes"));
    let mut at = LOG_HEADER;
    let mut sections = Vec::new();
    for _ in 0..count {
        if body.len() < at + SECTION_HEADER {
            return Err(FormatError::Short);
        }
        let partition = u32::from_le_bytes(body[at..at + 4].try_into().expect("4 bytes"));
        let flags = body[at + 4];
        let len = u32::from_le_bytes(body[at + 5..at + 9].try_into().expect("4 bytes")) as usize;
        at += SECTION_HEADER;
        let end = at.checked_add(len).ok_or(FormatError::Short)?;
        if body.len() < end {
            return Err(FormatError::Short);
        }
        let releases = flags & RELEASES != 0;
        if releases && len != 0 {
            return Err(FormatError::Malformed("a release carries no frames"));
        }
        sections.push(Section {
            partition,
            releases,
            frames: bytes.slice(at..end),
        });
        at = end;
    }
    if at != body.len() {
        return Err(FormatError::Malformed("bytes after the sections"));
    }
    if fence && !sections.is_empty() {
        return Err(FormatError::Malformed("a fence carries no sections"));
    }
    Ok(LogObject {
        fence,
        put_id,
        sections,
    })
}

/// Tenure `k` of a partition: written once, by create, at its own key, so
/// one origin makes it (rule 4 of `tenure`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TenureRecord {
    pub log: LogId,
    /// The first number of the log that may hold the partition's frames.
    pub from: u64,
    /// Where tenure `k - 1` ended (none for the first).
    pub previous_end: Option<u64>,
    pub put_id: PutId,
    /// The origin that writes the log, and where it answers.
    pub node: String,
    pub url: String,
}

pub fn encode_tenure(t: &TenureRecord) -> Bytes {
    let mut out =
        BytesMut::with_capacity(4 + 1 + 16 + 8 + 1 + 8 + 16 + 4 + t.node.len() + t.url.len() + CRC);
    out.put_slice(TENURE_MAGIC);
    out.put_u8(VERSION);
    out.put_slice(&t.log);
    out.put_u64_le(t.from);
    out.put_u8(u8::from(t.previous_end.is_some()));
    out.put_u64_le(t.previous_end.unwrap_or(0));
    out.put_slice(&t.put_id);
    put_str(&mut out, &t.node);
    put_str(&mut out, &t.url);
    with_crc(out)
}

pub fn decode_tenure(bytes: &Bytes) -> Result<TenureRecord, FormatError> {
    const FIXED: usize = 4 + 1 + 16 + 8 + 1 + 8 + 16;
    if bytes.len() < FIXED + 4 + CRC {
        return Err(FormatError::Short);
    }
    let body = checked(bytes, TENURE_MAGIC, "tenure")?;
    let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
    let previous_end = match body[29] {
        0 => None,
        1 => Some(u64_at(30)),
        _ => return Err(FormatError::Malformed("ended is 0 or 1")),
    };
    let mut rest = &body[FIXED..];
    let node = take_str(&mut rest)?;
    let url = take_str(&mut rest)?;
    if !rest.is_empty() {
        return Err(FormatError::Malformed("bytes after the tenure"));
    }
    Ok(TenureRecord {
        log: body[5..21].try_into().expect("16 bytes"),
        from: u64_at(21),
        previous_end,
        put_id: body[38..54].try_into().expect("16 bytes"),
        node,
        url,
    })
}

/// A partition checkpoint: every frame of the partition's history before
/// `stand`, as image parts (`keys::partition_stand_image`). Written once,
/// by create at the stand's key, after its parts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StandManifest {
    pub stand: Stand,
    /// Names the parts.
    pub put_id: PutId,
    pub parts: u32,
    /// Bytes of the parts together.
    pub bytes: u64,
}

pub fn encode_stand(m: &StandManifest) -> Bytes {
    let mut out = BytesMut::with_capacity(STAND_LEN);
    out.put_slice(STAND_MAGIC);
    out.put_u8(VERSION);
    out.put_u64_le(m.stand.tenure);
    out.put_u64_le(m.stand.number);
    out.put_slice(&m.put_id);
    out.put_u32_le(m.parts);
    out.put_u64_le(m.bytes);
    with_crc(out)
}

pub fn decode_stand(bytes: &Bytes) -> Result<StandManifest, FormatError> {
    if bytes.len() != STAND_LEN {
        return Err(FormatError::Short);
    }
    let body = checked(bytes, STAND_MAGIC, "stand")?;
    let u64_at = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
    Ok(StandManifest {
        stand: Stand {
            tenure: u64_at(5),
            number: u64_at(13),
        },
        put_id: body[21..37].try_into().expect("16 bytes"),
        parts: u32::from_le_bytes(body[37..41].try_into().expect("4 bytes")),
        bytes: u64_at(41),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn section() -> impl Strategy<Value = Section> {
        (
            any::<u32>(),
            any::<bool>(),
            proptest::collection::vec(any::<u8>(), 0..64),
        )
            .prop_map(|(partition, releases, frames)| Section {
                partition,
                releases,
                frames: if releases {
                    Bytes::new()
                } else {
                    frames.into()
                },
            })
    }

    proptest! {
        #[test]
        fn log_objects_round_trip(put_id: PutId, sections in proptest::collection::vec(section(), 0..6), fence: bool) {
            let object = LogObject { fence, put_id, sections: if fence { Vec::new() } else { sections } };
            prop_assert_eq!(decode_log(&encode_log(&object)).unwrap(), object);
        }

        #[test]
        fn tenures_round_trip(log: LogId, from: u64, previous_end: Option<u64>, put_id: PutId, node in ".{0,40}", url in ".{0,80}") {
            let t = TenureRecord { log, from, previous_end, put_id, node, url };
            prop_assert_eq!(decode_tenure(&encode_tenure(&t)).unwrap(), t);
        }

        #[test]
        fn stands_round_trip(tenure: u64, number: u64, put_id: PutId, parts: u32, bytes: u64) {
            let m = StandManifest { stand: Stand { tenure, number }, put_id, parts, bytes };
            prop_assert_eq!(decode_stand(&encode_stand(&m)).unwrap(), m);
        }

        #[test]
        fn any_flipped_byte_is_caught(sections in proptest::collection::vec(section(), 1..4), at: usize, bit in 0u8..8) {
            let bytes = encode_log(&LogObject { fence: false, put_id: [5; 16], sections });
            let mut bad = bytes.to_vec();
            let at = at % bad.len();
            bad[at] ^= 1 << bit;
            prop_assert!(decode_log(&Bytes::from(bad)).is_err());
        }
    }

    #[test]
    fn a_walk_reads_fences_and_releases() {
        use crate::region::tenure::Found;
        let data = LogObject {
            fence: false,
            put_id: [1; 16],
            sections: vec![
                Section {
                    partition: 3,
                    releases: true,
                    frames: Bytes::new(),
                },
                Section {
                    partition: 4,
                    releases: false,
                    frames: Bytes::from_static(b"x"),
                },
            ],
        };
        let released = Found::Object {
            epoch: 1,
            releases: true,
        };
        assert_eq!(data.found(3), released);
        assert_eq!(data.frames_of(3).count(), 0);
        assert_eq!(
            data.frames_of(4).collect::<Vec<_>>(),
            [&Bytes::from_static(b"x")]
        );
        let fence = LogObject {
            fence: true,
            put_id: [2; 16],
            sections: Vec::new(),
        };
        assert_eq!(
            fence.found(4),
            Found::Object {
                epoch: 2,
                releases: false
            }
        );
    }
}
