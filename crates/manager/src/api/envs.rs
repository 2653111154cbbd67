//! `GET /v1/envs` and `DELETE /v1/envs/{key}`: the nodes' caches of Python environments (what
//! their agents last reported, `AgentMessage::Envs`), and removing one (docs/environments.md).
//!
//! Any user may list them (keys, Python versions, sizes: nothing of a job's), since seeing
//! that an environment is cached tells a user their job will start at once. Only admins may
//! remove one: it slows every job that uses it down to a rebuild.

use std::sync::Arc;

use axum::extract::{Path, State};
use berth_model::environment::{EnvRemoved, NodeEnvs, valid_key_prefix};

use crate::auth::{Admin, Auth};
use crate::error::ApiError;
use crate::manager::Manager;

/// Each connected node's cached Python environments, most recently used first.
#[utoipa::path(get, path = "/v1/envs", tag = "nodes", responses((status = 200, body = Vec<NodeEnvs>)))]
pub async fn list(State(m): State<Arc<Manager>>, Auth(_user): Auth) -> axum::Json<Vec<NodeEnvs>> {
    axum::Json(m.nodes.envs(&m.jobs).await)
}

/// Delete a cached environment on every node that has it (admin only); refused while a kernel
/// uses it. `key` may be a prefix of at least 4 digits, as `berth env ls` shows them.
#[utoipa::path(delete, path = "/v1/envs/{key}", tag = "admin",
    params(("key" = String, Path, description = "the environment's key, or a prefix of it (4 to 64 hex digits)")),
    responses((status = 200, body = EnvRemoved), (status = 403, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody), (status = 409, body = berth_model::api::ErrorBody)))]
pub async fn remove(
    State(m): State<Arc<Manager>>,
    Admin(admin): Admin,
    Path(key): Path<String>,
) -> Result<axum::Json<EnvRemoved>, ApiError> {
    if !valid_key_prefix(&key) {
        return Err(ApiError::bad_request(format!(
            "invalid environment key `{key}`: give 4 to 64 lowercase hex digits, as `berth env ls` shows"
        )));
    }
    let removed = m.nodes.remove_env(&m.jobs, &key).await?;
    m.tenancy.audit(&admin.name, "env.remove", &removed.key, &removed.nodes.join(",")).await;
    Ok(axum::Json(removed))
}
