//! `origin::fuzzing::request_headers_bytes`: see its doc.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| origin::fuzzing::request_headers_bytes(data));
