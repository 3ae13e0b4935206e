//! The checkpoint on disk: loads after writes and compactions, every crash
//! point of a compaction, damaged files, the version-1 file.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;
use tempfile::TempDir;

use super::*;
use crate::core::config::{Expiry, StreamConfig};
use crate::core::producer::{ProducerState, Receipt};
use crate::core::snapshot::SnapshotMeta;
use crate::core::stream::StreamCore;
use crate::store::saved::Extent;

/// Compacts only when there is no base.
const NEVER: Policy = Policy {
    floor_bytes: u64::MAX,
    max_deltas: usize::MAX,
};
/// Compacts at every write.
const ALWAYS: Policy = Policy {
    floor_bytes: 0,
    max_deltas: 1,
};

/// Stream `id` at its `version`-th state: every part of a saved stream set.
fn stream(id: u64, version: u64) -> SavedStream {
    let config = StreamConfig {
        content_type: "application/json".into(),
        expiry: if id.is_multiple_of(2) {
            Expiry::IdleSecs(60)
        } else {
            Expiry::At(id * 1000)
        },
        public: id.is_multiple_of(3),
    };
    let mut core = StreamCore::new(
        id,
        format!("/streams/{id}").into(),
        format!("{id}-inc").into(),
        config,
        1_700_000_000_000 + id,
    );
    core.len = 1000 * version + 10;
    core.closed = version % 5 == 4;
    core.stream_seq = Some(format!("{version:08}"));
    core.producers.insert(
        format!("producer-{}", version % 3),
        ProducerState {
            epoch: version,
            last_seq: 2,
            last_active: 1_700_000_000_000,
            receipts: (0..3)
                .map(|seq| Receipt {
                    seq,
                    start: seq * 10,
                    end: seq * 10 + 10,
                })
                .collect(),
        },
    );
    core.sealed = version * 100;
    core.retained = version * 50;
    core.snapshot = (version % 2 == 1).then(|| {
        Box::new(SnapshotMeta {
            offset: version * 50,
            len: 3,
            digest: format!("{:064x}", id ^ version),
            content_type: "application/json".into(),
        })
    });
    SavedStream {
        file_len: core.len - 10,
        extents: vec![Extent {
            segment: version,
            pos: 64,
            len: 10,
            start: core.len - 10,
        }],
        last_write_at: core.created_at + version,
        core,
    }
}

/// What a load must give: deltas applied to a map by hand.
#[derive(Default)]
struct Model {
    streams: BTreeMap<u64, SavedStream>,
    header: Option<(u64, u64)>,
}

impl Model {
    fn apply(&mut self, delta: &Delta) {
        for s in &delta.changed {
            self.streams.insert(s.core.id, s.clone());
        }
        for id in &delta.deleted {
            self.streams.remove(id);
        }
        self.header = Some((delta.replay_from_segment, delta.next_stream_id));
    }

    fn expected(&self) -> Option<Loaded> {
        let (replay_from_segment, next_stream_id) = self.header?;
        Some(Loaded {
            replay_from_segment,
            next_stream_id,
            streams: self.streams.values().cloned().collect(),
        })
    }
}

fn delta(n: u64, changed: &[(u64, u64)], deleted: &[u64]) -> Delta {
    Delta {
        replay_from_segment: n * 10,
        next_stream_id: n * 100,
        changed: changed.iter().map(|&(id, v)| stream(id, v)).collect(),
        deleted: deleted.to_vec(),
    }
}

/// Writes, and fails the test if anything failed, a compaction included.
fn write_checked(data: &Path, d: &Delta, policy: &Policy) -> WriteReport {
    let report = write_with(data, d, policy).unwrap();
    if let Some(Err(e)) = &report.compaction {
        panic!("compaction failed: {e}");
    }
    report
}

fn write_ok(data: &Path, d: &Delta, policy: &Policy) {
    let _ = write_checked(data, d, policy);
}

