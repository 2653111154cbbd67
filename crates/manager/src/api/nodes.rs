//! `/v1/nodes`: list nodes, what ran on them over time, and drain/undrain one (admin only).

use std::sync::Arc;

use axum::extract::{Path, State};
use berth_model::api::{DrainRequest, NodeSegment, NodeTimelineQuery, NodeView};

use crate::auth::{Admin, Auth};
use crate::error::{ApiError, Query};
use crate::manager::Manager;

/// Every node with its state, capacity and use.
#[utoipa::path(get, path = "/v1/nodes", tag = "nodes", responses((status = 200, body = Vec<NodeView>)))]
pub async fn list(State(m): State<Arc<Manager>>, Auth(_user): Auth) -> axum::Json<Vec<NodeView>> {
    axum::Json(m.nodes.views(&m.jobs).await)
}

/// What ran on each node since a time, one segment per job and node, oldest first.
#[utoipa::path(get, path = "/v1/nodes/timeline", tag = "nodes", params(NodeTimelineQuery),
    responses((status = 200, body = Vec<NodeSegment>), (status = 400, body = berth_model::api::ErrorBody)))]
pub async fn timeline(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Query(q): Query<NodeTimelineQuery>,
) -> Result<axum::Json<Vec<NodeSegment>>, ApiError> {
    let now = m.clock.now();
    let since = now - jiff::SignedDuration::from_secs(crate::error::period("since", q.since.as_deref(), "1d", now)?);
    let rows = m.store.jobs_active_since(since).await?;
    let mut out = Vec::new();
    for r in rows {
        let Some(start) = r.started_at else { continue };
        let mine = user.can_see(r.user_id, &r.spec);
        let mut nodes = r.nodes.clone();
        nodes.dedup();
        for node in nodes {
            out.push(NodeSegment {
                node,
                job: mine.then_some(r.id),
                name: if mine { r.spec.name.clone() } else { None },
                user: mine.then(|| r.user.clone()),
                state: r.state,
                start,
                end: r.ended_at,
            });
        }
    }
    out.sort_by(|a, b| (a.start, &a.node).cmp(&(b.start, &b.node)));
    Ok(axum::Json(out))
}

/// Drain a node: running jobs finish, no new job starts there (admin only).
#[utoipa::path(post, path = "/v1/nodes/{name}/drain", tag = "nodes", request_body = Option<DrainRequest>,
    params(("name" = String, Path, description = "node name")),
    responses((status = 200, body = NodeView), (status = 403, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn drain(
    State(m): State<Arc<Manager>>,
    Admin(admin): Admin,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Result<axum::Json<NodeView>, ApiError> {
    // The body is optional: `curl -X POST .../drain` (no body, or a `null` one) drains with a
    // default reason. Whitespace alone is no JSON text: refused like any bad body (the fuzz
    // run found `\r` accepted).
    let reason = if body.is_empty() || body.trim_ascii() == b"null" {
        None
    } else {
        serde_json::from_slice::<crate::error::Object<DrainRequest>>(&body)
            .map_err(|e| ApiError::bad_request(format!("invalid drain request: {e}: send {{\"reason\": \"...\"}}")))?
            .0
            .reason
    };
    m.nodes.drain(&m.jobs, &name, reason.clone(), &admin.name).await?;
    m.tenancy.audit(&admin.name, "node.drain", &name, reason.as_deref().unwrap_or("")).await;
    view(&m, &name).await
}

/// Undrain a node: it takes new jobs again (admin only).
#[utoipa::path(post, path = "/v1/nodes/{name}/undrain", tag = "nodes",
    params(("name" = String, Path, description = "node name")),
    responses((status = 200, body = NodeView), (status = 403, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn undrain(
    State(m): State<Arc<Manager>>,
    Admin(admin): Admin,
    Path(name): Path<String>,
) -> Result<axum::Json<NodeView>, ApiError> {
    m.nodes.undrain(&m.jobs, &name, &admin.name).await?;
    m.tenancy.audit(&admin.name, "node.undrain", &name, "").await;
    view(&m, &name).await
}

async fn view(m: &Manager, name: &str) -> Result<axum::Json<NodeView>, ApiError> {
    m.nodes.view(&m.jobs, name).await.map(axum::Json).ok_or_else(|| ApiError::not_found(format!("no node `{name}`")))
}
