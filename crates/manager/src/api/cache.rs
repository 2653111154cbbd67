//! `/v1/cache/...`: the dataset cache's members as the manager knows them, and its buckets
//! (admin only), which the manager keeps and pushes to every cache node.

use std::sync::Arc;

use axum::extract::State;
use berth_model::api::{CacheBucket, CacheMemberView};

use crate::auth::{Admin, Auth};
use crate::error::{ApiError, Json, Path};
use crate::manager::Manager;

/// The cache nodes the agents reported, each `up` or `down`.
#[utoipa::path(get, path = "/v1/cache/members", tag = "cache", responses((status = 200, body = Vec<CacheMemberView>)))]
pub async fn members(State(m): State<Arc<Manager>>, _: Auth) -> axum::Json<Vec<CacheMemberView>> {
    let st = m.lock_state().await;
    axum::Json(m.cache_members.views(&st))
}

/// Every bucket's settings (admin only).
#[utoipa::path(get, path = "/v1/admin/cache/buckets", tag = "admin", responses((status = 200, body = Vec<CacheBucket>),
    (status = 403, body = berth_model::api::ErrorBody)))]
pub async fn buckets(State(m): State<Arc<Manager>>, _: Admin) -> axum::Json<Vec<CacheBucket>> {
    axum::Json(m.cache_members.buckets())
}

/// Create a bucket or replace its settings (admin only); every cache node gets it, including
/// nodes that join later.
#[utoipa::path(put, path = "/v1/admin/cache/buckets/{name}", tag = "admin", request_body = CacheBucket,
    params(("name" = String, Path, description = "bucket name")),
    responses((status = 200, body = CacheBucket), (status = 400, body = berth_model::api::ErrorBody),
        (status = 403, body = berth_model::api::ErrorBody)))]
pub async fn put_bucket(
    State(m): State<Arc<Manager>>,
    Admin(a): Admin,
    Path(name): Path<String>,
    Json(mut b): Json<CacheBucket>,
) -> Result<axum::Json<CacheBucket>, ApiError> {
    if !berth_model::api::valid_bucket_name(&name) {
        return Err(ApiError::bad_request(berth_model::api::bucket_name_error(&name)));
    }
    if let Some(p) = b.projects.iter().find(|p| !berth_model::valid_name(p)) {
        return Err(ApiError::bad_request(format!("`{p}` is not a project name: use letters, digits, `-`, `_`, `.`")));
    }
    b.name = name;
    m.cache_members.put_bucket(&*m.store, b.clone()).await?;
    let detail = serde_json::to_string(&b).unwrap_or_default();
    m.audit(&a.name, "cache.bucket.set", &b.name, &detail).await;
    Ok(axum::Json(b))
}
