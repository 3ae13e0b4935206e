//! Opening the object store a URL names, for the origin (which seals
//! into it) and the edge (which reads sealed chunks from it): one opener,
//! so both treat `file://` and `s3://` URLs, timeouts and retries alike.

use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::prefix::PrefixStore;
use object_store::ObjectStore;

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

/// Opens the store a URL names:
/// - `file:///abs/path`: a folder (created if missing);
/// - `s3://bucket[/prefix]`: S3 or an S3-compatible server, configured by the
///   usual `AWS_*` variables (`AWS_ENDPOINT_URL` and `AWS_ALLOW_HTTP=true` for
///   a local server such as s3s-fs).
pub fn open(url: &str) -> Result<Arc<dyn ObjectStore>, OpenError> {
    open_with(url, &[])
}

/// [`open`], with S3 settings that win over the environment (names as in
/// `object_store::aws::AmazonS3ConfigKey`, e.g. `aws_endpoint`,
/// `aws_access_key_id`, `aws_allow_http`).
pub fn open_with(
    url: &str,
    s3_settings: &[(&str, &str)],
) -> Result<Arc<dyn ObjectStore>, OpenError> {
    if let Some(path) = url.strip_prefix("file://") {
        std::fs::create_dir_all(path)?;
        return Ok(Arc::new(LocalFileSystem::new_with_prefix(path)?));
    }
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(OpenError::Scheme(url.to_owned()));
        }
        // Fail within seconds rather than minutes: a read that needs an
        // unreachable chunk answers 503 + Retry-After, and the sealer retries
        // on its own schedule.
        let retry = object_store::RetryConfig {
            max_retries: 3,
            retry_timeout: std::time::Duration::from_secs(10),
            ..Default::default()
        };
        use object_store::aws::AmazonS3ConfigKey as Key;
        use object_store::ClientConfigKey as Client;
        let mut builder = object_store::aws::AmazonS3Builder::from_env()
            .with_bucket_name(bucket)
            .with_retry(retry)
            .with_config(Key::Client(Client::ConnectTimeout), "3s")
            .with_config(Key::Client(Client::Timeout), "30s");
        for (key, value) in s3_settings {
            let key = key.parse().map_err(OpenError::Store)?;
            builder = builder.with_config(key, *value);
        }
        let s3 = builder.build()?;
        let prefix = prefix.trim_matches('/');
        return Ok(if prefix.is_empty() {
            Arc::new(s3)
        } else {
            Arc::new(PrefixStore::new(s3, prefix))
        });
    }
    Err(OpenError::Scheme(url.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_unknown_schemes() {
        assert!(matches!(open("gs://b"), Err(OpenError::Scheme(_))));
        assert!(matches!(open("s3://"), Err(OpenError::Scheme(_))));
        assert!(matches!(open("/plain/path"), Err(OpenError::Scheme(_))));
    }
}
