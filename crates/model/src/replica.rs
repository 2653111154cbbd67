//! What makes a job a serving endpoint's replica (`endpoint.rs`): the endpoint and
//! revision it runs, set by the manager on the replica jobs it starts, and the app name its
//! server's port goes by. Apart from `endpoint.rs` so that the job spec can name it without
//! the two modules depending on each other.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The app name a replica's port has (`BERTH_APP_SERVE_PORT`, also `PORT`).
pub const REPLICA_APP: &str = "serve";

/// Which endpoint a replica job belongs to (set by the manager, refused from users).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReplicaOf {
    pub endpoint_id: i64,
    pub endpoint: String,
    /// The endpoint revision whose spec the replica runs.
    pub revision: u64,
}
