//! The administrators' routes that are not tenancy: join tokens for nodes, store backups
//! and purges, and the dataset cache's buckets and members as the manager keeps them.

use berth_model::api::{CacheBucket, CacheMemberUpdate, CacheMemberView, JoinTokenCreated, PurgeRequest, PurgeResult};
use reqwest::Method;

use crate::client::encode_path_segment as seg;
use crate::{Client, Error};

impl Client {
    /// A token a new node joins the cluster with (`berth agent --join-token`).
    pub async fn create_join_token(&self) -> Result<JoinTokenCreated, Error> {
        self.json(self.request(Method::POST, "/v1/admin/join-tokens")).await
    }

    /// A consistent copy of the manager's store, taken while it runs: the answer, whose body
    /// the caller streams to a file.
    pub async fn backup(&self) -> Result<reqwest::Response, Error> {
        self.send(self.request(Method::POST, "/v1/admin/backup")).await
    }

    /// Archives the finished jobs that ended before `req.older_than`.
    pub async fn purge_store(&self, req: &PurgeRequest) -> Result<PurgeResult, Error> {
        self.json(self.request(Method::POST, "/v1/admin/store/purge").json(req)).await
    }

    /// The dataset cache's buckets as the manager keeps them.
    pub async fn cache_buckets(&self) -> Result<Vec<CacheBucket>, Error> {
        self.json(self.request(Method::GET, "/v1/admin/cache/buckets")).await
    }

    /// Creates or changes bucket `bucket.name`; the manager pushes it to every cache node.
    pub async fn put_cache_bucket(&self, bucket: &CacheBucket) -> Result<CacheBucket, Error> {
        let path = format!("/v1/admin/cache/buckets/{}", seg(&bucket.name));
        self.json(self.request(Method::PUT, &path).json(bucket)).await
    }

    /// Deletes bucket `name` (and, on every cache node, its objects).
    pub async fn delete_cache_bucket(&self, name: &str) -> Result<(), Error> {
        let path = format!("/v1/admin/cache/buckets/{}", seg(name));
        self.send(self.request(Method::DELETE, &path)).await.map(|_| ())
    }

    /// The cache nodes the manager knows, up or not.
    pub async fn cache_members(&self) -> Result<Vec<CacheMemberView>, Error> {
        self.json(self.request(Method::GET, "/v1/cache/members")).await
    }

    /// Changes the cache member of node `node` (its weight).
    pub async fn update_cache_member(&self, node: &str, update: &CacheMemberUpdate) -> Result<CacheMemberView, Error> {
        let path = format!("/v1/admin/cache/members/{}", seg(node));
        self.json(self.request(Method::PUT, &path).json(update)).await
    }

    /// Takes node `node`'s cache out of the routing list (its cache node keeps running).
    pub async fn remove_cache_member(&self, node: &str) -> Result<CacheMemberView, Error> {
        self.json(self.request(Method::DELETE, &format!("/v1/admin/cache/members/{}", seg(node)))).await
    }

    /// Puts node `node`'s cache back in the routing list.
    pub async fn add_cache_member(&self, node: &str) -> Result<CacheMemberView, Error> {
        self.json(self.request(Method::POST, &format!("/v1/admin/cache/members/{}/add", seg(node)))).await
    }
}
