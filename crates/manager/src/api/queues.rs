//! `/v1/queues`: every queue with its policy and load; admins create or change policies.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use berth_model::api::{QueueUpdate, QueueView};

use crate::auth::{Admin, Auth};
use crate::error::{ApiError, Json, Path};
use crate::manager::Manager;

/// Every queue: its policy, how many nodes serve it, and its pending and running jobs.
#[utoipa::path(get, path = "/v1/queues", tag = "queues",
    responses((status = 200, body = Vec<QueueView>), (status = 401, body = berth_model::api::ErrorBody)))]
pub async fn list(State(m): State<Arc<Manager>>, Auth(_user): Auth) -> axum::Json<Vec<QueueView>> {
    axum::Json(m.queues.views(&m.jobs).await)
}

/// Create a queue or change its policy (admin only). Keys left out keep their value; a new
/// queue starts from the defaults. The change is stored and survives restarts until the
/// queue's entry in the config file changes.
#[utoipa::path(put, path = "/v1/queues/{name}", request_body = QueueUpdate, tag = "queues",
    params(("name" = String, Path, description = "queue name")),
    responses((status = 200, body = QueueView, description = "changed"), (status = 201, body = QueueView, description = "created"),
        (status = 400, body = berth_model::api::ErrorBody), (status = 403, body = berth_model::api::ErrorBody)))]
pub async fn put(
    State(m): State<Arc<Manager>>,
    Admin(admin): Admin,
    Path(name): Path<String>,
    Json(update): Json<QueueUpdate>,
) -> Result<(StatusCode, axum::Json<QueueView>), ApiError> {
    let (q, existed) = m.queues.update(&name, &update).await?;
    m.nodes.reassign(&m.jobs, &m.queues.all()).await;
    tracing::info!(queue = %name, "queue policy changed through the API");
    let detail = serde_json::to_string(&update).unwrap_or_default();
    m.tenancy.audit(&admin.name, if existed { "queue.update" } else { "queue.create" }, &name, &detail).await;
    m.jobs.wake();
    let status = if existed { StatusCode::OK } else { StatusCode::CREATED };
    Ok((status, axum::Json(m.queues.view(&m.jobs, &q).await)))
}
