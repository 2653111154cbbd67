//! What makes a job a serving endpoint's replica (`endpoint.rs`): the endpoint and
//! revision it runs, set by the manager on the replica jobs it starts, and the app name its
//! server's port goes by. Apart from `endpoint.rs` so that the job spec can name it without
//! the two modules depending on each other.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The app name a replica's port has (`BERTH_APP_SERVE_PORT`, also `PORT`).
pub const REPLICA_APP: &str = "serve";

/// `1 replica`, `2 replicas`: a count of replicas as people read it.
pub fn replicas(n: impl Into<u64>) -> String {
    match n.into() {
        1 => "1 replica".to_string(),
        n => format!("{n} replicas"),
    }
}

/// Which endpoint a replica job belongs to (set by the manager, refused from users).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ReplicaOf {
    pub endpoint_id: i64,
    pub endpoint: String,
    /// The endpoint revision whose spec the replica runs.
    pub revision: u64,
}

#[cfg(test)]
mod tests {
    #[test]
    fn one_replica_is_singular() {
        assert_eq!(super::replicas(1u32), "1 replica");
        assert_eq!(super::replicas(0u32), "0 replicas");
        assert_eq!(super::replicas(2u32), "2 replicas");
    }
}
