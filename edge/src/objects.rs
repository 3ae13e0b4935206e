//! The origin's bucket, read directly: a chunk cache miss for a sealed
//! chunk is filled from the object the origin sealed, without a request to
//! the origin. Keys come from `shared::object_keys`, the layout the origin
//! writes. Only reads; a missing object (not sealed yet) is not an error.

use std::sync::Arc;

use bytes::Bytes;
use object_store::local::LocalFileSystem;
use object_store::path::Path;
use object_store::prefix::PrefixStore;
use object_store::{ObjectStore, ObjectStoreExt};

use crate::metrics::{self, Metrics};

/// Why an object-store URL could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("unsupported object store URL {0:?}: use file:///path or s3://bucket[/prefix]")]
    Scheme(String),
    #[error("object store: {0}")]
    Store(#[from] object_store::Error),
    #[error("creating the local object folder: {0}")]
    Io(#[from] std::io::Error),
}

/// Opens the store a URL names: `file:///abs/path`, or `s3://bucket[/prefix]`
/// configured by the usual `AWS_*` variables (as on the origin).
pub fn open(url: &str) -> Result<Arc<dyn ObjectStore>, OpenError> {
    if let Some(path) = url.strip_prefix("file://") {
        std::fs::create_dir_all(path)?;
        return Ok(Arc::new(LocalFileSystem::new_with_prefix(path)?));
    }
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(OpenError::Scheme(url.to_owned()));
        }
        let s3 = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .build()?;
        let prefix = prefix.trim_matches('/');
        if prefix.is_empty() {
            return Ok(Arc::new(s3));
        }
        return Ok(Arc::new(PrefixStore::new(s3, prefix)));
    }
    Err(OpenError::Scheme(url.to_owned()))
}

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
        let got = match self.store.get(&Path::from(key)).await {
            Ok(r) => r.bytes().await,
            Err(e) => Err(e),
        };
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