fn names(data: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(layout::checkpoints_dir(data))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn file(data: &Path, f: CheckpointFile) -> PathBuf {
    layout::checkpoint_file_path(data, f)
}

/// Checkpoint files, by name.
type Files = BTreeMap<String, Vec<u8>>;

fn contents(data: &Path) -> Files {
    names(data)
        .into_iter()
        .map(|n| {
            let bytes = std::fs::read(layout::checkpoints_dir(data).join(&n)).unwrap();
            (n, bytes)
        })
        .collect()
}

/// A data directory holding exactly these checkpoint files.
fn restore(files: &Files) -> TempDir {
    let dir = TempDir::new().unwrap();
    std::fs::create_dir(layout::checkpoints_dir(dir.path())).unwrap();
    for (name, bytes) in files {
        std::fs::write(layout::checkpoints_dir(dir.path()).join(name), bytes).unwrap();
    }
    dir
}

fn is_corrupt(r: Result<Option<Loaded>, CheckpointError>, expected_file: &Path) -> bool {
    matches!(r, Err(CheckpointError::Corrupt { ref file, .. }) if file == expected_file)
}

#[test]
fn file_names_round_trip() {
    for f in [CheckpointFile::Base(9), CheckpointFile::Delta(u64::MAX)] {
        let p = file(Path::new("/d"), f);
        let name = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(layout::parse_checkpoint_file(name), Some(f));
        let tmp = layout::temp_path(&p);
        let tmp = tmp.file_name().unwrap().to_str().unwrap();
        assert!(layout::is_temp_file(tmp));
        assert_eq!(layout::parse_checkpoint_file(tmp), None);
    }
    assert_eq!(layout::parse_checkpoint_file("base-+000000000000001"), None);
    assert_eq!(layout::parse_checkpoint_file("base-1"), None);
    assert_eq!(layout::parse_checkpoint_file("checkpoint"), None);
}

/// `SavedStream::extents_cover_tail` (beside the checkpoint tests, which
/// are the ones this crate's checkpoint work runs).
#[test]
fn extents_must_cover_the_tail() {
    let with = |file_len: u64, len: u64, runs: &[(u64, u32)]| {
        let mut s = stream(1, 0);
        s.core.len = len;
        s.file_len = file_len;
        s.extents = runs
            .iter()
            .map(|&(start, len)| Extent {
                segment: 3,
                pos: 0,
                len,
                start,
            })
            .collect();
        s.extents_cover_tail()
    };
    assert!(with(10, 10, &[]));
    assert!(with(4, 10, &[(4, 2), (6, 4)]));
    assert!(!with(4, 10, &[(4, 2)]), "short");
    assert!(!with(4, 10, &[(5, 5)]), "a hole");
    assert!(!with(4, 10, &[(6, 4), (4, 2)]), "out of order");
    assert!(!with(4, 10, &[(4, 2), (6, 8)]), "too long");
    assert!(SavedStream::in_file(stream(2, 3).core).extents_cover_tail());
    assert!(stream(2, 3).extents_cover_tail());
}

#[test]
fn nothing_written_loads_as_none() {
    let dir = TempDir::new().unwrap();
    assert_eq!(load(dir.path()).unwrap(), None);
    std::fs::create_dir(layout::checkpoints_dir(dir.path())).unwrap();
    std::fs::write(layout::checkpoints_dir(dir.path()).join("x.tmp"), b"torn").unwrap();
    assert_eq!(load(dir.path()).unwrap(), None);
}

#[test]
fn deltas_apply_in_order_over_the_base() {
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    let mut model = Model::default();
    let deltas = [
        delta(1, &[(1, 0), (2, 0), (3, 0), (4, 0)], &[]),
        delta(2, &[(2, 1), (5, 0)], &[3]),
        delta(3, &[(5, 1), (6, 0)], &[1, 99]),
        delta(4, &[(2, 2)], &[6]),
    ];
    for (i, d) in deltas.iter().enumerate() {
        let report = write_checked(data, d, &NEVER);
        assert_eq!(report.seq, i as u64 + 1);
        assert_eq!(
            report.compaction.is_some(),
            i == 0,
            "only the first: no base"
        );
        model.apply(d);
        assert_eq!(load(data).unwrap(), model.expected());
    }
    assert_eq!(
        names(data),
        [
            "base-0000000000000001",
            "delta-0000000000000002",
            "delta-0000000000000003",
            "delta-0000000000000004"
        ]
    );
    let loaded = load(data).unwrap().unwrap();
    let ids: Vec<u64> = loaded.streams.iter().map(|s| s.core.id).collect();
    assert_eq!(ids, [2, 4, 5]);
    assert_eq!(loaded.streams[0], stream(2, 2));
    assert_eq!(
        (loaded.replay_from_segment, loaded.next_stream_id),
        (40, 400)
    );
}

#[test]
fn compaction_merges_into_one_base() {
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    let mut model = Model::default();
    let by_count = Policy {
        floor_bytes: u64::MAX,
        max_deltas: 3,
    };
    for n in 1..=4 {
        let d = delta(n, &[(n, n), (1, n)], &[]);
        model.apply(&d);
        let report = write_checked(data, &d, &by_count);
        if n == 4 {
            let c = report.compacted().expect("three deltas since the base");
            assert_eq!((c.streams, c.deltas_merged), (4, 3));
            assert_eq!(report.bytes_written(), report.delta_bytes + c.base_bytes);
        }
    }
    assert_eq!(names(data), ["base-0000000000000004"]);
    assert_eq!(load(data).unwrap(), model.expected());
    // Numbering goes on from the files alone.
    let d = delta(5, &[], &[2]);
    model.apply(&d);
    assert_eq!(write_checked(data, &d, &NEVER).seq, 5);
    assert_eq!(load(data).unwrap(), model.expected());
}

#[test]
fn the_size_rule_compacts_once_deltas_reach_the_base() {
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    let by_size = Policy {
        floor_bytes: 0,
        max_deltas: usize::MAX,
    };
    let all: Vec<(u64, u64)> = (1..=20).map(|id| (id, 0)).collect();
    write_ok(data, &delta(1, &all, &[]), &by_size);
    let base = std::fs::metadata(file(data, CheckpointFile::Base(1)))
        .unwrap()
        .len();
    let mut written = 0;
    for n in 2.. {
        let report = write_checked(data, &delta(n, &[(n % 20 + 1, n)], &[]), &by_size);
        written += report.delta_bytes;
        assert_eq!(
            report.compaction.is_some(),
            written >= base,
            "after {written} of {base}"
        );
        if report.compaction.is_some() {
            break;
        }
    }
}

#[test]
fn every_crash_point_of_a_compaction_loads_the_same_state() {
    // Before: a base and three deltas.
    let dir = TempDir::new().unwrap();
    let mut model = Model::default();
    let early = [
        delta(1, &[(1, 0), (2, 0), (3, 0)], &[]),
        delta(2, &[(1, 1)], &[]),
        delta(3, &[(4, 0)], &[2]),
        delta(4, &[(3, 1)], &[]),
    ];
    for d in &early {
        write_ok(dir.path(), d, &NEVER);
        model.apply(d);
    }
    let before = contents(dir.path());
    let state_before = model.expected();
    // The write that compacts: its delta, then the new base.
    let d5 = delta(5, &[(5, 0), (1, 2)], &[4]);
    model.apply(&d5);
    let state_after = model.expected();
    let with_delta = {
        let dir = restore(&before);
        write_ok(dir.path(), &d5, &NEVER);
        contents(dir.path())
    };
    let delta5 = "delta-0000000000000005".to_string();
    let new_base = {
        let dir = restore(&before);
        write_ok(dir.path(), &d5, &ALWAYS);
        assert_eq!(names(dir.path()), ["base-0000000000000005"]);
        contents(dir.path())
    };
    let base5 = "base-0000000000000005".to_string();
    let torn = |name: &str, of: &[u8]| (format!("{name}.tmp"), of[..of.len() / 2].to_vec());

    let mut states: Vec<(String, Files, Option<Loaded>)> = Vec::new();
    let mut s = before.clone();
    s.extend([torn(&delta5, &with_delta[&delta5])]);
    states.push(("the delta half written".into(), s, state_before.clone()));
    states.push((
        "the delta in place".into(),
        with_delta.clone(),
        state_after.clone(),
    ));
    let mut s = with_delta.clone();
    s.extend([torn(&base5, &new_base[&base5])]);
    states.push(("the new base half written".into(), s, state_after.clone()));
    // The new base in place, and any of the files it replaces not yet removed.
    let old: Vec<&String> = with_delta.keys().collect();
    for mask in 0..1u32 << old.len() {
        let mut s: Files = old
            .iter()
            .enumerate()
            .filter(|(i, _)| mask & (1 << i) != 0)
            .map(|(_, &n)| (n.clone(), with_delta[n].clone()))
            .collect();
        s.insert(base5.clone(), new_base[&base5].clone());
        states.push((
            format!("new base, old files {mask:05b}"),
            s,
            state_after.clone(),
        ));
    }

    for (what, files, expected) in states {
        let dir = restore(&files);
        let data = dir.path();
        assert_eq!(load(data).unwrap(), expected, "{what}");
        // The next write clears what the cut-short one left, and builds on
        // the same state.
        let d6 = delta(6, &[(6, 0)], &[1]);
        let report = write_checked(data, &d6, &Policy::default());
        let mut next = Model {
            streams: expected
                .unwrap()
                .streams
                .into_iter()
                .map(|s| (s.core.id, s))
                .collect(),
            header: None,
        };
        next.apply(&d6);
        assert_eq!(load(data).unwrap(), next.expected(), "{what}, then a write");
        let left = names(data);
        assert!(
            left.iter().all(|n| !n.ends_with(".tmp")),
            "{what}: {left:?}"
        );
        if files.contains_key(&base5) {
            let seq = report.seq;
            assert_eq!(left, [base5.clone(), format!("delta-{seq:016x}")], "{what}");
        }
    }
}

#[test]
fn a_damaged_newest_delta_is_an_error() {
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    for n in 1..=3 {
        write_ok(data, &delta(n, &[(n, n), (9, n)], &[1]), &NEVER);
    }
    let newest = file(data, CheckpointFile::Delta(3));
    let good = std::fs::read(&newest).unwrap();
    for i in 0..good.len() {
        let mut bad = good.clone();
        bad[i] ^= 0x10;
        std::fs::write(&newest, &bad).unwrap();
        assert!(is_corrupt(load(data), &newest), "byte {i}");
    }
    for cut in [0, 4, 9, good.len() / 2, good.len() - 1] {
        std::fs::write(&newest, &good[..cut]).unwrap();
        assert!(is_corrupt(load(data), &newest), "cut at {cut}");
    }
    let mut longer = good.clone();
    longer.push(0);
    std::fs::write(&newest, &longer).unwrap();
    assert!(is_corrupt(load(data), &newest), "a byte more");
    std::fs::write(&newest, &good).unwrap();
    assert!(load(data).is_ok());
}

#[test]
fn a_damaged_base_is_an_error() {
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    write_ok(data, &delta(1, &[(1, 1), (2, 1)], &[]), &NEVER);
    let base = file(data, CheckpointFile::Base(1));
    let mut bytes = std::fs::read(&base).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&base, &bytes).unwrap();
    assert!(is_corrupt(load(data), &base));
    // A compaction that would read it fails and says so; the delta is
    // written all the same.
    let report = write_with(data, &delta(2, &[(3, 0)], &[]), &ALWAYS).unwrap();
    assert!(matches!(
        report.compaction,
        Some(Err(CheckpointError::Corrupt { .. }))
    ));
    assert!(file(data, CheckpointFile::Delta(2)).exists());
}

