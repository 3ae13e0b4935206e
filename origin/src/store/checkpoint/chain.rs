//! Which checkpoint files make up the checkpoint, decided from their names
//! alone.
//!
//! The *chain* is the newest base and every delta after it. A base numbered
//! `n` holds everything up to and including delta `n`, so deltas up to `n`
//! and older bases are *stale*: a compaction that was cut short before it
//! removed them leaves them, and they are ignored (and removed by the next
//! write). The deltas of the chain must follow each other from `n + 1`
//! (from 1 when there is no base yet): a hole means a checkpoint that was
//! made durable is gone, which is corruption, not something to skip.

use crate::store::layout::CheckpointFile;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chain {
    pub base: Option<u64>,
    /// In order.
    pub deltas: Vec<u64>,
    pub stale: Vec<CheckpointFile>,
    /// One more than the highest number any file has.
    pub next_seq: u64,
}

/// The chain has a hole: `missing` should come before `found`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hole {
    pub missing: u64,
    pub found: u64,
}

pub fn plan(files: &[CheckpointFile]) -> Result<Chain, Hole> {
    let base = files
        .iter()
        .filter_map(|f| match *f {
            CheckpointFile::Base(seq) => Some(seq),
            CheckpointFile::Delta(_) => None,
        })
        .max();
    let after_base = |seq: u64| base.is_none_or(|b| seq > b);
    let mut deltas: Vec<u64> = files
        .iter()
        .filter_map(|f| match *f {
            CheckpointFile::Delta(seq) if after_base(seq) => Some(seq),
            _ => None,
        })
        .collect();
    deltas.sort_unstable();
    let first = base.map_or(1, |b| b + 1);
    for (expected, &seq) in (first..).zip(&deltas) {
        if seq != expected {
            return Err(Hole {
                missing: expected,
                found: seq,
            });
        }
    }
    let mut stale: Vec<CheckpointFile> = files
        .iter()
        .copied()
        .filter(|f| match *f {
            CheckpointFile::Base(seq) => Some(seq) != base,
            CheckpointFile::Delta(seq) => !after_base(seq),
        })
        .collect();
    stale.sort_unstable();
    let highest = files
        .iter()
        .map(|f| match *f {
            CheckpointFile::Base(seq) | CheckpointFile::Delta(seq) => seq,
        })
        .max();
    Ok(Chain {
        base,
        deltas,
        stale,
        next_seq: highest.map_or(1, |h| h + 1),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use CheckpointFile::{Base, Delta};

    #[test]
    fn nothing_yet() {
        assert_eq!(
            plan(&[]),
            Ok(Chain {
                base: None,
                deltas: vec![],
                stale: vec![],
                next_seq: 1
            })
        );
    }

    #[test]
    fn deltas_before_the_first_base_start_at_one() {
        let c = plan(&[Delta(2), Delta(1)]).unwrap();
        assert_eq!((c.base, c.deltas, c.next_seq), (None, vec![1, 2], 3));
        assert_eq!(
            plan(&[Delta(2), Delta(3)]),
            Err(Hole {
                missing: 1,
                found: 2
            })
        );
    }

    #[test]
    fn the_newest_base_wins_and_what_it_holds_is_stale() {
        // A compaction into base 4 stopped before it removed anything.
        let files = [Base(1), Delta(2), Delta(3), Delta(4), Base(4)];
        let c = plan(&files).unwrap();
        assert_eq!(c.base, Some(4));
        assert!(c.deltas.is_empty());
        assert_eq!(c.stale, vec![Base(1), Delta(2), Delta(3), Delta(4)]);
        assert_eq!(c.next_seq, 5);
        // ...and then it removed some; later deltas follow the new base.
        let c = plan(&[Delta(3), Base(4), Delta(5), Delta(6)]).unwrap();
        assert_eq!(
            (c.base, c.deltas.clone(), c.next_seq),
            (Some(4), vec![5, 6], 7)
        );
        assert_eq!(c.stale, vec![Delta(3)]);
    }

    #[test]
    fn a_hole_after_the_base_is_an_error() {
        assert_eq!(
            plan(&[Base(4), Delta(5), Delta(7)]),
            Err(Hole {
                missing: 6,
                found: 7
            })
        );
        assert_eq!(
            plan(&[Base(4), Delta(6)]),
            Err(Hole {
                missing: 5,
                found: 6
            })
        );
    }
}
