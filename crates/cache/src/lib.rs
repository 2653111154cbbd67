//! berth's dataset cache (docs/cache.md): an HTTP object cache on every node's local disk.
//!
//! - [`maglev`]: which node owns a key (consistent hashing with a fixed, versioned hash).
//! - [`store`]: one node's objects on disk (crash-safe PUTs, index rebuilt at start).
//! - [`hot`]: the small objects most read, kept in memory in front of the disk.
//! - [`files`]: the files of big objects kept open, for their GETs.
//! - [`tier`]: what [`hot`] and [`files`] share: an epoch-checked SIEVE tier bounded by weight.
//! - [`evict`] and [`sieve`]: SIEVE eviction per bucket, quotas and fair shares.
//! - [`token`]: HMAC-signed tokens nodes verify locally.
//! - [`private`]: the cache's files readable by the daemon only (0600/0700).
//! - [`server`]: the HTTP API (objects, forwarding to the owner, members, buckets, metrics).
//! - [`sim`]: eviction policies replayed on traces, for the figures in docs/perf.md.

pub mod bucket;
pub mod evict;
pub mod files;
pub mod header;
pub mod hot;
pub mod maglev;
pub mod metrics;
pub mod private;
pub mod server;
pub mod sieve;
pub mod sim;
pub mod store;
pub mod tier;
pub mod token;

use std::path::Path;

use serde::{Deserialize, Serialize};

pub use bucket::BucketConfig;
pub use maglev::{Maglev, Member};
pub use store::Store;

/// Counters and usage of one bucket on one node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BucketStats {
    pub bucket: String,
    pub objects: u64,
    pub bytes: u64,
    pub quota: Option<u64>,
    pub hits: u64,
    pub misses: u64,
    pub evictions: u64,
    pub evicted_bytes: u64,
    pub puts: u64,
    pub put_bytes: u64,
}

/// What can go wrong in the store; each maps to one HTTP status.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{0}")]
    BadRequest(String),
    #[error("bucket `{0}` does not exist: create it with `berth cache bucket create {0}`")]
    NoBucket(String),
    #[error("{0}")]
    TooLarge(String),
    #[error("{0}")]
    Corrupt(String),
    #[error("{path}: {source}")]
    Io { path: String, source: std::io::Error },
    #[error(
        "cannot make {path} readable by the cache daemon only ({source}): run the cache as the user owning its data dir, or fix its owner"
    )]
    Private { path: String, source: std::io::Error },
}

impl StoreError {
    pub fn io(path: &Path, source: std::io::Error) -> StoreError {
        StoreError::Io { path: path.display().to_string(), source }
    }
}
