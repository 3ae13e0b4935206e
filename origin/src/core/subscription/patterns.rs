//! Which subscriptions' patterns may match a new stream, found without
//! looking at every pattern: each pattern is filed under its *full
//! prefix*, the subscription's root joined with the pattern's literal
//! segments before its first wildcard. Every stream a pattern can match
//! lies at or under its full prefix, so the candidates for a stream are
//! the patterns filed under the stream's path cut at each `/`: a create
//! costs one look-up per segment of its path plus the candidates' matches,
//! however many patterns other prefixes hold.
//!
//! Patterns that begin with a wildcard are filed under their root alone,
//! and a create under that root still tries each of them: they may all
//! match it.

use std::collections::HashMap;

use super::glob::Glob;

/// A subscription's name: its stream root and id.
pub type Key = (String, String);

/// The patterns of every subscription that has one, by full prefix.
#[derive(Default)]
pub struct Patterns {
    by_prefix: HashMap<String, HashMap<Key, Glob>>,
    /// Patterns under each root (for a walk of the roots' streams).
    roots: HashMap<String, usize>,
    count: usize,
}

/// The path a pattern's streams all lie at or under.
fn full_prefix(root: &str, glob: &Glob) -> String {
    let (literal, _) = glob.prefix();
    if literal.is_empty() {
        root.to_owned()
    } else {
        format!("{root}/{literal}")
    }
}

impl Patterns {
    /// Files `key`'s pattern (replacing one it had).
    pub fn insert(&mut self, key: &Key, glob: Glob) {
        self.remove(key, &glob);
        let bucket = self
            .by_prefix
            .entry(full_prefix(&key.0, &glob))
            .or_default();
        bucket.insert(key.clone(), glob);
        self.count += 1;
        *self.roots.entry(key.0.clone()).or_default() += 1;
    }

    /// Takes `key`'s pattern `glob` out (nothing if it was not filed).
    pub fn remove(&mut self, key: &Key, glob: &Glob) {
        let prefix = full_prefix(&key.0, glob);
        let Some(bucket) = self.by_prefix.get_mut(&prefix) else {
            return;
        };
        if bucket.remove(key).is_none() {
            return;
        }
        if bucket.is_empty() {
            self.by_prefix.remove(&prefix);
        }
        self.count -= 1;
        if let Some(n) = self.roots.get_mut(&key.0) {
            *n -= 1;
            if *n == 0 {
                self.roots.remove(&key.0);
            }
        }
    }

    /// Patterns filed.
    pub fn len(&self) -> usize {
        self.count
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// The roots that have patterns.
    pub fn roots(&self) -> impl Iterator<Item = &String> {
        self.roots.keys()
    }

    /// The subscriptions whose pattern matches the stream at the full
    /// `path`, each with the path relative to its root.
    pub fn matching(&self, path: &str) -> Vec<(Key, String)> {
        let mut found = Vec::new();
        let cuts = path
            .match_indices('/')
            .map(|(i, _)| i)
            .chain(std::iter::once(path.len()));
        for cut in cuts {
            let Some(bucket) = self.by_prefix.get(&path[..cut]) else {
                continue;
            };
            for (key, glob) in bucket {
                let Some(rel) = path
                    .strip_prefix(key.0.as_str())
                    .and_then(|r| r.strip_prefix('/'))
                else {
                    continue;
                };
                if glob.matches(rel) {
                    found.push((key.clone(), rel.to_owned()));
                }
            }
        }
        found
    }
}

#[cfg(test)]
#[path = "patterns_tests.rs"]
mod tests;
