//! When each subscription next needs the engine without a request: its
//! lease running out, its retry coming due, or a wake waiting to be sent
//! ([`Subscription::due_at`](super::state::Subscription::due_at)). Kept in
//! time order, so a tick looks only at what is due, never at every
//! subscription: a tick costs O(due · log n), not O(n).
//!
//! An entry stays until its subscription's next change replaces it, so a
//! subscription that was due and could not move (its journal failing, its
//! send still running) is looked at again at every tick, as it was by a
//! walk of every subscription.

use std::collections::{BTreeSet, HashMap};

use super::patterns::Key;
use crate::core::Millis;

#[derive(Default)]
pub struct Deadlines {
    by_time: BTreeSet<(Millis, Key)>,
    at: HashMap<Key, Millis>,
}

impl Deadlines {
    /// `key` is next due at `at` (none: only a request or an append moves it).
    pub fn set(&mut self, key: &Key, at: Option<Millis>) {
        let before = self.at.get(key).copied();
        if before == at {
            return;
        }
        if let Some(t) = before {
            self.by_time.remove(&(t, key.clone()));
            self.at.remove(key);
        }
        if let Some(t) = at {
            self.by_time.insert((t, key.clone()));
            self.at.insert(key.clone(), t);
        }
    }

    /// The subscriptions due at `now`, soonest first.
    pub fn due(&self, now: Millis) -> Vec<Key> {
        self.by_time
            .iter()
            .take_while(|(t, _)| *t <= now)
            .map(|(_, k)| k.clone())
            .collect()
    }

    /// Subscriptions with a deadline.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.at.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.at.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(id: &str) -> Key {
        ("/r".to_owned(), id.to_owned())
    }

    #[test]
    fn only_what_is_due_is_answered_and_a_new_time_replaces_the_old() {
        let mut d = Deadlines::default();
        d.set(&k("a"), Some(30));
        d.set(&k("b"), Some(10));
        d.set(&k("c"), None);
        assert_eq!(d.len(), 2);
        assert_eq!(d.due(5), Vec::<Key>::new());
        assert_eq!(d.due(10), vec![k("b")]);
        assert_eq!(d.due(30), vec![k("b"), k("a")]);
        // Still due until changed.
        assert_eq!(d.due(30), vec![k("b"), k("a")]);
        d.set(&k("b"), Some(40));
        assert_eq!(d.due(30), vec![k("a")]);
        d.set(&k("a"), None);
        assert_eq!(d.due(100), vec![k("b")]);
        assert_eq!(d.len(), 1);
        d.set(&k("b"), None);
        assert!(d.is_empty());
    }
}
