//! Offsets and read queries: a parsed offset prints as it was written, a
//! query is refused or parsed, and chunk arithmetic stays in range.
#![no_main]

use shared::offset::{Offset, ReadFrom};

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(o) = Offset::parse(s) {
        assert_eq!(o.to_string(), s);
        assert!(o.next_chunk_boundary() >= o);
    }
    let _ = ReadFrom::parse(s);
    let _ = shared::params::parse_read_query(Some(s));
});
