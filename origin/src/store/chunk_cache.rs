//! Reads of sealed chunks from object storage, through a bounded cache.
//!
//! Once a chunk is sealed and the seal is durable, its bytes leave the local
//! stream file; reads of that range come from here. The cache is weighted by
//! bytes (`--chunk-cache`), so memory stays bounded however many streams are
//! read, and concurrent misses for the same chunk make one fetch (moka's
//! `try_get_with` elects one loader; the others wait for its result).
//! Keys are (stream id, chunk start): ids are never reused, so a stream
//! deleted and created again never meets its predecessor's chunks.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use moka::future::Cache;
use shared::offset::{Offset, CHUNK_BYTES};

use crate::metrics::Metrics;
use crate::objects::instrumented::Objects;
use crate::objects::keys;

pub struct ChunkCache {
    pub objects: Objects,
    cache: Cache<(u64, u64), Bytes>,
    metrics: Arc<Metrics>,
}

/// A sealed chunk could not be fetched (object storage down or slow).
#[derive(Debug, thiserror::Error)]
#[error("a sealed chunk cannot be read from object storage: {0}")]
pub struct ChunkCacheUnavailable(pub String);

impl ChunkCache {
    pub fn new(objects: Objects, cache_bytes: u64, metrics: Arc<Metrics>) -> Self {
        let cache = Cache::builder()
            .max_capacity(cache_bytes)
            .weigher(|_k: &(u64, u64), v: &Bytes| u32::try_from(v.len()).unwrap_or(u32::MAX))
            .build();
        ChunkCache {
            objects,
            cache,
            metrics,
        }
    }

    /// The whole sealed chunk that starts at `start`.
    async fn chunk(
        &self,
        id: u64,
        path: &str,
        incarnation: &str,
        start: u64,
    ) -> Result<Bytes, ChunkCacheUnavailable> {
        let key = keys::chunk(path, incarnation, Offset(start));
        let mut loaded = false;
        let got = self
            .cache
            .try_get_with((id, start), async {
                loaded = true;
                self.objects.get(&key).await
            })
            .await
            .map_err(|e| ChunkCacheUnavailable(e.to_string()));
        self.metrics.chunk_cache(!loaded);
        got
    }

    /// Sealed bytes `[start, end)` of a stream, cut from its chunks; one
    /// chunk's range is a slice of the cached chunk (no copy).
    pub async fn read(
        &self,
        id: u64,
        path: &str,
        incarnation: &str,
        start: u64,
        end: u64,
    ) -> Result<Bytes, ChunkCacheUnavailable> {
        // The chunks a read spans are fetched at once (a read of up to
        // 8 MiB spans at most three).
        let starts: Vec<u64> = (start - start % CHUNK_BYTES..end)
            .step_by(CHUNK_BYTES as usize)
            .collect();
        let chunks = futures::future::try_join_all(
            starts.iter().map(|&s| self.chunk(id, path, incarnation, s)),
        )
        .await?;
        let mut parts = Vec::with_capacity(chunks.len());
        for (chunk_start, chunk) in starts.into_iter().zip(chunks) {
            let from = start.saturating_sub(chunk_start) as usize;
            let to = ((end - chunk_start) as usize).min(chunk.len());
            if from >= to {
                return Err(ChunkCacheUnavailable(format!(
                    "the chunk at {chunk_start} holds {} bytes, fewer than the read needs",
                    chunk.len()
                )));
            }
            parts.push(chunk.slice(from..to));
        }
        Ok(match parts.len() {
            1 => parts.pop().expect("one part"),
            _ => {
                let mut out = BytesMut::with_capacity((end - start) as usize);
                for p in parts {
                    out.extend_from_slice(&p);
                }
                out.freeze()
            }
        })
    }

    /// Bytes the cache holds now.
    pub fn cached_bytes(&self) -> u64 {
        self.cache.weighted_size()
    }
}
