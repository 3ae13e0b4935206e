//! The checkpoint format of version 1, kept so that a data directory written
//! before incremental checkpoints still starts (its file becomes the first
//! base, see `super::load`) and so the callers that still write it keep
//! working until they move to [`super::write`].
//!
//! Every stream's state as of the start of one WAL segment, as one JSON
//! document in one file:
//!
//! ```text
//! DATA/checkpoint:  "DSCK" version:u8 crc:u32le json
//! ```
//! The file is written to a temporary name, synced, and renamed over the old
//! one, so a crash leaves either the old checkpoint or the new one. In this
//! version every stream file held all of its stream's bytes at the
//! checkpoint.

use std::io;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::{CheckpointError, Corruption};
use crate::core::stream::StreamCore;
use crate::store::layout;

const MAGIC: &[u8; 4] = b"DSCK";
pub const VERSION: u8 = 1;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checkpoint {
    /// Recovery replays this segment and every later one.
    pub replay_from_segment: u64,
    pub next_stream_id: u64,
    pub streams: Vec<StreamCore>,
}

#[cfg(test)]
pub fn encode(c: &Checkpoint) -> Vec<u8> {
    let json = serde_json::to_vec(c).expect("checkpoints serialize");
    let mut out = Vec::with_capacity(json.len() + 9);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&crc32fast::hash(&json).to_le_bytes());
    out.extend_from_slice(&json);
    out
}

pub fn decode(buf: &[u8]) -> Result<Checkpoint, Corruption> {
    if buf.len() < 9 || &buf[..4] != MAGIC {
        return Err(Corruption::Format("bad magic"));
    }
    if buf[4] != VERSION {
        return Err(Corruption::Format("unknown version"));
    }
    let crc = u32::from_le_bytes(buf[5..9].try_into().expect("4 bytes"));
    if crc32fast::hash(&buf[9..]) != crc {
        return Err(Corruption::Format("checksum mismatch"));
    }
    Ok(serde_json::from_slice(&buf[9..])?)
}

/// Reads the checkpoint, if one was ever written.
pub fn read(data: &Path) -> Result<Option<Checkpoint>, CheckpointError> {
    let path = layout::checkpoint_path(data);
    match std::fs::read(&path) {
        Ok(buf) => decode(&buf)
            .map(Some)
            .map_err(|reason| CheckpointError::Corrupt { file: path, reason }),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Replaces the checkpoint atomically and durably (the tests write the old
/// format to check it is still read).
#[cfg(test)]
pub fn write(data: &Path, c: &Checkpoint) -> io::Result<()> {
    let path = layout::checkpoint_path(data);
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp)?;
    std::io::Write::write_all(&mut f, &encode(c))?;
    f.sync_all()?;
    drop(f);
    std::fs::rename(&tmp, &path)?;
    layout::sync_dir(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::config::{Expiry, StreamConfig};
    use crate::core::producer::ProducerClaim;
    use crate::core::stream::AppendEffect;
    use proptest::prelude::*;

    fn stream(id: u64, len: u64, closed: bool, producer: Option<(String, u64, u64)>) -> StreamCore {
        let cfg = StreamConfig {
            content_type: "text/plain".into(),
            expiry: Expiry::IdleSecs(id),
            public: false,
        };
        let mut s = StreamCore::new(
            id,
            format!("/s/{id}").into(),
            format!("inc{id}").into(),
            cfg,
            5,
        );
        let producer = producer.map(|(id, epoch, _seq)| ProducerClaim { id, epoch, seq: 0 });
        s.apply(&AppendEffect {
            start: 0,
            len,
            close: closed,
            producer,
            stream_seq: Some("x".into()),
            at: 9,
        });
        s
    }

    proptest! {
        #[test]
        fn round_trips(specs in proptest::collection::vec((any::<u64>(), any::<bool>(), proptest::option::of(("[a-z]{1,5}", any::<u64>(), any::<u64>()))), 0..5), seg in any::<u64>()) {
            let streams: Vec<_> = specs.into_iter().enumerate().map(|(i, (len, c, p))| stream(i as u64, len, c, p)).collect();
            let c = Checkpoint { replay_from_segment: seg, next_stream_id: 77, streams };
            prop_assert_eq!(decode(&encode(&c)).unwrap(), c);
        }
    }

    #[test]
    fn detects_corruption() {
        let c = Checkpoint {
            replay_from_segment: 1,
            next_stream_id: 2,
            streams: vec![stream(1, 3, false, None)],
        };
        let mut buf = encode(&c);
        let last = buf.len() - 2;
        buf[last] ^= 1;
        assert!(matches!(decode(&buf), Err(Corruption::Format(_))));
        assert!(decode(&buf[..5]).is_err());
    }
}
