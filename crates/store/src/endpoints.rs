//! What the manager keeps about serving endpoints (`berth serve`, issue 21): each endpoint's
//! spec, revision and the spec before its last update (for a rollback), the replica count it
//! wants now, where a rolling update stands, and the tokens that may call it (their sha256,
//! never the secret). The replicas themselves are jobs ([`berth_model::endpoint::ReplicaOf`]).
//! A supertrait of [`crate::Store`], like [`crate::Folders`].

use async_trait::async_trait;
use berth_model::UnixId;
use berth_model::endpoint::{EndpointSpec, Rollout};
use jiff::Timestamp;

use crate::Result;

/// One endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct EndpointRow {
    pub id: i64,
    pub name: String,
    pub owner_id: i64,
    /// The owner's user name.
    pub owner: String,
    /// The Unix user the manager's host vouched for at creation, if any.
    pub submitter: Option<UnixId>,
    pub spec: EndpointSpec,
    /// Grows with every new spec (a rolling update); 1 at creation.
    pub revision: u64,
    /// The spec before the last update, to roll back to.
    pub previous: Option<EndpointSpec>,
    /// Replicas wanted now (set by scaling or the autoscaler).
    pub desired: u32,
    pub rollout: Rollout,
    /// Why the last update rolled back, or what the endpoint waits for.
    pub message: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// One token that may call an endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndpointTokenRow {
    pub id: i64,
    pub endpoint_id: i64,
    pub label: String,
    /// The sha256 (hex) of the secret.
    pub hash: String,
    pub created_at: Timestamp,
}

/// The endpoints table and its tokens.
#[async_trait]
pub trait Endpoints: Send + Sync {
    /// A new endpoint at revision 1, its rollout done; `Duplicate` ("endpoint NAME already
    /// exists") when the name is taken.
    async fn create_endpoint(
        &self,
        name: &str,
        owner_id: i64,
        submitter: Option<UnixId>,
        spec: &EndpointSpec,
        desired: u32,
        at: Timestamp,
    ) -> Result<EndpointRow>;
    /// Every endpoint, by id.
    async fn endpoints(&self) -> Result<Vec<EndpointRow>>;
    /// The endpoint of this name.
    async fn endpoint(&self, name: &str) -> Result<Option<EndpointRow>>;
    /// Writes `spec`, `revision`, `previous`, `desired`, `rollout`, `message` and `updated_at`
    /// of the endpoint `row.id`; `NotFound` when there is none.
    async fn update_endpoint(&self, row: &EndpointRow) -> Result<()>;
    /// Removes the endpoint and its tokens in one transaction; `false` when there was none.
    async fn delete_endpoint(&self, id: i64) -> Result<bool>;
    /// Stores a token's hash for an endpoint; `NotFound` for an unknown endpoint, `Duplicate`
    /// for a hash already stored.
    async fn create_endpoint_token(
        &self,
        endpoint_id: i64,
        label: &str,
        hash: &str,
        at: Timestamp,
    ) -> Result<EndpointTokenRow>;
    /// The endpoint's tokens, by id.
    async fn endpoint_tokens(&self, endpoint_id: i64) -> Result<Vec<EndpointTokenRow>>;
    /// Every endpoint's tokens, by id (the manager's index of them, at start).
    async fn all_endpoint_tokens(&self) -> Result<Vec<EndpointTokenRow>>;
    /// Removes a token of the endpoint; `false` when it has none of that id.
    async fn delete_endpoint_token(&self, endpoint_id: i64, id: i64) -> Result<bool>;
}
