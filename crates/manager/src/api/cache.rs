//! `/v1/cache/...`: the dataset cache's members as the manager knows them, and what admins
//! change about them (weight, removal) and its buckets (admin only), which the manager keeps
//! and pushes to every cache node.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use berth_model::api::{CacheBucket, CacheMemberUpdate, CacheMemberView, cache_weight_error};

use crate::auth::{Admin, Auth};
use crate::error::{ApiError, Json, Path};
use crate::manager::Manager;

/// The cache nodes the agents reported, each `up`, `down` or `removed`, with its weight.
#[utoipa::path(get, path = "/v1/cache/members", tag = "cache", responses((status = 200, body = Vec<CacheMemberView>)))]
pub async fn members(State(m): State<Arc<Manager>>, _: Auth) -> axum::Json<Vec<CacheMemberView>> {
    axum::Json(m.cache_members.views(&m.jobs).await)
}

/// Every bucket's settings (admin only).
#[utoipa::path(get, path = "/v1/admin/cache/buckets", tag = "admin", responses((status = 200, body = Vec<CacheBucket>),
    (status = 403, body = berth_model::api::ErrorBody)))]
pub async fn buckets(State(m): State<Arc<Manager>>, _: Admin) -> axum::Json<Vec<CacheBucket>> {
    axum::Json(m.cache_members.buckets())
}

/// Create a bucket or replace its settings (admin only); every cache node gets it, including
/// nodes that join later. 400: a bad name, project, or `origin` (not an absolute directory
/// path without `.`, `..`, `//` or a trailing `/`), or an unknown `placement`.
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
    if let Some(e) = b.origin.as_deref().and_then(berth_model::api::bucket_origin_error) {
        return Err(ApiError::bad_request(e));
    }
    b.name = name;
    m.cache_members.put_bucket(&*m.store, b.clone()).await?;
    let detail = serde_json::to_string(&b).unwrap_or_default();
    m.tenancy.audit(&a.name, "cache.bucket.set", &b.name, &detail).await;
    Ok(axum::Json(b))
}

/// Delete a bucket (admin only): every cache node deletes it with all its objects.
#[utoipa::path(delete, path = "/v1/admin/cache/buckets/{name}", tag = "admin",
    params(("name" = String, Path, description = "bucket name")),
    responses((status = 204), (status = 403, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn delete_bucket(
    State(m): State<Arc<Manager>>,
    Admin(a): Admin,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    if !m.cache_members.delete_bucket(&*m.store, &name).await? {
        return Err(ApiError::not_found(format!("no bucket `{name}`: `berth cache bucket list` shows the buckets")));
    }
    m.tenancy.audit(&a.name, "cache.bucket.delete", &name, "").await;
    Ok(StatusCode::NO_CONTENT)
}

fn no_member(node: &str) -> ApiError {
    ApiError::not_found(format!(
        "no cache member `{node}`: `berth cache members` lists the nodes whose agents reported a cache (berth agent --cache-url)"
    ))
}

async fn member_view(m: &Manager, node: &str) -> Result<axum::Json<CacheMemberView>, ApiError> {
    m.cache_members.view(&m.jobs, node).await.map(axum::Json).ok_or_else(|| no_member(node))
}

/// Set a cache member's weight (admin only): it wins over the weight its agent reports;
/// `null` goes back to that.
#[utoipa::path(put, path = "/v1/admin/cache/members/{node}", tag = "admin", request_body = CacheMemberUpdate,
    params(("node" = String, Path, description = "the berth node whose cache it is")),
    responses((status = 200, body = CacheMemberView), (status = 400, body = berth_model::api::ErrorBody),
        (status = 403, body = berth_model::api::ErrorBody), (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn put_member(
    State(m): State<Arc<Manager>>,
    Admin(a): Admin,
    Path(node): Path<String>,
    Json(u): Json<CacheMemberUpdate>,
) -> Result<axum::Json<CacheMemberView>, ApiError> {
    if let Some(e) = u.weight.and_then(|w| cache_weight_error(w.into())) {
        return Err(ApiError::bad_request(e));
    }
    if !m.cache_members.set_weight(&*m.store, &node, u.weight).await? {
        return Err(no_member(&node));
    }
    let detail = serde_json::to_string(&u).unwrap_or_default();
    m.tenancy.audit(&a.name, "cache.member.set", &node, &detail).await;
    member_view(&m, &node).await
}

/// Remove a node's cache from the members for good (admin only): its agent reporting it
/// again does not bring it back; `POST .../add` does.
#[utoipa::path(delete, path = "/v1/admin/cache/members/{node}", tag = "admin",
    params(("node" = String, Path, description = "the berth node whose cache it is")),
    responses((status = 200, body = CacheMemberView), (status = 403, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn remove_member(
    State(m): State<Arc<Manager>>,
    Admin(a): Admin,
    Path(node): Path<String>,
) -> Result<axum::Json<CacheMemberView>, ApiError> {
    set_removed(&m, &a.name, &node, true).await
}

/// Add a removed node's cache back to the members (admin only), at the URL its agent last
/// reported, as the newest member.
#[utoipa::path(post, path = "/v1/admin/cache/members/{node}/add", tag = "admin",
    params(("node" = String, Path, description = "the berth node whose cache it is")),
    responses((status = 200, body = CacheMemberView), (status = 403, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn add_member(
    State(m): State<Arc<Manager>>,
    Admin(a): Admin,
    Path(node): Path<String>,
) -> Result<axum::Json<CacheMemberView>, ApiError> {
    set_removed(&m, &a.name, &node, false).await
}

async fn set_removed(
    m: &Manager,
    admin: &str,
    node: &str,
    removed: bool,
) -> Result<axum::Json<CacheMemberView>, ApiError> {
    if !m.cache_members.set_removed(&*m.store, node, removed).await? {
        return Err(no_member(node));
    }
    m.tenancy.audit(admin, if removed { "cache.member.remove" } else { "cache.member.add" }, node, "").await;
    member_view(m, node).await
}
