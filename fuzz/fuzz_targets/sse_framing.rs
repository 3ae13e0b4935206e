//! SSE framing of stream bytes: every line of a data event is a `data:`
//! field (no payload byte can end the event or start another field), and
//! the event ends with a blank line.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    for base64 in [false, true] {
        let event = shared::sse::data_event(data, base64);
        assert!(event.ends_with(b"\n\n"));
        let body = &event[..event.len() - 2];
        for line in body.split(|b| *b == b'\n') {
            assert!(
                line.starts_with(b"event:") || line.starts_with(b"data:"),
                "{line:?}"
            );
            assert!(!line.contains(&b'\r'));
        }
    }
});
