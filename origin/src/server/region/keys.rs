//! The region's key store, as partition 0's owner keeps it in the bucket
//! (`region::auth_sync`).

use super::{Current, RegionOrigin};
use crate::http;

impl RegionOrigin {
    /// Copies the region's signing key and key store from the bucket into
    /// the data folder before a store opens (a claim's, a replica's), so
    /// keys and tokens made on another origin work there too; one copy at
    /// a time. The key store is not fetched while this origin serves
    /// partition 0: it holds the region's newest itself.
    pub(super) fn fetch_keys(
        &self,
    ) -> impl std::future::Future<Output = std::io::Result<()>> + Send + 'static {
        let objects = std::sync::Arc::clone(self.objects.get().expect("set before the loop"));
        let key_store = (!matches!(self.current(0), Current::Serving { .. }))
            .then(|| self.sharing.key_store.clone())
            .flatten();
        let (fetching, data) = (std::sync::Arc::clone(&self.fetching), self.data.clone());
        async move {
            let _one_at_a_time = fetching.lock().await;
            crate::region::auth_sync::fetch(&*objects, &data, key_store.as_deref()).await
        }
    }

    /// The owner of partition 0 (where the admin API lives) puts the key
    /// store in the bucket if it changed here (by the CLI on its machine;
    /// the admin API puts its own changes itself), then takes the
    /// bucket's if another origin put a newer one (an older owner's
    /// change that landed after this owner's claim read it).
    pub(super) async fn publish_keys(&self, state: &http::Shared) {
        let Some(keys) = &self.sharing.key_store else {
            return;
        };
        let published = tokio::time::timeout(self.patience(), keys.publish())
            .await
            .unwrap_or_else(|_| Err(std::io::Error::other("timed out")));
        let mut taken = matches!(
            published,
            Ok(crate::region::auth_sync::Published::Overtaken)
        );
        match published {
            Ok(crate::region::auth_sync::Published::Overtaken) => tracing::warn!(
                "the region's key store changed on another origin; a local change to it was dropped"
            ),
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "could not put the key store in the bucket; trying again")
            }
        }
        match tokio::time::timeout(self.patience(), keys.follow()).await {
            Ok(Ok(followed)) => taken |= followed,
            Ok(Err(e)) => tracing::warn!(error = %e, "could not read the key store in the bucket"),
            Err(_) => {}
        }
        if taken {
            if let Err(e) = state.auth.keys.reload_if_changed() {
                tracing::error!(error = %e, "could not reload the key store");
            }
        }
    }
}
