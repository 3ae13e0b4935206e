//! The origin's bucket, read directly: a chunk cache miss for a sealed
//! chunk is filled from the object the origin sealed, without a request to
//! the origin. Keys come from `shared::object_keys`, the layout the origin
//! writes. Only reads; a missing object (not sealed yet) is not an error.

use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::metrics::{self, Metrics};

/// Opening a URL is the shell's (one opener for origin and edge).
pub use shell::objects::{open, OpenError};

pub struct ChunkObjects {
    store: Arc<dyn ObjectStore>,
    metrics: Arc<Metrics>,
}

impl ChunkObjects {
    pub fn new(store: Arc<dyn ObjectStore>, metrics: Arc<Metrics>) -> ChunkObjects {
        ChunkObjects { store, metrics }
    }

    /// The object at `key`, or `None` when it is missing or unreadable (the
    /// caller then asks the origin).
    pub async fn get(&self, key: &str) -> Option<Bytes> {
        self.metrics.upstream(metrics::Upstream::Object);
        let sent = tokio::time::Instant::now();
        let got = match self.store.get(&Path::from(key)).await {
            Ok(r) => r.bytes().await,
            Err(e) => Err(e),
        };
        self.metrics
            .upstream_took(metrics::Upstream::Object, sent.elapsed());
        match got {
            Ok(b) => Some(b),
            Err(object_store::Error::NotFound { .. }) => None,
            Err(e) => {
                self.metrics.upstream_error();
                tracing::warn!(%key, error = %e, "reading a sealed chunk failed");
                None
            }
        }
    }
}
