//! Entries served by a pool of tasks, each driving at most so many: the
//! lot's parked answers (`crate::lot`) and the edge's detached SSE readers
//! (its hub writers). One pool's shape, written once.
//!
//! An entry joins through a [`Door`]: the first with room, or a new one
//! whose task the caller starts. The door counts its entries and those on
//! their way in (under the pool's lock when it grows), so a task that
//! finds its count at zero can leave without losing one that was joining
//! ([`Shards::retire`]); a task that ends any other way (a panic) leaves
//! through its [`Leaving`] guard, and the entries still on their way in
//! go with it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::wakes::Woken;

/// The doors of one pool.
pub struct Shards<J> {
    doors: Arc<Mutex<Vec<Arc<Door<J>>>>>,
}

/// One task's way in.
pub struct Door<J> {
    woken: Arc<Woken>,
    joins: Mutex<Vec<J>>,
    /// Its entries and those on their way in.
    count: AtomicUsize,
}

impl<J> Default for Shards<J> {
    fn default() -> Self {
        Shards {
            doors: Arc::new(Mutex::new(Vec::new())),
        }
    }
}

impl<J> Shards<J> {
    /// Hands `join` to a door with fewer than `max` entries, or to a new
    /// one, whose task `start` starts (under the pool's lock).
    pub fn join(&self, max: usize, join: J, start: impl FnOnce(Arc<Door<J>>)) {
        let mut doors = self.doors.lock();
        let door = match doors
            .iter()
            .find(|d| d.count.load(Ordering::Relaxed) < max.max(1))
        {
            Some(d) => Arc::clone(d),
            None => {
                let door = Arc::new(Door {
                    woken: Arc::new(Woken::default()),
                    joins: Mutex::new(Vec::new()),
                    count: AtomicUsize::new(0),
                });
                doors.push(Arc::clone(&door));
                start(Arc::clone(&door));
                door
            }
        };
        door.count.fetch_add(1, Ordering::Relaxed);
        door.joins.lock().push(join);
        door.woken.notify();
    }

    /// Takes `door` out if it has no entry and none on its way in (then
    /// none can join it any more).
    pub fn retire(&self, door: &Arc<Door<J>>) -> bool {
        if door.count.load(Ordering::Relaxed) != 0 {
            return false;
        }
        let mut doors = self.doors.lock();
        if door.count.load(Ordering::Relaxed) != 0 {
            return false;
        }
        doors.retain(|d| !Arc::ptr_eq(d, door));
        true
    }

    /// Takes `door` out now: none joins it from here on.
    pub fn close(&self, door: &Arc<Door<J>>) {
        self.doors.lock().retain(|d| !Arc::ptr_eq(d, door));
    }

    /// A guard that takes `door` out when its task ends, however it ends.
    pub fn leaving(&self, door: &Arc<Door<J>>) -> Leaving<J> {
        Leaving {
            doors: Arc::clone(&self.doors),
            door: Arc::clone(door),
        }
    }
}

impl<J> Door<J> {
    /// Its task's wakes (`crate::wakes`).
    pub fn woken(&self) -> &Arc<Woken> {
        &self.woken
    }

    /// The entries that joined since the last take.
    pub fn take_joins(&self) -> Vec<J> {
        std::mem::take(&mut *self.joins.lock())
    }

    /// One of its entries is gone.
    pub fn left(&self) {
        self.count.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Takes its door out of the pool when dropped, and lets go of the entries
/// still on their way in (once the lock is let go: dropping one may run
/// code of its own).
pub struct Leaving<J> {
    doors: Arc<Mutex<Vec<Arc<Door<J>>>>>,
    door: Arc<Door<J>>,
}

impl<J> Drop for Leaving<J> {
    fn drop(&mut self) {
        self.doors.lock().retain(|d| !Arc::ptr_eq(d, &self.door));
        let joins = self.door.take_joins();
        self.door.count.fetch_sub(joins.len(), Ordering::Relaxed);
        drop(joins);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_fill_a_door_before_the_next_and_an_empty_one_retires() {
        let shards: Shards<u32> = Shards::default();
        let mut started = Vec::new();
        for i in 0..5 {
            shards.join(2, i, |d| started.push(d));
        }
        assert_eq!(started.len(), 3, "2 + 2 + 1");
        assert_eq!(started[0].take_joins(), vec![0, 1]);
        assert!(!shards.retire(&started[0]), "two entries");
        started[0].left();
        started[0].left();
        assert!(shards.retire(&started[0]));
        // Its place goes to the next join that finds no room elsewhere.
        shards.join(2, 5, |d| started.push(d));
        assert_eq!(started[2].take_joins(), vec![4, 5]);
        // A task that ends otherwise lets go of what was on its way in.
        drop(shards.leaving(&started[1]));
        assert!(started[1].take_joins().is_empty());
        assert_eq!(shards.doors.lock().len(), 1);
    }
}
