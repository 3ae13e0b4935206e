//! The subscriptions this server holds, by name, with each account's
//! count kept as they come and go: a declaration checks its account's
//! bound in O(1), not by counting every subscription.

use std::collections::HashMap;
use std::sync::Arc;

use super::{Key, Slot};

#[derive(Default)]
pub(super) struct Table {
    slots: HashMap<Key, Arc<Slot>>,
    per_account: HashMap<String, usize>,
}

impl Table {
    pub fn get(&self, key: &Key) -> Option<&Arc<Slot>> {
        self.slots.get(key)
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Key, &Arc<Slot>)> {
        self.slots.iter()
    }

    pub fn keys(&self) -> impl Iterator<Item = &Key> {
        self.slots.keys()
    }

    /// Subscriptions of `account`.
    pub fn of_account(&self, account: &str) -> usize {
        self.per_account.get(account).copied().unwrap_or(0)
    }

    pub fn insert(&mut self, key: Key, slot: Arc<Slot>) {
        let account = slot.account.clone();
        if let Some(old) = self.slots.insert(key, slot) {
            self.forget(&old.account);
        }
        *self.per_account.entry(account).or_default() += 1;
    }

    /// Takes out `key`'s slot if it is `slot`.
    pub fn remove_if(&mut self, key: &Key, slot: &Arc<Slot>) {
        if self.slots.get(key).is_some_and(|s| Arc::ptr_eq(s, slot)) {
            self.slots.remove(key);
            self.forget(&slot.account);
        }
    }

    fn forget(&mut self, account: &str) {
        if let Some(n) = self.per_account.get_mut(account) {
            *n -= 1;
            if *n == 0 {
                self.per_account.remove(account);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(id: &str) -> Key {
        ("/r".to_owned(), id.to_owned())
    }

    #[test]
    fn each_accounts_count_follows_its_slots() {
        let mut t = Table::default();
        let a1 = Arc::new(Slot::new("a".into()));
        let a2 = Arc::new(Slot::new("a".into()));
        let b = Arc::new(Slot::new("b".into()));
        t.insert(key("1"), Arc::clone(&a1));
        t.insert(key("2"), Arc::clone(&a2));
        t.insert(key("3"), Arc::clone(&b));
        assert_eq!((t.len(), t.of_account("a"), t.of_account("b")), (3, 2, 1));
        // Another slot under the name is not taken out in its place.
        t.remove_if(&key("1"), &a2);
        assert_eq!(t.of_account("a"), 2);
        t.remove_if(&key("1"), &a1);
        t.remove_if(&key("3"), &b);
        assert_eq!((t.len(), t.of_account("a"), t.of_account("b")), (1, 1, 0));
        // A slot put in a name's place replaces its count.
        t.insert(key("2"), Arc::new(Slot::new("b".into())));
        assert_eq!((t.len(), t.of_account("a"), t.of_account("b")), (1, 0, 1));
    }
}
