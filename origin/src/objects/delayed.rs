//! A store whose puts wait a fixed time first: object storage farther
//! away, for benchmarks of object durability (`--object-put-delay`; S3
//! Express answers a small put in about 10 ms, S3 Standard in about 50 ms,
//! SeaweedFS on loopback in 2). Fault injection as a wrapper, not a switch
//! in the code that uses the store.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};

pub struct Delayed {
    inner: Arc<dyn ObjectStore>,
    put_delay: Duration,
}

impl Delayed {
    pub fn wrap(inner: Arc<dyn ObjectStore>, put_delay: Duration) -> Arc<dyn ObjectStore> {
        Arc::new(Delayed { inner, put_delay })
    }
}

impl fmt::Display for Delayed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Delayed({:?}, {})", self.put_delay, self.inner)
    }
}

impl fmt::Debug for Delayed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

#[async_trait::async_trait]
impl ObjectStore for Delayed {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        tokio::time::sleep(self.put_delay).await;
        self.inner.put_opts(location, payload, opts).await
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
