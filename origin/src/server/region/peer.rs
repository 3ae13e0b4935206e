//! The region's peer key as this origin holds it (`region::peer_key`):
//! read from the bucket once, and checked on requests that carry one.

use std::sync::Arc;

use super::RegionOrigin;

impl RegionOrigin {
    /// The region's peer key, read from the bucket (or made there) the
    /// first time it is asked for; None while the bucket does not answer.
    pub(super) async fn peer_key(&self) -> Option<Arc<str>> {
        if let Some(key) = self.peer_key.get() {
            return Some(Arc::clone(key));
        }
        let objects = self.objects.get()?;
        let load = crate::region::peer_key::load(&**objects);
        match tokio::time::timeout(self.patience(), load).await {
            Ok(Ok(key)) => Some(Arc::clone(self.peer_key.get_or_init(|| Arc::from(key)))),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not read the region's peer key");
                None
            }
            Err(_) => None,
        }
    }

    /// Whether a request is another origin's of the region: it carries the
    /// peer key. None when it carries one but the key cannot be read yet.
    pub(super) fn is_peer(&self, sent: Option<axum::http::HeaderValue>) -> Option<bool> {
        let Some(sent) = sent else {
            return Some(false);
        };
        // Read at start and before any claim: a request never waits for it.
        let key = self.peer_key.get()?;
        Some(crate::region::peer_key::matches(key, sent.as_bytes()))
    }
}
