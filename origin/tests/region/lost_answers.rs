//! Fault injection as a wrapper (house style): an object store whose next
//! create-only puts reach the store but answer as if the connection broke,
//! as a timeout after the server wrote the object does.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMode, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

pub struct LostAnswers {
    inner: Arc<dyn ObjectStore>,
    to_lose: AtomicUsize,
    lost: AtomicUsize,
}

impl LostAnswers {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        LostAnswers {
            inner,
            to_lose: AtomicUsize::new(0),
            lost: AtomicUsize::new(0),
        }
    }

    /// The next `n` creates land (or not, as the store decides) and answer
    /// an error that says nothing of the outcome.
    pub fn lose_next(&self, n: usize) {
        self.to_lose.store(n, Ordering::SeqCst);
    }

    pub fn lost(&self) -> usize {
        self.lost.load(Ordering::SeqCst)
    }
}

impl fmt::Display for LostAnswers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "LostAnswers({})", self.inner)
    }
}

impl fmt::Debug for LostAnswers {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[async_trait::async_trait]
impl ObjectStore for LostAnswers {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
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
                store: "LostAnswers",
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
