//! What the manager keeps about the dataset cache (DESIGN.md §10): the cache node each agent
//! reported (`berth agent --cache-url`) and the buckets' settings. The manager pushes both to
//! every cache node, so the member list survives a manager restart (a node not yet
//! reconnected stays in the list, as down) and a cache node joining later learns the buckets
//! created before it. A supertrait of [`crate::Store`], like [`crate::Tenancy`].

use async_trait::async_trait;
use jiff::Timestamp;

use crate::Result;

/// A node's cache node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheNodeRow {
    /// The berth node (agent) name.
    pub node: String,
    /// The base URL other cache nodes and clients reach it at.
    pub url: String,
    pub updated_at: Timestamp,
}

/// A bucket's settings, as `berth cache bucket create` set them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheBucketRow {
    pub name: String,
    pub public: bool,
    /// Bytes per cache node; `None`: a fair share.
    pub quota: Option<u64>,
    pub projects: Vec<String>,
    pub updated_at: Timestamp,
}

#[async_trait]
pub trait CacheState: Send + Sync {
    /// Records (or replaces) the cache URL of `node`.
    async fn put_cache_node(&self, node: &str, url: &str, at: Timestamp) -> Result<()>;
    /// Every node's cache, by node name.
    async fn cache_nodes(&self) -> Result<Vec<CacheNodeRow>>;
    /// Creates or replaces a bucket's settings.
    async fn put_cache_bucket(&self, bucket: &CacheBucketRow) -> Result<()>;
    /// Every bucket, by name.
    async fn cache_buckets(&self) -> Result<Vec<CacheBucketRow>>;
}
