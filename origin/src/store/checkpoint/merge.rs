//! Folding a base and its deltas into one set of streams, and when to do it
//! on disk.
//!
//! Loading and compacting share the fold: deltas apply in order, a stream
//! in a delta replaces its earlier state, an id a delta deletes goes (ids
//! are never reused, so a stream created and deleted between two
//! checkpoints may be in both lists of one delta: the delete wins). The
//! fold moves encoded records, so a compaction never decodes the streams
//! it does not change, and a load decodes each surviving stream once.
//!
//! Compaction rule: rewrite the base once the deltas since it add up to its
//! size (but at least [`Policy::floor_bytes`], so a small store does not
//! rewrite its base at every checkpoint), or once there are
//! [`Policy::max_deltas`] of them (so a store that changes little does not
//! gather files without end), or when there is no base yet. Each stream
//! state is then written about twice on average (once in a delta, once in
//! the next base), and a load reads at most about twice the base.

use std::collections::BTreeMap;

use super::format::{FileView, Header, Record};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub floor_bytes: u64,
    pub max_deltas: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            floor_bytes: 4 << 20,
            max_deltas: 256,
        }
    }
}

impl Policy {
    /// Whether to compact, given the base's size (None: there is none) and
    /// the deltas after it, the one just written included.
    pub fn compaction_due(&self, base_bytes: Option<u64>, delta_bytes: u64, deltas: usize) -> bool {
        match base_bytes {
            None => true,
            Some(base) => delta_bytes >= base.max(self.floor_bytes) || deltas >= self.max_deltas,
        }
    }
}

/// Every live stream of a checkpoint, in increasing order of id, and the
/// newest file's header.
#[derive(Debug)]
pub struct Merged<'a> {
    pub header: Header,
    pub records: Vec<Record<'a>>,
}

/// Folds `deltas` (in order) into `base`. None when there is neither.
pub fn merge<'a>(base: Option<FileView<'a>>, deltas: Vec<FileView<'a>>) -> Option<Merged<'a>> {
    let header = deltas.last().or(base.as_ref())?.header;
    let base = base.map_or_else(Vec::new, |b| b.records);
    if deltas.is_empty() {
        return Some(Merged {
            header,
            records: base,
        });
    }
    let mut changes: BTreeMap<u64, Option<Record<'a>>> = BTreeMap::new();
    for delta in deltas {
        for r in delta.records {
            changes.insert(r.id, Some(r));
        }
        for id in delta.deleted {
            changes.insert(id, None);
        }
    }
    let mut records = Vec::with_capacity(base.len() + changes.len());
    let mut changes = changes.into_iter().peekable();
    for r in base {
        while let Some((_, change)) = changes.next_if(|(id, _)| *id < r.id) {
            records.extend(change);
        }
        match changes.next_if(|(id, _)| *id == r.id) {
            Some((_, change)) => records.extend(change),
            None => records.push(r),
        }
    }
    records.extend(changes.filter_map(|(_, change)| change));
    Some(Merged { header, records })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn header(seq: u64) -> Header {
        Header {
            seq,
            replay_from_segment: seq * 10,
            next_stream_id: seq * 100,
        }
    }

    /// Records whose bytes name the file they came from.
    fn view(seq: u64, ids: &[u64], deleted: &[u64], tag: &'static [u8]) -> FileView<'static> {
        FileView {
            header: header(seq),
            records: ids
                .iter()
                .map(|&id| Record {
                    id,
                    bytes: tag,
                    file: Path::new("f"),
                })
                .collect(),
            deleted: deleted.to_vec(),
        }
    }

    fn shape(m: &Merged<'_>) -> Vec<(u64, &'static str)> {
        m.records
            .iter()
            .map(|r| {
                let tag = match r.bytes {
                    b"b" => "b",
                    b"1" => "1",
                    b"2" => "2",
                    _ => "?",
                };
                (r.id, tag)
            })
            .collect()
    }

    #[test]
    fn nothing_merges_to_nothing() {
        assert!(merge(None, vec![]).is_none());
    }

    #[test]
    fn deltas_replace_add_and_delete_in_order() {
        let base = view(1, &[2, 4, 6, 8], &[], b"b");
        let d1 = view(2, &[5, 4, 9], &[8, 3], b"1");
        let d2 = view(3, &[1, 5], &[9, 6], b"2");
        let m = merge(Some(base), vec![d1, d2]).unwrap();
        assert_eq!(m.header, header(3));
        assert_eq!(
            shape(&m),
            vec![(1, "2"), (2, "b"), (4, "1"), (5, "2")],
            "1 new, 2 kept, 4 replaced, 5 replaced twice, 6 8 9 deleted"
        );
    }

    #[test]
    fn delete_wins_within_one_delta_and_a_later_delta_can_add_back() {
        let d1 = view(1, &[7], &[7], b"1");
        let m = merge(None, vec![d1]).unwrap();
        assert!(m.records.is_empty());
        let d1 = view(1, &[7], &[7], b"1");
        let d2 = view(2, &[7], &[], b"2");
        assert_eq!(shape(&merge(None, vec![d1, d2]).unwrap()), vec![(7, "2")]);
    }

    #[test]
    fn a_base_alone_passes_through() {
        let m = merge(Some(view(4, &[1, 3], &[], b"b")), vec![]).unwrap();
        assert_eq!(m.header, header(4));
        assert_eq!(shape(&m), vec![(1, "b"), (3, "b")]);
    }

    #[test]
    fn compaction_rule() {
        let p = Policy {
            floor_bytes: 100,
            max_deltas: 4,
        };
        assert!(p.compaction_due(None, 1, 1), "no base yet");
        assert!(!p.compaction_due(Some(1000), 999, 3));
        assert!(
            p.compaction_due(Some(1000), 1000, 3),
            "deltas reach the base"
        );
        assert!(!p.compaction_due(Some(10), 99, 3), "the floor");
        assert!(p.compaction_due(Some(10), 100, 3));
        assert!(p.compaction_due(Some(1000), 5, 4), "too many files");
    }
}
