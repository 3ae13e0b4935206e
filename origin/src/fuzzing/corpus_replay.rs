//! Every input of the committed fuzz corpora (`fuzz/corpus/TARGET/`)
//! replayed through its target ([`super::TARGETS`]) on the stable compiler:
//! the regression check `cargo test` runs on every change. Finding new
//! inputs is `scripts/fuzz` (libFuzzer, coverage-guided), run apart.

use std::path::Path;

#[test]
fn every_committed_fuzz_input_passes_its_target() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/corpus");
    let mut folders: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    folders.sort();
    let mut named: Vec<&str> = super::TARGETS.iter().map(|t| t.0).collect();
    named.sort_unstable();
    assert_eq!(folders, named, "a corpus folder per target, and no other");
    for (name, target) in super::TARGETS {
        let mut inputs = 0;
        for entry in std::fs::read_dir(root.join(name)).unwrap() {
            let path = entry.unwrap().path();
            let data = std::fs::read(&path).unwrap();
            let outcome = std::panic::catch_unwind(|| target(&data));
            assert!(outcome.is_ok(), "{name}: {} fails", path.display());
            inputs += 1;
        }
        assert!(inputs > 0, "{name}: an empty corpus");
        eprintln!("{name}: {inputs} inputs");
    }
}
