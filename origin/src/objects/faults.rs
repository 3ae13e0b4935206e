//! Fault injection as a wrapper store, not switches in the code that uses
//! the store:
//! - a wait before every put: object storage farther away, for benchmarks
//!   of object durability (`--object-put-delay`; S3 Express answers a
//!   small put in about 10 ms, S3 Standard in about 50 ms, SeaweedFS on
//!   loopback in 2);
//! - lost answers: the next create-only puts reach the store but answer an
//!   error that says nothing of the outcome, as a timeout after the server
//!   wrote the object does (the tests of settling by read-back).

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

pub struct Faults {
    inner: Arc<dyn ObjectStore>,
    put_delay: Duration,
    to_lose: AtomicUsize,
    lost: AtomicUsize,
}

impl Faults {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Faults {
        Faults {
            inner,
            put_delay: Duration::ZERO,
            to_lose: AtomicUsize::new(0),
            lost: AtomicUsize::new(0),
        }
    }

    /// Every put waits this long first.
    pub fn with_put_delay(mut self, delay: Duration) -> Faults {
        self.put_delay = delay;
        self
    }

    /// `store` with its puts delayed by `delay` (`--object-put-delay`: a
    /// far bucket, for benchmarks); itself when `delay` is zero.
    pub fn delaying_puts(store: Arc<dyn ObjectStore>, delay: Duration) -> Arc<dyn ObjectStore> {
        if delay.is_zero() {
            return store;
        }
        Arc::new(Faults::new(store).with_put_delay(delay))
    }

    /// The next `n` create-only puts reach the store and answer an error
    /// that says nothing of their outcome.
    pub fn lose_next(&self, n: usize) {
        self.to_lose.store(n, Ordering::SeqCst);
    }

    /// Answers lost so far.
    pub fn lost(&self) -> usize {
        self.lost.load(Ordering::SeqCst)
    }
}

impl fmt::Display for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Faults({})", self.inner)
    }
}

impl fmt::Debug for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Faults {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        if !self.put_delay.is_zero() {
            tokio::time::sleep(self.put_delay).await;
        }
        let create = matches!(opts.mode, PutMode::Create);
        let result = self.inner.put_opts(location, payload, opts).await;
        if create
            && self
                .to_lose
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok()
        {
            self.lost.fetch_add(1, Ordering::SeqCst);
            return Err(object_store::Error::Generic {
                store: "Faults",
                source: "the connection broke before the answer".into(),
            });
        }
        result
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.inner.get_opts(location, options).await
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
