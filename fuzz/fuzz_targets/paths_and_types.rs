//! Paths, content types, `Accept` and `If-None-Match`: the text a request
//! carries besides its body.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    let _ = shared::paths::classify(s);
    if shared::paths::validate_stream_path(s).is_ok() {
        assert!(matches!(
            shared::paths::classify(s),
            shared::paths::Target::Stream(_)
        ));
    }
    let _ = shared::content_type::is_valid(s);
    let _ = shared::content_type::media_type(s);
    let _ = shared::content_type::is_json(s);
    let _ = shared::negotiate::JsonPreference::of(Some(s));
    let _ = shared::etag::if_none_match_hits(s, "\"abc\"");
});
