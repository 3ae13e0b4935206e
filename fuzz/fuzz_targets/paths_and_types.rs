//! `origin::fuzzing::paths_and_types`: see its doc.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| origin::fuzzing::paths_and_types(data));
