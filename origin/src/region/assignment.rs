//! How the partitions spread over the live origins: pure, no I/O.
//!
//! Every origin computes the same spread from the same set of live
//! origins, with no coordination: partitions in order, each to the origin
//! that ranks it highest (rendezvous hashing: FNV-1a of the origin's name
//! and the partition) among those not yet holding `⌈P/N⌉`. So no origin
//! gets more than `⌈P/N⌉`, and a partition stays where it is while the
//! set of live origins does not change. When views differ for a moment
//! (an origin just started or just died), the origins act on different
//! spreads: the cost is a hand-off that is later undone, never safety,
//! which the epoch claims alone provide (`fence`).

/// The origin each partition goes to, among `live` (any order; each
/// name once). Empty `live`: nobody.
pub fn spread<'a>(partitions: u32, live: &[&'a str]) -> Vec<Option<&'a str>> {
    if live.is_empty() {
        return vec![None; partitions as usize];
    }
    let n = live.len() as u64;
    let cap = u64::from(partitions).div_ceil(n);
    let mut held = vec![0u64; live.len()];
    (0..partitions)
        .map(|p| {
            let best = (0..live.len())
                .filter(|&i| held[i] < cap)
                .max_by_key(|&i| (score(live[i], p), std::cmp::Reverse(live[i])))
                .expect("the caps leave room for every partition");
            held[best] += 1;
            Some(live[best])
        })
        .collect()
}

/// The rank origin `node` gives partition `p`.
fn score(node: &str, p: u32) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in node.bytes().chain(p.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // FNV's low bits mix poorly for short inputs; fold the high ones in.
    hash ^ (hash >> 29)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(spread: &[Option<&str>], live: &[&str]) -> Vec<usize> {
        live.iter()
            .map(|n| spread.iter().filter(|t| **t == Some(*n)).count())
            .collect()
    }

    #[test]
    fn no_origin_holds_more_than_its_share() {
        let names: Vec<String> = (0..9).map(|i| format!("origin-{i}")).collect();
        for p in [1u32, 2, 3, 4, 7, 8, 16, 64, 100] {
            for n in 1..=names.len() {
                let live: Vec<&str> = names[..n].iter().map(String::as_str).collect();
                let s = spread(p, &live);
                assert!(s.iter().all(Option::is_some));
                let cap = (p as usize).div_ceil(n);
                let c = counts(&s, &live);
                assert!(c.iter().all(|&k| k <= cap), "p {p} n {n}: {c:?}");
                assert_eq!(c.iter().sum::<usize>(), p as usize);
            }
        }
    }

    #[test]
    fn every_origin_computes_the_same_spread_in_any_order() {
        let a = spread(16, &["a", "b", "c"]);
        assert_eq!(a, spread(16, &["c", "a", "b"]));
        assert_eq!(a, spread(16, &["b", "c", "a"]));
    }

    #[test]
    fn one_origin_more_moves_only_part_of_the_partitions() {
        let before = spread(64, &["a", "b", "c"]);
        let after = spread(64, &["a", "b", "c", "d"]);
        let moved = before.iter().zip(&after).filter(|(x, y)| x != y).count();
        // d takes its 16; the rest mostly stay.
        assert!((16..=32).contains(&moved), "{moved} moved");
        assert_eq!(counts(&after, &["d"]), vec![16]);
    }

    #[test]
    fn nobody_live_assigns_nobody() {
        assert_eq!(spread(3, &[]), vec![None, None, None]);
    }
}