#[test]
fn a_missing_delta_is_an_error() {
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    for n in 1..=4 {
        write_ok(data, &delta(n, &[(n, n)], &[]), &NEVER);
    }
    std::fs::remove_file(file(data, CheckpointFile::Delta(3))).unwrap();
    let after = file(data, CheckpointFile::Delta(4));
    let r = load(data);
    assert!(
        matches!(&r, Err(CheckpointError::Corrupt { file, reason: Corruption::Gap { missing: 3 } }) if *file == after),
        "{r:?}"
    );
    let e = write_with(data, &delta(5, &[], &[]), &NEVER).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
}

#[test]
fn a_delta_under_another_name_is_an_error() {
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    for n in 1..=2 {
        write_ok(data, &delta(n, &[(n, n)], &[]), &NEVER);
    }
    let copy = file(data, CheckpointFile::Delta(3));
    std::fs::copy(file(data, CheckpointFile::Delta(2)), &copy).unwrap();
    assert!(is_corrupt(load(data), &copy));
}

#[test]
fn version_1_is_read_then_migrated() {
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    let old = legacy::Checkpoint {
        replay_from_segment: 7,
        next_stream_id: 12,
        streams: vec![stream(3, 1).core, stream(1, 2).core, stream(2, 0).core],
    };
    legacy::write(data, &old).unwrap();
    let mut model = Model {
        streams: old
            .streams
            .iter()
            .map(|c| (c.id, SavedStream::in_file(c.clone())))
            .collect(),
        header: Some((7, 12)),
    };
    let loaded = load(data).unwrap().unwrap();
    assert_eq!(Some(loaded.clone()), model.expected());
    assert!(loaded
        .streams
        .iter()
        .all(|s| s.file_len == s.core.len && s.extents.is_empty()));
    // The first write makes a base of it, then removes it.
    let d = delta(2, &[(4, 0), (1, 3)], &[2]);
    model.apply(&d);
    let report = write_checked(data, &d, &Policy::default());
    assert!(report.compacted().is_some(), "no base yet");
    assert!(!layout::checkpoint_path(data).exists());
    assert_eq!(names(data), ["base-0000000000000001"]);
    assert_eq!(load(data).unwrap(), model.expected());
}

