//! `/v1/folders`: data folders (create, list, show, remove, quota, shares). Files in them are
//! in `folder_files.rs`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use berth_model::folder::{CreateFolder, FolderListQuery, FolderQuery, FolderRef, FolderView, ShareFolder};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::auth::Auth;
use crate::error::{ApiError, Json, Path, Query};
use crate::folders::{Folders, qualified, view};
use crate::identity::User;
use crate::manager::Manager;

/// `PUT /v1/folders/{name}/quota`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FolderQuota {
    /// Bytes; `None` lifts the quota.
    pub quota_bytes: Option<u64>,
}

/// The folder `name` (of `?project=`) for `user`.
pub(crate) fn reference(name: &str, q: &FolderQuery) -> Result<FolderRef, ApiError> {
    let r = match &q.project {
        Some(p) => format!("{p}/{name}"),
        None => name.to_string(),
    };
    r.parse().map_err(|e: berth_model::SpecError| ApiError::bad_request(e.0))
}

/// Make a folder (yours, or a project's you are a member of).
#[utoipa::path(post, path = "/v1/folders", tag = "folders", request_body = CreateFolder,
    responses((status = 201, body = FolderView), (status = 400, body = berth_model::api::ErrorBody),
        (status = 403, body = berth_model::api::ErrorBody), (status = 404, body = berth_model::api::ErrorBody),
        (status = 409, body = berth_model::api::ErrorBody)))]
pub async fn create(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Json(req): Json<CreateFolder>,
) -> Result<(StatusCode, axum::Json<FolderView>), ApiError> {
    if !berth_model::folder::valid_folder_name(&req.name) {
        return Err(ApiError::bad_request(berth_model::folder::folder_name_error(&req.name).0));
    }
    if let Some(p) = &req.project {
        crate::admission::check_project(&m, &user, p).await?;
    }
    let f = m.folders.create(&user, &req.name, req.project.as_deref(), req.quota_bytes).await?;
    m.tenancy.audit(&user.name, "folder.create", &qualified(&f), &quota_text(f.quota_bytes)).await;
    Ok((StatusCode::CREATED, axum::Json(view(&m.folders, &f, berth_model::folder::FolderAccess::Owner, None))))
}

fn quota_text(q: Option<u64>) -> String {
    q.map(|q| format!("quota {}", berth_model::format_bytes(q))).unwrap_or_else(|| "no quota".into())
}

/// The folders you may use (`?all=true`, admins: every folder), `?usage=true` with what each holds.
#[utoipa::path(get, path = "/v1/folders", tag = "folders", params(FolderListQuery),
    responses((status = 200, body = Vec<FolderView>), (status = 409, body = berth_model::api::ErrorBody),
        (status = 429, body = berth_model::api::ErrorBody), (status = 503, body = berth_model::api::ErrorBody)))]
pub async fn list(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Query(q): Query<FolderListQuery>,
) -> Result<axum::Json<Vec<FolderView>>, ApiError> {
    let mut out = Vec::new();
    // Walks now, on the user's share of the folder slots (see `folders::gate`).
    let _slot = if q.usage { Some(m.folders.enter(&user)?) } else { None };
    for (f, access) in m.folders.list(&user, q.all && user.is_admin()).await? {
        let usage = if q.usage { Some(m.folders.usage_now(f.id).await?) } else { None };
        out.push(view(&m.folders, &f, access, usage));
    }
    Ok(axum::Json(out))
}

/// One folder, with what it holds.
#[utoipa::path(get, path = "/v1/folders/{name}", tag = "folders",
    params(("name" = String, Path, description = "folder name"), FolderQuery),
    responses((status = 200, body = FolderView), (status = 404, body = berth_model::api::ErrorBody),
        (status = 409, body = berth_model::api::ErrorBody), (status = 429, body = berth_model::api::ErrorBody),
        (status = 503, body = berth_model::api::ErrorBody)))]
pub async fn show(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(name): Path<String>,
    Query(q): Query<FolderQuery>,
) -> Result<axum::Json<FolderView>, ApiError> {
    let (f, access) = m.folders.resolve(&user, &reference(&name, &q)?).await?;
    let _slot = m.folders.enter(&user)?;
    let usage = m.folders.usage_now(f.id).await?;
    Ok(axum::Json(view(&m.folders, &f, access, Some(usage))))
}

/// Remove a folder and everything in it (its owner or an admin; not while a job mounts it).
#[utoipa::path(delete, path = "/v1/folders/{name}", tag = "folders",
    params(("name" = String, Path, description = "folder name"), FolderQuery),
    responses((status = 204), (status = 403, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody), (status = 409, body = berth_model::api::ErrorBody)))]
