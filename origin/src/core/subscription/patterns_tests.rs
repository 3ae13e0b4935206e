use proptest::prelude::*;

use super::{Key, Patterns};
use crate::core::subscription::glob::Glob;

fn key(root: &str, id: &str) -> Key {
    (root.to_owned(), id.to_owned())
}

fn sorted(mut v: Vec<(Key, String)>) -> Vec<(Key, String)> {
    v.sort();
    v
}

#[test]
fn a_create_finds_the_patterns_that_match_it_under_any_root() {
    let mut p = Patterns::default();
    p.insert(&key("/v1/stream", "a"), Glob::parse("orders/*").unwrap());
    p.insert(&key("/v1/stream", "b"), Glob::parse("**").unwrap());
    p.insert(&key("/v1/stream/orders", "c"), Glob::parse("*").unwrap());
    p.insert(&key("/v1/stream", "d"), Glob::parse("users/*").unwrap());
    p.insert(&key("/v1/stream", "e"), Glob::parse("orders/eu").unwrap());
    assert_eq!(p.len(), 5);
    let got = sorted(p.matching("/v1/stream/orders/eu"));
    assert_eq!(
        got,
        vec![
            (key("/v1/stream", "a"), "orders/eu".to_owned()),
            (key("/v1/stream", "b"), "orders/eu".to_owned()),
            (key("/v1/stream", "e"), "orders/eu".to_owned()),
            (key("/v1/stream/orders", "c"), "eu".to_owned()),
        ]
    );
    assert!(p.matching("/v2/x").is_empty());
    // A prefix that ends inside a segment is no prefix.
    assert_eq!(
        sorted(p.matching("/v1/stream/ordersx/eu")),
        vec![(key("/v1/stream", "b"), "ordersx/eu".to_owned())]
    );
}

#[test]
fn removing_a_pattern_forgets_it_and_its_root() {
    let mut p = Patterns::default();
    let g = Glob::parse("a/**").unwrap();
    p.insert(&key("/r", "x"), g.clone());
    // Filed again: still one.
    p.insert(&key("/r", "x"), g.clone());
    assert_eq!(p.len(), 1);
    assert_eq!(p.matching("/r/a").len(), 1, "** matches no segment too");
    p.remove(&key("/r", "y"), &g);
    assert_eq!(p.len(), 1, "another key's removal changes nothing");
    p.remove(&key("/r", "x"), &g);
    assert!(p.is_empty());
    assert_eq!(p.roots().count(), 0);
    assert!(p.matching("/r/a/b").is_empty());
}

fn segment() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("a".to_owned()),
        Just("b".to_owned()),
        Just("c".to_owned())
    ]
}

fn pattern_segment() -> impl Strategy<Value = String> {
    prop_oneof![segment(), Just("*".to_owned()), Just("**".to_owned())]
}

proptest! {
    /// The index finds exactly what trying every pattern finds.
    #[test]
    fn the_index_finds_what_a_walk_of_every_pattern_finds(
        subs in prop::collection::vec(
            (prop::collection::vec(segment(), 0..3), prop::collection::vec(pattern_segment(), 1..4)),
            0..12,
        ),
        path in prop::collection::vec(segment(), 1..6),
    ) {
        let mut p = Patterns::default();
        let mut all = Vec::new();
        for (i, (root, pattern)) in subs.iter().enumerate() {
            let root = format!("/s{}", root.iter().map(|s| format!("/{s}")).collect::<String>());
            let glob = Glob::parse(&pattern.join("/")).unwrap();
            let k = key(&root, &i.to_string());
            p.insert(&k, glob.clone());
            all.push((k, glob));
        }
        let path = format!("/s/{}", path.join("/"));
        let walked: Vec<(Key, String)> = all
            .iter()
            .filter_map(|(k, g)| {
                let rel = path.strip_prefix(k.0.as_str())?.strip_prefix('/')?;
                g.matches(rel).then(|| (k.clone(), rel.to_owned()))
            })
            .collect();
        prop_assert_eq!(sorted(p.matching(&path)), sorted(walked));
    }
}
