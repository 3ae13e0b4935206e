//! Every object key, from one place (`shared::object_keys`, which the edge
//! uses too), as object-store paths.
//!
//! ```text
//! streams/{path-hash}/{incarnation}/chunks/{offset}        one sealed 4 MiB chunk
//! streams/{path-hash}/{incarnation}/snapshots/{offset}-{digest16}  one snapshot
//! region/partitions/{p:04}/epochs/{epoch:020}   who claimed partition p (see `region`)
//! region/partitions/{p:04}/wal/{number:020}     one group commit (or fence) of p
//! region/partitions/{p:04}/checkpoints/{number:020}   a checkpoint's manifest (`region::checkpoint`)
//! region/partitions/{p:04}/images/{number:020}/{put id}/{part:06}   its image, in parts
//! region/partitions/{p:04}/staging/{upload}/{part:05}   a staged snapshot part (`http::staging`)
//! region/partitions/{p:04}/tenures/{k:020}      a stretch of p's history in one log (decision 0028)
//! region/logs/{log}/{number:020}                one group commit of an origin's partitions (0028)
//! region/nodes/{node}                           one origin's heartbeat (`region::membership`)
//! region/auth/{token-signing.pk8,keys.json}     the region's access control (`region::auth_sync`)
//! ```
//! `path-hash` is the first 16 bytes of SHA-256 of the stream's path, in hex:
//! keys stay short whatever the path, and an edge that serves
//! `{stream}/incarnation/{token}/chunk/{offset}` computes the same key from
//! the URL alone. Binding the path into the key means a token copied under
//! another stream's path finds nothing, so a credential for one stream can
//! never read another's chunks. `offset` is the chunk's first byte in the
//! 16-hex-digit offset form, so keys of one incarnation list in stream order.

use object_store::path::Path;
use shared::object_keys;
use shared::offset::Offset;

pub fn incarnation_prefix(stream_path: &str, incarnation: &str) -> Path {
    Path::from(object_keys::incarnation_prefix(stream_path, incarnation))
}

pub fn chunk(stream_path: &str, incarnation: &str, start: Offset) -> Path {
    Path::from(object_keys::chunk_key(stream_path, incarnation, start))
}

pub fn snapshot(stream_path: &str, incarnation: &str, offset: Offset, digest: &str) -> Path {
    Path::from(object_keys::snapshot_key(
        stream_path,
        incarnation,
        offset,
        digest,
    ))
}

/// Where partition `p`'s epoch claims are.
pub fn partition_epochs(p: u32) -> Path {
    Path::from(format!("region/partitions/{p:04}/epochs"))
}

pub fn partition_epoch(p: u32, epoch: u64) -> Path {
    Path::from(format!("region/partitions/{p:04}/epochs/{epoch:020}"))
}

/// Where partition `p`'s WAL objects are.
/// The staged snapshot parts of partition `p` (`upload` is a hash of the
/// upload's stream, incarnation and offset).
pub fn partition_staging(p: u32) -> Path {
    Path::from(format!("region/partitions/{p:04}/staging"))
}

pub fn partition_wal(p: u32) -> Path {
    Path::from(format!("region/partitions/{p:04}/wal"))
}

pub fn partition_wal_object(p: u32, number: u64) -> Path {
    Path::from(format!("region/partitions/{p:04}/wal/{number:020}"))
}

/// Where partition `p`'s checkpoint manifests are.
pub fn partition_checkpoints(p: u32) -> Path {
    Path::from(format!("region/partitions/{p:04}/checkpoints"))
}

pub fn partition_checkpoint(p: u32, number: u64) -> Path {
    Path::from(format!("region/partitions/{p:04}/checkpoints/{number:020}"))
}

/// Where partition `p`'s checkpoint images are.
pub fn partition_images(p: u32) -> Path {
    Path::from(format!("region/partitions/{p:04}/images"))
}

/// Part `part` of the image of the checkpoint at `number` that the build
/// with `put_id` made.
pub fn partition_image_part(p: u32, number: u64, put_id: &[u8; 16], part: u32) -> Path {
    Path::from(format!(
        "region/partitions/{p:04}/images/{number:020}/{}/{part:06}",
        hex::encode(put_id)
    ))
}

/// The checkpoint number of an image part's key.
pub fn image_number(key: &Path) -> Option<u64> {
    let mut parts = key.parts().map(|p| p.as_ref().to_owned());
    parts.find(|p| p == "images")?;
    let n = parts.next()?;
    (n.len() == 20 && n.bytes().all(|b| b.is_ascii_digit()))
        .then(|| n.parse().ok())
        .flatten()
}

/// Where the region's origins put their heartbeats.
pub fn node_heartbeats() -> Path {
    Path::from("region/nodes")
}

/// One origin's heartbeat (`node` is checked to be one key segment).
pub fn node_heartbeat(node: &str) -> Path {
    Path::from(format!("region/nodes/{node}"))
}

/// The region's partition count, pinned by its first origin.
pub fn region_partitions() -> Path {
    Path::from("region/partitions.json")
}

/// The key origins of the region prove to one another (`region::peer_key`).
pub fn region_peer_key() -> Path {
    Path::from("region/peer.key")
}

/// One of the region's access-control files.
pub fn region_auth(file: &str) -> Path {
    Path::from(format!("region/auth/{file}"))
}

/// Where one origin's log is (one WAL per origin, decision 0028).
pub fn log(log: &[u8; 16]) -> Path {
    Path::from(format!("region/logs/{}", hex::encode(log)))
}

