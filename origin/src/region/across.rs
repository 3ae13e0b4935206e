//! Forks across partitions: the names of the two region streams that make
//! one (decision 0016).
//!
//! A fork reads its source's bytes in its own store, so a fork `F` whose
//! source `S` lives in another partition is made of two streams the
//! region keeps under [`shared::partition::HIDDEN`], each in the partition
//! its name says:
//!
//! - the **pin**, in `S`'s partition: a fork of `S` at the fork point,
//!   made first. It is what `S`'s store counts, exactly as a fork in the
//!   same store, so deleting `S` while `F` lives soft-deletes it (`410`,
//!   its path taken), and the pin fixes the prefix `F` gets;
//! - the **copy**, in `F`'s partition: a plain stream holding the pin's
//!   bytes `[0, at)` byte for byte (so offsets stay `S`'s), which `F`
//!   forks in its own store; it is deleted at once after, and lives on
//!   soft-deleted exactly as long as `F` (and its own forks) do.
//!
//! Both names carry one random nonce (each attempt its own) and the other
//! end's path, so either side can find the other: the pin names `F`, the
//! copy names `S`. When a copy goes (its last fork was deleted), its pin
//! is deleted; the owner of `S` also asks after pins older than a grace
//! whether their copy still exists, so a crash between two steps never
//! pins a source for good.

use shared::partition::HIDDEN;

/// Which of the two streams a region path names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Pin,
    Copy,
}

/// A region stream's name, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Name<'a> {
    pub kind: Kind,
    /// The partition it lives in.
    pub partition: u32,
    pub nonce: u64,
    /// The other end: the fork a pin is for, the source a copy copies.
    pub other: &'a str,
}

/// The pin in partition `partition` for the fork at `fork`.
pub fn pin(partition: u32, nonce: u64, fork: &str) -> String {
    format!("{HIDDEN}in/{partition}/pin/{nonce:016x}{fork}")
}

/// The copy in partition `partition` of the source at `source`.
pub fn copy(partition: u32, nonce: u64, source: &str) -> String {
    format!("{HIDDEN}in/{partition}/copy/{nonce:016x}{source}")
}

/// How many bytes the longest name adds to its other end's path: an end
/// longer than the stream path limit less this cannot fork across.
pub const NAME_OVERHEAD: usize = HIDDEN.len() + "in/1023/copy/".len() + 16;

/// Parses a region stream's name; None for any other path.
pub fn parse(path: &str) -> Option<Name<'_>> {
    let partition = shared::partition::named(path)?;
    let rest = path.strip_prefix(HIDDEN)?.strip_prefix("in/")?;
    let (_, rest) = rest.split_once('/')?;
    let (kind, rest) = rest.split_once('/')?;
    let kind = match kind {
        "pin" => Kind::Pin,
        "copy" => Kind::Copy,
        _ => return None,
    };
    let nonce = rest.get(..16)?;
    let other = rest.get(16..)?;
    if !other.starts_with('/') || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    Some(Name {
        kind,
        partition,
        nonce: u64::from_str_radix(nonce, 16).ok()?,
        other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        let p = pin(3, 0xab, "/v1/stream/fork");
        assert_eq!(p, "/.ds-region/in/3/pin/00000000000000ab/v1/stream/fork");
        assert_eq!(
            parse(&p),
            Some(Name {
                kind: Kind::Pin,
                partition: 3,
                nonce: 0xab,
                other: "/v1/stream/fork"
            })
        );
        let c = copy(1023, u64::MAX, "/s");
        assert_eq!(c.len(), NAME_OVERHEAD + "/s".len());
        let parsed = parse(&c).unwrap();
        assert_eq!(
            (parsed.kind, parsed.partition, parsed.nonce, parsed.other),
            (Kind::Copy, 1023, u64::MAX, "/s")
        );
        assert!(shared::paths::validate_stream_path(&c).is_ok());
    }

    #[test]
    fn other_paths_are_not_region_streams() {
        for not in [
            "/v1/stream/a",
            "/.ds-region/in/3/other/00000000000000ab/a",
            "/.ds-region/in/3/pin/00000000000000ab",
            "/.ds-region/in/3/pin/0000000000000zab/a",
            "/.ds-region/in/3/pin/00000000000000aba",
        ] {
            assert_eq!(parse(not), None, "{not}");
        }
    }
}
