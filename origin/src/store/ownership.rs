//! Who this store answers for: with object durability, whether it still
//! owns its partition (fenced, stopped, or vouched for by the bucket:
//! `region::vouch`), its epoch, and how far its commits are acknowledged.

use super::{Store, StoreError};

impl Store {
    /// With object durability: every WAL number below this is acknowledged
    /// (or was replayed when the store claimed its partition).
    pub fn acknowledged_below(&self) -> Option<u64> {
        self.acknowledged
            .as_ref()
            .map(|a| a.load(std::sync::atomic::Ordering::Acquire))
    }

    /// With object durability, before an answer made from this store's
    /// state alone (a refusal found before the writer, a
    /// `consistency=leader` read): waits until the bucket shows that no
    /// newer owner claimed the partition since this call
    /// (`region::vouch`). A store found superseded is fenced from then on
    /// (the region stops serving from it). Without object durability one
    /// origin holds every stream: nothing to wait for.
    pub async fn vouch(&self) -> Result<(), StoreError> {
        let (Some(vouch), Some((timeout, _))) = (&self.vouch, &self.object_wal) else {
            return Ok(());
        };
        // Its writer stopped (fenced, or a put failed): nothing to look at.
        if self.is_stopped() {
            return Err(self.gone());
        }
        match tokio::time::timeout(*timeout, vouch.confirm()).await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(crate::region::vouch::Unvouched::Superseded)) => {
                self.fenced
                    .store(true, std::sync::atomic::Ordering::Release);
                Err(StoreError::Fenced)
            }
            Ok(Err(crate::region::vouch::Unvouched::Gone)) => Err(StoreError::ShuttingDown),
            Err(_) => Err(StoreError::OwnershipUnconfirmed),
        }
    }

    /// Whether a newer owner took this store's partition over (it then
    /// writes nothing more; every write answers 503).
    pub fn is_fenced(&self) -> bool {
        self.fenced.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Whether the writer stopped (fenced, a WAL put that failed, or shut
    /// down): nothing more is acknowledged.
    pub fn is_stopped(&self) -> bool {
        self.is_fenced() || self.writer.lock().as_ref().is_none_or(|h| h.is_finished())
    }

    /// With object durability, the epoch this store claimed its partition at.
    pub fn epoch(&self) -> Option<u64> {
        self.epoch
    }

    /// Why the writer is not there: fenced, or stopping.
    pub(super) fn gone(&self) -> StoreError {
        if self.is_fenced() {
            StoreError::Fenced
        } else {
            StoreError::ShuttingDown
        }
    }
}
