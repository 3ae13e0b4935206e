//! `origin::fuzzing::offsets_and_query`: see its doc.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| origin::fuzzing::offsets_and_query(data));
