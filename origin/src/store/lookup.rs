//! Finding streams: one by its path (the registry, a hash map every
//! request asks), or many in path order (the ordered index beside it, for
//! listings, prefixes and the region's own streams). Reads only: what
//! changes them is the publisher's.

use std::sync::Arc;

use super::{Store, StoreError, StreamView};

impl Store {
    /// The stream at `path`, unless it does not exist, has expired or was
    /// deleted (soft-deleted ones included: see [`Store::find`]).
    pub fn get(&self, path: &str) -> Option<Arc<StreamView>> {
        self.find(path).ok()
    }

    /// The stream at `path`, or why there is none: `SoftDeleted` for a
    /// stream deleted while forks still read it (410), `NotFound` else.
    pub fn find(&self, path: &str) -> Result<Arc<StreamView>, StoreError> {
        let view = self
            .registry
            .read()
            .get(path)
            .cloned()
            .ok_or(StoreError::NotFound)?;
        if view.is_soft_deleted() {
            return Err(StoreError::SoftDeleted);
        }
        if view.is_expired(self.clock.now_ms()) {
            return Err(StoreError::NotFound);
        }
        Ok(view)
    }

    /// Every one of the region's own streams (under
    /// `shared::partition::HIDDEN`) whose path starts with `prefix`,
    /// soft-deleted ones included: a walk of those alone, in path order.
    pub fn region_streams_under(&self, prefix: &str) -> Vec<Arc<StreamView>> {
        debug_assert!(shared::partition::is_hidden(prefix));
        self.ordered
            .read()
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(p, _)| p.starts_with(prefix))
            .map(|(_, v)| Arc::clone(v))
            .collect()
    }

    /// Streams in path order from `from` on (excluded: a cursor; included:
    /// a prefix), each given to `visit` under the index's read lock until
    /// it answers false: a page's walk costs what it looks at, whatever the
    /// stream count. `visit` must be quick (the publisher waits on the
    /// lock to register new streams).
    pub fn walk_ordered(
        &self,
        from: std::ops::Bound<&str>,
        mut visit: impl FnMut(&Arc<StreamView>) -> bool,
    ) {
        let ordered = self.ordered.read();
        for (_, view) in ordered.range::<str, _>((from, std::ops::Bound::Unbounded)) {
            if !visit(view) {
                break;
            }
        }
    }

    /// Every live stream whose path starts with `prefix`: a walk of the
    /// range of the ordered index under its read lock (a subscription's
    /// pattern is matched against the streams that exist when it is made).
    pub fn streams_under(&self, prefix: &str) -> Vec<Arc<StreamView>> {
        let now = self.clock.now_ms();
        let mut found = Vec::new();
        self.walk_ordered(std::ops::Bound::Included(prefix), |v| {
            if !v.path.starts_with(prefix) {
                return false;
            }
            if !v.is_soft_deleted() && !v.is_expired(now) {
                found.push(Arc::clone(v));
            }
            true
        });
        found
    }

    pub fn stream_count(&self) -> usize {
        self.registry.read().len()
    }
}
