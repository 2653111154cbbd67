//! `GET /v1/envs` and `DELETE /v1/envs/{key}`: the nodes' caches of Python environments (what
//! their agents last reported, `AgentMessage::Envs`), and removing one (docs/environments.md).
//!
//! Any user may list them (keys, Python versions, sizes: nothing of a job's), since seeing
//! that an environment is cached tells a user their job will start at once. Only admins may
//! remove one: it slows every job that uses it down to a rebuild.

use std::sync::Arc;

use axum::extract::{Path, State};
use berth_model::environment::{EnvRemoved, NodeEnvs, valid_key_prefix};
use berth_model::protocol::ManagerMessage;

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
    let removed = {
        let mut st = m.jobs.lock().await;
        let mut full: Vec<&str> = st
            .nodes()
            .values()
            .filter(|n| n.ready)
            .flat_map(|n| n.envs.iter().map(|e| e.key.as_str()).filter(|k| k.starts_with(&key)))
            .collect();
        full.sort();
        full.dedup();
        let full = match full.as_slice() {
            [] => return Err(ApiError::not_found(format!("no node has environment {key}: see `berth env ls`"))),
            [one] => one.to_string(),
            _ => return Err(ApiError::bad_request(format!("{key} names several environments: give more of the key"))),
        };
        let busy: Vec<String> = st
            .nodes()
            .iter()
            .filter_map(|(name, n)| {
                let e = n.envs.iter().find(|e| e.key == full && e.in_use > 0)?;
                Some(format!("{} kernels on {name}", e.in_use))
            })
            .collect();
        if !busy.is_empty() {
            return Err(ApiError::conflict(format!(
                "environment {} is in use by {}: remove it once those jobs ended",
                full.get(..12).unwrap_or(&full),
                busy.join(", ")
            )));
        }
        let mut nodes = Vec::new();
        for (name, n) in st.nodes_mut().filter(|(_, n)| n.ready) {
            let before = n.envs.len();
            // Gone from listings at once; the agent's next report confirms it.
            n.envs.retain(|e| e.key != full);
            if n.envs.len() != before {
                nodes.push(name.clone());
            }
        }
        for name in &nodes {
            st.send(name, ManagerMessage::RemoveEnv { key: full.clone() });
        }
        EnvRemoved { key: full, nodes }
    };
    m.tenancy.audit(&admin.name, "env.remove", &removed.key, &removed.nodes.join(",")).await;
    Ok(axum::Json(removed))
}
