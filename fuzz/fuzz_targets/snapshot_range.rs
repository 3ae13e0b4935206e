//! `origin::fuzzing::snapshot_range`: a `Range` header against a length
//! (the first 8 bytes, little-endian; the rest is the header).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if data.len() < 8 {
        return;
    }
    let len = u64::from_le_bytes(data[..8].try_into().unwrap());
    if let Ok(header) = std::str::from_utf8(&data[8..]) {
        origin::fuzzing::snapshot_range(header, len);
    }
});
