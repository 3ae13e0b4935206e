//! `origin::fuzzing::snapshot_range_bytes`: see its doc.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| origin::fuzzing::snapshot_range_bytes(data));
