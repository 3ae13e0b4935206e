//! `origin::fuzzing::sse_framing`: see its doc.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| origin::fuzzing::sse_framing(data));
