//! What the manager keeps about the dataset cache (docs/cache.md): the cache node each agent
//! reported (`berth agent --cache-url`, `--cache-weight`), what an admin decided about it
//! (its weight, its removal) and the buckets' settings. The manager pushes both to
//! every cache node, so the member list survives a manager restart (a node not yet
//! reconnected stays in the list, as down) and a cache node joining later learns the buckets
//! created before it. A supertrait of [`crate::Store`], like [`crate::Tenancy`].

use async_trait::async_trait;
use berth_model::api::BucketPlacement;
use jiff::Timestamp;

use crate::Result;

/// A node's cache node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheNodeRow {
    /// The berth node (agent) name.
    pub node: String,
    /// The base URL other cache nodes and clients reach it at (the last one its agent
    /// reported, also while removed).
    pub url: String,
    /// The weight its agent reported (`berth agent --cache-weight`).
    pub reported_weight: u32,
    /// The weight an admin set (`berth cache member set`); wins over the reported one.
    pub weight: Option<u32>,
    /// Removed by an admin (`berth cache member remove`): out of the member list whatever its
    /// agent reports, until `berth cache member add`.
    pub removed: bool,
    /// Join sequence number: given when its URL is first seen (a new node, or a node whose
    /// URL changed), from a counter that never goes back, so no two members ever share one;
    /// a member keeps it across restarts, removal and re-adding (a removed member keeps its
    /// place in the cache nodes' table, so coming back moves exactly its own keys).
    pub seq: u64,
    pub updated_at: Timestamp,
}

impl CacheNodeRow {
    /// The weight it is pushed with: the admin's, else its agent's.
    pub fn effective_weight(&self) -> u32 {
        self.weight.unwrap_or(self.reported_weight)
    }
}

/// A bucket's settings, as `berth cache bucket create` set them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheBucketRow {
    pub name: String,
    pub public: bool,
    /// Bytes per cache node; `None`: a fair share.
    pub quota: Option<u64>,
    pub projects: Vec<String>,
    /// The shared directory its datasets are copied from (`berth cache bucket create
    /// --origin`); `None`: no datasets.
    pub origin: Option<String>,
    /// One Maglev-routed copy (`spread`) or a copy per cache node (`node`).
    pub placement: BucketPlacement,
    pub updated_at: Timestamp,
}

#[async_trait]
pub trait CacheState: Send + Sync {
    /// Records the cache URL and weight `node`'s agent reported; a new node, or a URL other
    /// than the one known, gets the next `seq`. Keeps the admin's weight and removal.
    /// Returns the row as stored.
    async fn put_cache_node(&self, node: &str, url: &str, weight: u32, at: Timestamp) -> Result<CacheNodeRow>;
    /// Every node's cache, by node name.
    async fn cache_nodes(&self) -> Result<Vec<CacheNodeRow>>;
    /// Sets (or, with `None`, clears) the admin's weight of `node`'s cache; `None` when no
    /// such node reported a cache.
    async fn set_cache_node_weight(
        &self,
        node: &str,
        weight: Option<u32>,
        at: Timestamp,
    ) -> Result<Option<CacheNodeRow>>;
    /// Removes `node`'s cache from the members for good, or adds it back (same `seq`); no
    /// change when it already is so. `None` when no such node reported a cache.
    async fn set_cache_node_removed(&self, node: &str, removed: bool, at: Timestamp) -> Result<Option<CacheNodeRow>>;
    /// Creates or replaces a bucket's settings (and forgets that a bucket of that name was
    /// deleted).
    async fn put_cache_bucket(&self, bucket: &CacheBucketRow) -> Result<()>;
    /// Every bucket, by name.
    async fn cache_buckets(&self) -> Result<Vec<CacheBucketRow>>;
    /// Deletes a bucket's settings and records its name as deleted (in one transaction);
    /// `false` when there was no such bucket.
    async fn delete_cache_bucket(&self, name: &str, at: Timestamp) -> Result<bool>;
    /// The names of deleted buckets not created again, by name.
    async fn deleted_cache_buckets(&self) -> Result<Vec<String>>;
}
