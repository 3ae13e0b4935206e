//! The operations the origin needs from object storage, counted and timed.
//!
//! A thin struct over `Arc<dyn ObjectStore>` rather than a full trait
//! re-implementation: the origin needs a few calls, and each one records its
//! count, bytes and errors, and its duration by operation and outcome
//! (`ds_origin_object_store_request_duration_seconds`).

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};

/// Counters of object-store traffic.
#[derive(Debug, Default)]
pub struct ObjectStats {
    pub puts: AtomicU64,
    pub put_bytes: AtomicU64,
    pub gets: AtomicU64,
    pub get_bytes: AtomicU64,
    pub deletes: AtomicU64,
    pub errors: AtomicU64,
}

/// What a create-only put found.
#[derive(Debug, PartialEq, Eq)]
pub enum PutOutcome {
    Created,
    /// The key already held an object (written by an earlier attempt).
    Existed,
}

#[derive(Clone)]
pub struct Objects {
    store: Arc<dyn ObjectStore>,
    pub stats: Arc<ObjectStats>,
    timings: Option<Arc<crate::metrics::Timings>>,
}

impl Objects {
    pub fn new(store: Arc<dyn ObjectStore>) -> Self {
        Objects {
            store,
            stats: Arc::default(),
            timings: None,
        }
    }

    /// Times every request into `timings`.
    pub fn timed(mut self, timings: Arc<crate::metrics::Timings>) -> Self {
        self.timings = Some(timings);
        self
    }

    /// Runs one request, timed as `operation` (outcome `ok`, `exists` for a
    /// create that found the key taken, `not_found`, or `error`).
    async fn timed_call<T>(
        &self,
        operation: &str,
        call: impl std::future::Future<Output = object_store::Result<T>>,
    ) -> object_store::Result<T> {
        let started = tokio::time::Instant::now();
        let r = call.await;
        if let Some(t) = &self.timings {
            let outcome = match &r {
                Ok(_) => "ok",
                Err(object_store::Error::AlreadyExists { .. }) => "exists",
                Err(object_store::Error::NotFound { .. }) => "not_found",
                Err(_) => "error",
            };
            t.object_request(operation, outcome, started.elapsed());
        }
        r
    }

    fn count_err<T>(&self, r: object_store::Result<T>) -> object_store::Result<T> {
        if r.is_err() {
            self.stats.errors.fetch_add(1, Relaxed);
        }
        r
    }

    /// Writes `bytes` at `key` only if nothing is there: a sealed object is
    /// written once and never changes.
    pub async fn put_new(&self, key: &Path, bytes: Bytes) -> object_store::Result<PutOutcome> {
        let len = bytes.len() as u64;
        let opts = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match self
            .timed_call(
                "put_new",
                self.store
                    .put_opts(key, PutPayload::from_bytes(bytes), opts),
            )
            .await
        {
            Ok(_) => {
                self.stats.puts.fetch_add(1, Relaxed);
                self.stats.put_bytes.fetch_add(len, Relaxed);
                Ok(PutOutcome::Created)
            }
            Err(object_store::Error::AlreadyExists { .. }) => Ok(PutOutcome::Existed),
            Err(e) => self.count_err(Err(e)),
        }
    }

    pub async fn get(&self, key: &Path) -> object_store::Result<Bytes> {
        let r = self
            .timed_call("get", async { self.store.get(key).await?.bytes().await })
            .await;
        if let Ok(b) = &r {
            self.stats.gets.fetch_add(1, Relaxed);
            self.stats.get_bytes.fetch_add(b.len() as u64, Relaxed);
        }
        self.count_err(r)
    }

    pub async fn get_range(&self, key: &Path, range: Range<u64>) -> object_store::Result<Bytes> {
        let r = self
            .timed_call("get_range", self.store.get_range(key, range))
            .await;
        if let Ok(b) = &r {
            self.stats.gets.fetch_add(1, Relaxed);
            self.stats.get_bytes.fetch_add(b.len() as u64, Relaxed);
        }
        self.count_err(r)
    }

    /// Deletes an object; one that is not there counts as deleted.
    pub async fn delete(&self, key: &Path) -> object_store::Result<()> {
        let r = match self.timed_call("delete", self.store.delete(key)).await {
            Err(object_store::Error::NotFound { .. }) => Ok(()),
            other => other,
        };
        if r.is_ok() {
            self.stats.deletes.fetch_add(1, Relaxed);
        }
        self.count_err(r)
    }

    /// The objects under `prefix` (their keys, sizes and times).
    pub async fn list(&self, prefix: &Path) -> object_store::Result<Vec<object_store::ObjectMeta>> {
        use futures::TryStreamExt;
        let r = self
            .timed_call("list", self.store.list(Some(prefix)).try_collect())
            .await;
        self.count_err(r)
    }

    /// Deletes every object under `prefix`.
    pub async fn delete_prefix(&self, prefix: &Path) -> object_store::Result<()> {
        use futures::TryStreamExt;
        let keys: Vec<Path> = self
            .store
            .list(Some(prefix))
            .map_ok(|m| m.location)
            .try_collect()
            .await?;
        for key in keys {
            self.delete(&key).await?;
        }
        Ok(())
    }

    /// Writes an object whose key names its content (a snapshot's key holds
    /// its digest), so writing it again writes the same bytes.
    pub async fn put(&self, key: &Path, bytes: Bytes) -> object_store::Result<()> {
        let len = bytes.len() as u64;
        let r = self
            .timed_call("put", self.store.put(key, PutPayload::from_bytes(bytes)))
            .await;
        if r.is_ok() {
            self.stats.puts.fetch_add(1, Relaxed);
            self.stats.put_bytes.fetch_add(len, Relaxed);
        }
        self.count_err(r.map(|_| ()))
    }

    /// An object's bytes as a stream (all, or `range`), with its size.
    pub async fn get_stream(
        &self,
        key: &Path,
        range: Option<Range<u64>>,
    ) -> object_store::Result<futures::stream::BoxStream<'static, object_store::Result<Bytes>>>
    {
        let opts = object_store::GetOptions {
            range: range.map(object_store::GetRange::Bounded),
            ..Default::default()
        };
        let r = self
            .timed_call("get_stream", self.store.get_opts(key, opts))
            .await;
        match r {
            Ok(got) => {
                self.stats.gets.fetch_add(1, Relaxed);
                self.stats
                    .get_bytes
                    .fetch_add(got.range.end - got.range.start, Relaxed);
                Ok(got.into_stream())
            }
            Err(e) => self.count_err(Err(e)),
        }
    }
}