pub async fn remove(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(name): Path<String>,
    Query(q): Query<FolderQuery>,
) -> Result<StatusCode, ApiError> {
    let f = m.folders.resolve_owned(&user, &reference(&name, &q)?, "remove").await?;
    m.jobs.while_mounted_by(f.id, async |in_use: &[i64]| m.folders.remove(&f, in_use).await).await?;
    m.tenancy.audit(&user.name, "folder.remove", &qualified(&f), "").await;
    Ok(StatusCode::NO_CONTENT)
}

/// Set or lift a folder's quota (its owner or an admin).
#[utoipa::path(put, path = "/v1/folders/{name}/quota", tag = "folders", request_body = FolderQuota,
    params(("name" = String, Path, description = "folder name"), FolderQuery),
    responses((status = 200, body = FolderView), (status = 403, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody), (status = 409, description = "the folder name is ambiguous (several folders you may use have it): name it as OWNER/NAME", body = berth_model::api::ErrorBody)))]
pub async fn set_quota(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(name): Path<String>,
    Query(q): Query<FolderQuery>,
    Json(req): Json<FolderQuota>,
) -> Result<axum::Json<FolderView>, ApiError> {
    let f = m.folders.resolve_owned(&user, &reference(&name, &q)?, "change the quota of").await?;
    if req.quota_bytes == Some(0) {
        return Err(ApiError::bad_request("a folder's quota must be more than 0 bytes: e.g. 100GiB"));
    }
    m.folders.apply_quota(&f, req.quota_bytes).await?;
    m.store.set_folder_quota(f.id, req.quota_bytes).await?;
    m.tenancy.audit(&user.name, "folder.quota", &qualified(&f), &quota_text(req.quota_bytes)).await;
    changed(&m, &user, f.id).await
}

async fn changed(m: &Manager, user: &User, id: i64) -> Result<axum::Json<FolderView>, ApiError> {
    let f = m.store.folder(id).await?.ok_or_else(|| ApiError::not_found("the folder was removed meanwhile"))?;
    let access = Folders::access(user, &f).unwrap_or(berth_model::folder::FolderAccess::Owner);
    Ok(axum::Json(view(&m.folders, &f, access, None)))
}

/// Share a folder with a project (its owner or an admin); `read_only` mounts it read-only in
/// their jobs and refuses their uploads.
#[utoipa::path(post, path = "/v1/folders/{name}/shares", tag = "folders", request_body = ShareFolder,
    params(("name" = String, Path, description = "folder name"), FolderQuery),
    responses((status = 200, body = FolderView), (status = 403, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody), (status = 409, description = "the folder name is ambiguous (several folders you may use have it): name it as OWNER/NAME", body = berth_model::api::ErrorBody)))]
pub async fn share(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(name): Path<String>,
    Query(q): Query<FolderQuery>,
    Json(req): Json<ShareFolder>,
) -> Result<axum::Json<FolderView>, ApiError> {
    let f = m.folders.resolve_owned(&user, &reference(&name, &q)?, "share").await?;
    if !m.store.projects().await?.iter().any(|p| p.name == req.project) {
        return Err(ApiError::not_found(format!(
            "no project `{}`: `berth whoami` lists your projects (admins: `berth admin project list`)",
            req.project
        )));
    }
    m.store.share_folder(f.id, &req.project, req.read_only, m.clock.now()).await?;
    let mode = if req.read_only { "read-only" } else { "read-write" };
    m.tenancy.audit(&user.name, "folder.share", &qualified(&f), &format!("{mode} with {}", req.project)).await;
    changed(&m, &user, f.id).await
}

/// End a folder's share with a project.
#[utoipa::path(delete, path = "/v1/folders/{name}/shares/{project}", tag = "folders",
    params(("name" = String, Path, description = "folder name"), ("project" = String, Path, description = "project"), FolderQuery),
    responses((status = 200, body = FolderView), (status = 404, body = berth_model::api::ErrorBody), (status = 409, description = "the folder name is ambiguous (several folders you may use have it): name it as OWNER/NAME", body = berth_model::api::ErrorBody)))]
pub async fn unshare(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path((name, project)): Path<(String, String)>,
    Query(q): Query<FolderQuery>,
) -> Result<axum::Json<FolderView>, ApiError> {
    let f = m.folders.resolve_owned(&user, &reference(&name, &q)?, "unshare").await?;
    m.store.unshare_folder(f.id, &project).await.map_err(|e| match e {
        berth_store::StoreError::NotFound(_) => {
            ApiError::not_found(format!("folder {} is not shared with project {project}", qualified(&f)))
        }
        e => e.into(),
    })?;
    m.tenancy.audit(&user.name, "folder.unshare", &qualified(&f), &project).await;
    changed(&m, &user, f.id).await
}
