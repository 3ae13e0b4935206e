//! `origin::fuzzing::request_headers`: the protocol's request headers.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        origin::fuzzing::request_headers(s);
    }
});
