//! Which partition of a region a request belongs to.
//!
//! A region splits its streams into a fixed number of partitions, each
//! owned by one origin at a time. A stream's partition is a hash of its
//! path, so every origin and every edge finds it with no lookup: FNV-1a
//! (64 bit) over the path's bytes, modulo the count. The function is part
//! of the bucket's format: changing it (or the count, which the bucket
//! pins when the region first starts) would move streams away from their
//! data, so neither ever changes for a bucket.
//!
//! Paths that name no stream (the servers' own endpoints, `/_admin`,
//! `/_auth/...`) belong to partition 0; the invalidation feed names its
//! partition in its query. The region's own streams (under [`HIDDEN`],
//! which hold what a fork across partitions needs) name theirs in their
//! path: `/.ds-region/in/{n}/...` is in partition `n`.

use crate::paths::{classify, Target};

/// The most partitions a region may have.
pub const MAX_PARTITIONS: u32 = 1024;

/// Where the server's own streams live (a region's, the subscriptions'
/// journal): no client may name one.
pub const HIDDEN: &str = "/.ds-region/";

/// Whether a path is one of the server's own streams (under [`HIDDEN`]).
pub fn is_hidden(path: &str) -> bool {
    path.starts_with(HIDDEN)
}

/// The partition a region stream's path names (`/.ds-region/in/{n}/...`).
pub fn named(stream: &str) -> Option<u32> {
    let rest = stream.strip_prefix(HIDDEN)?.strip_prefix("in/")?;
    let (n, _) = rest.split_once('/')?;
    if n.is_empty() || n.len() > 4 || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// The partition of the stream at `stream` (its path) among `partitions`.
pub fn of_stream(stream: &str, partitions: u32) -> u32 {
    if partitions <= 1 {
        return 0;
    }
    if let Some(n) = named(stream).filter(|n| *n < partitions) {
        return n;
    }
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in stream.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    u32::try_from(hash % u64::from(partitions)).expect("below a u32")
}

/// The partition a request for the (percent-decoded) `path` belongs to:
/// its stream's, for a stream and its chunks and snapshots; 0 otherwise
/// (the control APIs under `__ds` among them: partition 0's owner keeps a
/// region's subscriptions).
pub fn of_path(path: &str, partitions: u32) -> u32 {
    match classify(path) {
        Target::Stream(s) => of_stream(s, partitions),
        Target::Chunk { stream, .. }
        | Target::IncarnationSnapshot { stream, .. }
        | Target::Snapshot { stream, .. }
        | Target::Restore { stream, .. } => of_stream(stream, partitions),
        Target::Control { .. } | Target::Reserved => 0,
    }
}

/// The partition of a request for `path` with `query`: [`of_path`], but
/// the invalidation feed's is the one its query names (`partition=N`,
/// default 0; a count past the region's reads as 0).
pub fn of_request(path: &str, query: Option<&str>, partitions: u32) -> u32 {
    if path == crate::invalidation::PATH {
        return query
            .unwrap_or("")
            .split('&')
            .find_map(|kv| kv.strip_prefix("partition="))
            .and_then(|v| v.parse::<u32>().ok())
            .filter(|p| *p < partitions)
            .unwrap_or(0);
    }
    of_path(path, partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn region_streams_name_their_partition() {
        assert_eq!(of_stream("/.ds-region/in/5/pin/00/v1/stream/a", 6), 5);
        assert_eq!(
            of_path("/.ds-region/in/5/copy/00/a/incarnation/t/chunk/0", 6),
            5
        );
        assert_eq!(named("/.ds-region/in/0/x"), Some(0));
        for not in [
            "/.ds-region/in//x",
            "/.ds-region/in/a/x",
            "/.ds-region/5/x",
            "/v1/stream/a",
        ] {
            assert_eq!(named(not), None, "{not}");
        }
        // A count past the region's falls back to the hash.
        assert_eq!(
            of_stream("/.ds-region/in/9/x", 6),
            of_stream_hashed("/.ds-region/in/9/x", 6)
        );
    }

    fn of_stream_hashed(stream: &str, partitions: u32) -> u32 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in stream.bytes() {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        (hash % u64::from(partitions)) as u32
    }

    #[test]
    fn the_hash_is_fixed_forever() {
        // FNV-1a 64 test vectors: the bucket format depends on them.
        assert_eq!(
            of_stream("", u32::MAX),
            (0xcbf2_9ce4_8422_2325u64 % u64::from(u32::MAX)) as u32
        );
        assert_eq!(
            of_stream("a", 1 << 31),
            (0xaf63_dc4c_8601_ec8cu64 % (1 << 31)) as u32
        );
        assert_eq!(
            of_stream("foobar", 1 << 31),
            (0x8594_4171_f739_67e8u64 % (1 << 31)) as u32
        );
    }

    #[test]
    fn one_partition_holds_everything() {
        assert_eq!(of_stream("/v1/stream/x", 1), 0);
        assert_eq!(of_stream("/v1/stream/x", 0), 0);
    }

    #[test]
    fn a_stream_and_its_sub_resources_share_a_partition() {
        let p = of_stream("/v1/stream/orders", 16);
        assert_eq!(of_path("/v1/stream/orders", 16), p);
        assert_eq!(
            of_path("/v1/stream/orders/incarnation/abc/chunk/0000", 16),
            p
        );
        assert_eq!(of_path("/v1/stream/orders/snapshot", 16), p);
        assert_eq!(of_path("/_admin/keys", 16), 0);
        assert_eq!(of_path("/metrics", 16), 0);
    }

    #[test]
    fn the_feed_names_its_partition() {
        let feed = crate::invalidation::PATH;
        assert_eq!(of_request(feed, Some("offset=now&partition=3"), 4), 3);
        assert_eq!(of_request(feed, Some("offset=now"), 4), 0);
        assert_eq!(of_request(feed, Some("partition=9"), 4), 0);
        assert_eq!(
            of_request("/v1/stream/a", Some("partition=3"), 4),
            of_stream("/v1/stream/a", 4)
        );
    }

    #[test]
    fn streams_spread_over_the_partitions() {
        let mut counts = [0u32; 8];
        for i in 0..8000 {
            counts[of_stream(&format!("/v1/stream/s{i}"), 8) as usize] += 1;
        }
        assert!(
            counts.iter().all(|&c| (800..1200).contains(&c)),
            "{counts:?}"
        );
    }
}
