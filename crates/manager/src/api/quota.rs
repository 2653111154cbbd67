//! `/v1/quotas`: quotas with what is in use (users: their own and their projects'), and
//! setting or removing one (admin only).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use berth_model::{QuotaKind, QuotaLimits, QuotaView};

use crate::auth::{Admin, Auth};
use crate::error::{ApiError, Json, Path};
use crate::manager::Manager;

/// Quotas and their use now.
#[utoipa::path(get, path = "/v1/quotas", tag = "quotas", responses((status = 200, body = Vec<QuotaView>)))]
pub async fn list(State(m): State<Arc<Manager>>, Auth(u): Auth) -> axum::Json<Vec<QuotaView>> {
    axum::Json(m.quotas.quota_views(&m.jobs, &u).await)
}

fn kind(s: &str) -> Result<QuotaKind, ApiError> {
    s.parse().map_err(ApiError::bad_request)
}

/// Set (replace) the quota of a user or project (admin only); an empty body removes every limit.
#[utoipa::path(put, path = "/v1/admin/quotas/{kind}/{name}", tag = "admin", request_body = QuotaLimits,
    params(("kind" = String, Path, description = "`user` or `project`"), ("name" = String, Path, description = "user or project name")),
    responses((status = 204), (status = 400, body = berth_model::api::ErrorBody), (status = 403, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn put(
    State(m): State<Arc<Manager>>,
    Admin(a): Admin,
    Path((k, name)): Path<(String, String)>,
    Json(limits): Json<QuotaLimits>,
) -> Result<StatusCode, ApiError> {
    let k = kind(&k)?;
    let exists = match k {
        QuotaKind::User => m.store.user_by_name(&name).await?.is_some(),
        QuotaKind::Project => m.store.projects().await?.iter().any(|p| p.name == name),
    };
    if !exists {
        return Err(ApiError::not_found(format!("no {} `{name}`", k.as_str())));
    }
    m.quotas.set_quota(k, &name, Some(limits)).await?;
    m.jobs.wake();
    let detail = serde_json::to_string(&limits).unwrap_or_default();
    m.tenancy.audit(&a.name, "quota.set", &format!("{} {name}", k.as_str()), &detail).await;
    Ok(StatusCode::NO_CONTENT)
}

/// Remove the quota of a user or project (admin only).
#[utoipa::path(delete, path = "/v1/admin/quotas/{kind}/{name}", tag = "admin",
    params(("kind" = String, Path, description = "`user` or `project`"), ("name" = String, Path, description = "user or project name")),
    responses((status = 204), (status = 403, body = berth_model::api::ErrorBody), (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn delete(
    State(m): State<Arc<Manager>>,
    Admin(a): Admin,
    Path((k, name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let k = kind(&k)?;
    m.quotas.set_quota(k, &name, None).await?;
    m.jobs.wake();
    m.tenancy.audit(&a.name, "quota.remove", &format!("{} {name}", k.as_str()), "").await;
    Ok(StatusCode::NO_CONTENT)
}