#[test]
fn a_migration_cut_short_loads_version_1_and_the_deltas_after_it() {
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    let old = legacy::Checkpoint {
        replay_from_segment: 7,
        next_stream_id: 12,
        streams: vec![stream(1, 0).core, stream(2, 0).core],
    };
    legacy::write(data, &old).unwrap();
    // The first write's delta is in place; it stopped before the base.
    let d = delta(2, &[(3, 0)], &[1]);
    std::fs::create_dir(layout::checkpoints_dir(data)).unwrap();
    std::fs::write(
        file(data, CheckpointFile::Delta(1)),
        format::encode_delta(1, &d),
    )
    .unwrap();
    let mut model = Model {
        streams: [(2, SavedStream::in_file(stream(2, 0).core))].into(),
        header: None,
    };
    model.apply(&d);
    assert_eq!(load(data).unwrap(), model.expected());
    let d = delta(3, &[(2, 1)], &[]);
    model.apply(&d);
    assert!(write_checked(data, &d, &NEVER).compacted().is_some());
    assert!(!layout::checkpoint_path(data).exists());
    assert_eq!(names(data), ["base-0000000000000002"]);
    assert_eq!(load(data).unwrap(), model.expected());
}

#[test]
fn a_version_1_file_beside_a_base_is_ignored_then_removed() {
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    let d = delta(1, &[(1, 1)], &[]);
    write_ok(data, &d, &NEVER);
    // A crash after the migration's base was in place, before the old file went.
    let old = legacy::Checkpoint {
        replay_from_segment: 0,
        next_stream_id: 9,
        streams: vec![stream(8, 0).core],
    };
    legacy::write(data, &old).unwrap();
    let mut model = Model::default();
    model.apply(&d);
    assert_eq!(load(data).unwrap(), model.expected());
    write_ok(data, &delta(2, &[], &[]), &NEVER);
    assert!(!layout::checkpoint_path(data).exists());
}