/// Object `number` of an origin's log.
pub fn log_object(log: &[u8; 16], number: u64) -> Path {
    Path::from(format!("region/logs/{}/{number:020}", hex::encode(log)))
}

/// Where partition `p`'s tenures are.
pub fn partition_tenures(p: u32) -> Path {
    Path::from(format!("region/partitions/{p:04}/tenures"))
}

pub fn partition_tenure(p: u32, k: u64) -> Path {
    Path::from(format!("region/partitions/{p:04}/tenures/{k:020}"))
}

/// Where partition `p`'s checkpoints in one WAL per origin are, each keyed
/// by where it stands (`region::tenure::Stand`).
pub fn partition_stands(p: u32) -> Path {
    Path::from(format!("region/partitions/{p:04}/stands"))
}

pub fn partition_stand(p: u32, tenure: u64, number: u64) -> Path {
    Path::from(format!(
        "region/partitions/{p:04}/stands/{tenure:020}-{number:020}"
    ))
}

/// Where the images of partition `p`'s checkpoints at stands are.
pub fn partition_stand_images(p: u32) -> Path {
    Path::from(format!("region/partitions/{p:04}/stand-images"))
}

/// Part `part` of the image the build with `put_id` made for the
/// checkpoint standing at (`tenure`, `number`).
pub fn partition_stand_image(
    p: u32,
    tenure: u64,
    number: u64,
    put_id: &[u8; 16],
    part: u32,
) -> Path {
    Path::from(format!(
        "region/partitions/{p:04}/stand-images/{tenure:020}-{number:020}/{}/{part:06}",
        hex::encode(put_id)
    ))
}

/// The (tenure, number) a stand's key, or a key below a stand's image
/// folder, names: the first segment after `stands` or `stand-images`.
pub fn stand_of(key: &Path) -> Option<(u64, u64)> {
    let mut parts = key.parts().map(|p| p.as_ref().to_owned());
    parts.find(|p| p == "stands" || p == "stand-images")?;
    let s = parts.next()?;
    let (tenure, number) = s.split_once('-')?;
    let digits = |d: &str| d.len() == 20 && d.bytes().all(|b| b.is_ascii_digit());
    (digits(tenure) && digits(number))
        .then(|| Some((tenure.parse().ok()?, number.parse().ok()?)))
        .flatten()
}

/// The number an epoch or WAL key ends in (None for any other key).
pub fn numbered(key: &Path) -> Option<u64> {
    let last = key.filename()?;
    (last.len() == 20 && last.bytes().all(|b| b.is_ascii_digit()))
        .then(|| last.parse().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;
    use shared::offset::CHUNK_BYTES;

    #[test]
    fn a_stand_is_read_back_from_its_keys_and_sorts_by_tenure_then_number() {
        assert_eq!(stand_of(&partition_stand(3, 7, 12)), Some((7, 12)));
        assert_eq!(
            stand_of(&partition_stand_image(3, 7, 12, &[9; 16], 4)),
            Some((7, 12))
        );
        assert_eq!(stand_of(&partition_tenure(3, 7)), None);
        assert!(
            partition_stand(0, 1, 99).as_ref() < partition_stand(0, 2, 0).as_ref(),
            "a later tenure sorts after any number of an earlier one"
        );
    }

    #[test]
    fn keys_bind_path_and_incarnation() {
        let a = chunk("/v1/stream/a", "1-ab", Offset(CHUNK_BYTES));
        assert_eq!(
            a.as_ref().len(),
            "streams/".len() + 32 + "/1-ab/chunks/".len() + 16
        );
        assert!(a.as_ref().ends_with("/1-ab/chunks/0000000000400000"));
        assert_ne!(a, chunk("/v1/stream/b", "1-ab", Offset(CHUNK_BYTES)));
        assert_ne!(a, chunk("/v1/stream/a", "2-ab", Offset(CHUNK_BYTES)));
        assert_ne!(
            a,
            snapshot("/v1/stream/a", "1-ab", Offset(CHUNK_BYTES), "00")
        );
        // Long paths still give short keys.
        let long = "/".to_owned() + &"x".repeat(1000);
        assert!(chunk(&long, "1-ab", Offset(0)).as_ref().len() < 100);
    }

    #[test]
    fn numbered_keys_list_in_number_order_and_parse_back() {
        let keys: Vec<Path> = [0, 9, 10, 123_456_789, u64::MAX]
            .iter()
            .map(|&n| partition_wal_object(3, n))
            .collect();
        let mut sorted = keys.clone();
        sorted.sort_by(|a, b| a.as_ref().cmp(b.as_ref()));
        assert_eq!(keys, sorted);
        let back: Vec<u64> = keys.iter().filter_map(numbered).collect();
        assert_eq!(back, [0, 9, 10, 123_456_789, u64::MAX]);
        assert_eq!(numbered(&partition_epoch(3, 7)), Some(7));
        assert!(partition_wal_object(3, 1)
            .as_ref()
            .starts_with(partition_wal(3).as_ref()));
        assert_eq!(numbered(&Path::from("region/partitions/0003/wal/x")), None);
        assert_eq!(numbered(&partition_checkpoint(3, 42)), Some(42));
        let part = partition_image_part(3, 42, &[0xab; 16], 7);
        assert_eq!(image_number(&part), Some(42));
        assert!(part.as_ref().starts_with(partition_images(3).as_ref()));
        assert_eq!(numbered(&part), None);
    }

    #[test]
    fn chunks_of_an_incarnation_list_in_stream_order() {
        let keys: Vec<String> = (0..20)
            .map(|k| chunk("/s", "i", Offset(k * CHUNK_BYTES)).to_string())
            .collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
    }
}
