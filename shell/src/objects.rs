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
    #[error("{0}: the S3 endpoint must be an http:// or https:// URL with a host, not {1:?} (unset it for AWS itself)")]
    Endpoint(String, String),
}

/// The names the S3 endpoint is read from, in the environment and in the
/// settings (`object_store` takes each).
const ENDPOINT_NAMES: [&str; 2] = ["aws_endpoint_url", "aws_endpoint"];

/// Refuses an S3 endpoint without a scheme and host (an empty
/// `AWS_ENDPOINT_URL`, say): `object_store` would take it and panic at the
/// first request it signs.
fn check_endpoint(source: &str, value: &str) -> Result<(), OpenError> {
    let fits = value.parse::<http::Uri>().is_ok_and(|u| {
        matches!(u.scheme_str(), Some("http" | "https"))
            && u.authority().is_some_and(|a| !a.host().is_empty())
    });
    if fits {
        Ok(())
    } else {
        Err(OpenError::Endpoint(source.to_owned(), value.to_owned()))
    }
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
        for name in ENDPOINT_NAMES {
            let var = name.to_ascii_uppercase();
            if let Some(value) = std::env::var_os(&var) {
                check_endpoint(&var, &value.to_string_lossy())?;
            }
        }
        for (key, value) in s3_settings {
            if ENDPOINT_NAMES.contains(&key.to_ascii_lowercase().as_str()) {
                check_endpoint(key, value)?;
            }
        }
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
    fn refuses_an_endpoint_without_a_scheme_and_host() {
        for bad in ["", "localhost:9000", "ftp://h", "http://"] {
            assert!(
                matches!(
                    open_with("s3://b", &[("aws_endpoint", bad)]),
                    Err(OpenError::Endpoint(..))
                ),
                "{bad:?}"
            );
        }
        for good in ["http://127.0.0.1:9000", "https://s3.example.com/"] {
            assert!(check_endpoint("aws_endpoint", good).is_ok(), "{good}");
        }
    }

    #[test]
    fn refuses_unknown_schemes() {
        assert!(matches!(open("gs://b"), Err(OpenError::Scheme(_))));
        assert!(matches!(open("s3://"), Err(OpenError::Scheme(_))));
        assert!(matches!(open("/plain/path"), Err(OpenError::Scheme(_))));
    }
}