/// One delta: changes `(id, Some(version))` and deletes `(id, None)`.
fn ops() -> impl Strategy<Value = Vec<(u64, Option<u64>)>> {
    proptest::collection::vec((0..8u64, proptest::option::of(0..4u64)), 0..6)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn loads_equal_the_deltas_applied_by_hand(
        deltas in proptest::collection::vec(ops(), 1..8),
        floor in prop_oneof![Just(0u64), Just(600), Just(u64::MAX)],
        max_deltas in 1..5usize,
    ) {
        let dir = TempDir::new().unwrap();
        let data = dir.path();
        let policy = Policy { floor_bytes: floor, max_deltas };
        let mut model = Model::default();
        for (n, ops) in deltas.iter().enumerate() {
            let n = n as u64 + 1;
            let changed: Vec<(u64, u64)> = ops.iter().filter_map(|&(id, v)| Some((id, v?))).collect();
            let deleted: Vec<u64> = ops.iter().filter(|(_, v)| v.is_none()).map(|&(id, _)| id).collect();
            let d = delta(n, &changed, &deleted);
            write_ok(data, &d, &policy);
            model.apply(&d);
            prop_assert_eq!(load(data).unwrap(), model.expected());
            prop_assert_eq!(names(data).iter().filter(|n| n.starts_with("base-")).count(), 1);
        }
    }
}

/// A million streams through one base. In release (about a second):
/// `cargo test --release -p origin --lib store::checkpoint::tests::a_million_streams -- --ignored --nocapture`
#[test]
#[ignore = "slow in a debug build; run in release"]
fn a_million_streams_round_trip() {
    let dir = TempDir::new().unwrap();
    let data = dir.path();
    let d = Delta {
        replay_from_segment: 3,
        next_stream_id: 1_000_001,
        changed: (1..=1_000_000).map(|id| stream(id, id % 7)).collect(),
        deleted: Vec::new(),
    };
    let started = std::time::Instant::now();
    let report = write_checked(data, &d, &Policy::default());
    eprintln!(
        "wrote {} bytes in {:?}",
        report.bytes_written(),
        started.elapsed()
    );
    let started = std::time::Instant::now();
    let loaded = load(data).unwrap().unwrap();
    eprintln!(
        "loaded {} streams in {:?}",
        loaded.streams.len(),
        started.elapsed()
    );
    assert_eq!(loaded.streams, d.changed);
}
