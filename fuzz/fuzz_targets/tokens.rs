//! Tokens: a verifier refuses any text that is not a token it signed, and
//! never panics on one.
#![no_main]

use std::sync::OnceLock;

fn verifier() -> &'static shared::auth::Verifier {
    static V: OnceLock<shared::auth::Verifier> = OnceLock::new();
    V.get_or_init(|| shared::auth::Verifier::from_hex(&"ab".repeat(32)).expect("a 32-byte key"))
}

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        assert!(verifier().verify(s, 1_700_000_000).is_err());
    }
});
