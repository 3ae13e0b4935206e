//! `origin::fuzzing::log_records`: see its doc.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| origin::fuzzing::log_records(data));
