//! Tenancy routes: users (list, disable, enable), projects and their members, the caller's API
//! tokens, and the audit log. Every admin action and every token change is audited.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use berth_model::api::{
    AuditQuery, AuditView, CreateProjectRequest, CreateTokenRequest, MemberRequest, ProjectView, TokenCreated,
    TokenListQuery, TokenView, UserView,
};
use berth_store::TokenRow;

use crate::auth::{Admin, Auth};
use crate::error::{ApiError, Json, Path, Query};
use crate::manager::Manager;

/// Every user with their projects (admin only).
#[utoipa::path(get, path = "/v1/admin/users", tag = "admin",
    responses((status = 200, body = Vec<UserView>), (status = 403, body = berth_model::api::ErrorBody)))]
pub async fn list_users(
    State(m): State<Arc<Manager>>,
    Admin(_a): Admin,
) -> Result<axum::Json<Vec<UserView>>, ApiError> {
    let projects = m.store.projects().await?;
    let users = m.store.users().await?;
    Ok(axum::Json(
        users
            .into_iter()
            .map(|u| UserView {
                projects: projects.iter().filter(|p| p.members.contains(&u.name)).map(|p| p.name.clone()).collect(),
                name: u.name,
                role: u.role,
                disabled: u.disabled,
                created_at: u.created_at,
            })
            .collect(),
    ))
}

/// Disable a user: their tokens stop working at once, their jobs stay (admin only).
#[utoipa::path(post, path = "/v1/admin/users/{name}/disable", tag = "admin",
    params(("name" = String, Path, description = "user name")),
    responses((status = 204), (status = 403, body = berth_model::api::ErrorBody), (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn disable_user(
    State(m): State<Arc<Manager>>,
    Admin(a): Admin,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    set_disabled(&m, &a.name, &name, true).await
}

/// Enable a disabled user again (admin only).
#[utoipa::path(post, path = "/v1/admin/users/{name}/enable", tag = "admin",
    params(("name" = String, Path, description = "user name")),
    responses((status = 204), (status = 403, body = berth_model::api::ErrorBody), (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn enable_user(
    State(m): State<Arc<Manager>>,
    Admin(a): Admin,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    set_disabled(&m, &a.name, &name, false).await
}

async fn set_disabled(m: &Manager, admin: &str, name: &str, disabled: bool) -> Result<StatusCode, ApiError> {
    m.tenancy.set_user_disabled(admin, name, disabled).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Projects: every one for admins, the caller's own for users.
#[utoipa::path(get, path = "/v1/projects", tag = "projects", responses((status = 200, body = Vec<ProjectView>)))]
pub async fn list_projects(
    State(m): State<Arc<Manager>>,
    Auth(u): Auth,
) -> Result<axum::Json<Vec<ProjectView>>, ApiError> {
    let all = m.store.projects().await?;
    Ok(axum::Json(
        all.into_iter()
            .filter(|p| u.is_admin() || p.members.contains(&u.name))
            .map(|p| ProjectView { name: p.name, created_at: p.created_at, members: p.members })
            .collect(),
    ))
}

/// Create a project (admin only).
#[utoipa::path(post, path = "/v1/admin/projects", tag = "admin", request_body = CreateProjectRequest,
    responses((status = 201, body = ProjectView), (status = 400, body = berth_model::api::ErrorBody),
        (status = 403, body = berth_model::api::ErrorBody), (status = 409, body = berth_model::api::ErrorBody)))]
pub async fn create_project(
    State(m): State<Arc<Manager>>,
    Admin(a): Admin,
    Json(req): Json<CreateProjectRequest>,
) -> Result<(StatusCode, axum::Json<ProjectView>), ApiError> {
    let name = req.name.trim();
    if !berth_model::valid_name(name) {
        return Err(ApiError::bad_request(format!(
            "invalid project name `{}`: use 1-64 letters, digits, `-`, `_` or `.`",
            req.name
        )));
    }
    let p = m.tenancy.create_project(&a.name, name).await?;
    Ok((StatusCode::CREATED, axum::Json(ProjectView { name: p.name, created_at: p.created_at, members: p.members })))
}

/// Add a user to a project (admin only); adding a member again is a no-op.
#[utoipa::path(post, path = "/v1/admin/projects/{name}/members", tag = "admin", request_body = MemberRequest,
    params(("name" = String, Path, description = "project name")),
    responses((status = 204), (status = 403, body = berth_model::api::ErrorBody),
        (status = 404, description = "no such project", body = berth_model::api::ErrorBody),
        (status = 422, description = "no such user", body = berth_model::api::ErrorBody)))]
pub async fn add_member(
    State(m): State<Arc<Manager>>,
    Admin(a): Admin,
    Path(project): Path<String>,
    Json(req): Json<MemberRequest>,
) -> Result<StatusCode, ApiError> {
    m.tenancy.set_member(&a.name, &project, &req.user, true).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Remove a user from a project (admin only).
#[utoipa::path(delete, path = "/v1/admin/projects/{name}/members/{user}", tag = "admin",
    params(("name" = String, Path, description = "project name"), ("user" = String, Path, description = "user name")),
    responses((status = 204), (status = 403, body = berth_model::api::ErrorBody), (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn remove_member(
    State(m): State<Arc<Manager>>,
    Admin(a): Admin,
    Path((project, user)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    m.tenancy.set_member(&a.name, &project, &user, false).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Create an API token for the caller; the token is shown once.
#[utoipa::path(post, path = "/v1/tokens", tag = "tokens", request_body = CreateTokenRequest,
    responses((status = 201, body = TokenCreated), (status = 400, body = berth_model::api::ErrorBody)))]
pub async fn create_token(
    State(m): State<Arc<Manager>>,
    Auth(u): Auth,
    Json(req): Json<CreateTokenRequest>,
) -> Result<(StatusCode, axum::Json<TokenCreated>), ApiError> {
    // Checked before trimming: a label of control characters that are also white space (a
    // vertical tab) must be refused, not trimmed away into the default label.
    let raw = req.label.as_deref().unwrap_or_default();
    let label = Some(raw.trim()).filter(|l| !l.is_empty()).unwrap_or("created with berth token");
    if label.len() > 200 || raw.chars().any(char::is_control) {
        return Err(ApiError::bad_request("token label must be at most 200 characters with no control characters"));
    }
    let now = m.clock.now();
    let expires_at = match req.expires_in.as_deref() {
        None | Some("") | Some("never") => None,
        Some(d) => {
            let secs = berth_model::parse_duration(d)
                .map_err(|e| ApiError::bad_request(format!("invalid expiry `{d}`: {e} (e.g. 30d, 12h)")))?;
            let secs = i64::try_from(secs).ok().filter(|s| *s <= 10 * 365 * 86_400).ok_or_else(|| {
                ApiError::bad_request(format!("expiry `{d}` is too far away: at most 10 years, or no expiry"))
            })?;
            Some(now + jiff::SignedDuration::from_secs(secs))
        }
    };
    let (id, token) = m.tenancy.create_token(&u, label, expires_at).await?;
    Ok((StatusCode::CREATED, axum::Json(TokenCreated { id, token, expires_at })))
}

/// The caller's tokens (admins with `all=true`: everyone's); never the secrets.
#[utoipa::path(get, path = "/v1/tokens", tag = "tokens", params(TokenListQuery),
    responses((status = 200, body = Vec<TokenView>), (status = 403, body = berth_model::api::ErrorBody)))]
pub async fn list_tokens(
    State(m): State<Arc<Manager>>,
    Auth(u): Auth,
    Query(q): Query<TokenListQuery>,
) -> Result<axum::Json<Vec<TokenView>>, ApiError> {
    if q.all && !u.is_admin() {
        return Err(ApiError::forbidden("only admins may list every user's tokens: drop --all"));
    }
    let rows = m.store.tokens(if q.all { None } else { Some(u.id) }).await?;
    Ok(axum::Json(rows.iter().map(|t| token_view(t, &u.token_hash)).collect()))
}

fn token_view(t: &TokenRow, current: &str) -> TokenView {
    TokenView {
        id: t.id().to_string(),
        user: t.user.clone(),
        label: t.label.clone(),
        created_at: t.created_at,
        expires_at: t.expires_at,
        revoked_at: t.revoked_at,
        last_used_at: t.last_used_at,
        current: t.hash == current,
    }
}

/// Revoke one of the caller's tokens by id (admins: anyone's); it stops working at once.
#[utoipa::path(delete, path = "/v1/tokens/{id}", tag = "tokens",
    params(("id" = String, Path, description = "token id from `berth token list` (at least 8 hex digits)")),
    responses((status = 200, body = TokenView), (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn revoke_token(
    State(m): State<Arc<Manager>>,
    Auth(u): Auth,
    Path(id): Path<String>,
) -> Result<axum::Json<TokenView>, ApiError> {
    let t = m.tenancy.revoke_token(&u, &id).await?;
    Ok(axum::Json(token_view(&t, &u.token_hash)))
}

/// The audit log, newest first (admin only).
#[utoipa::path(get, path = "/v1/admin/audit", tag = "admin", params(AuditQuery),
    responses((status = 200, body = Vec<AuditView>), (status = 400, body = berth_model::api::ErrorBody),
        (status = 403, body = berth_model::api::ErrorBody)))]
pub async fn audit_log(
    State(m): State<Arc<Manager>>,
    Admin(_a): Admin,
    Query(q): Query<AuditQuery>,
) -> Result<axum::Json<Vec<AuditView>>, ApiError> {
    let since = match q.since.as_deref().filter(|s| !s.is_empty()) {
        None => None,
        Some(d) => {
            let secs = berth_model::parse_duration(d)
                .map_err(|e| ApiError::bad_request(format!("invalid `since` `{d}`: {e} (e.g. 7d, 12h)")))?;
            let secs = i64::try_from(secs).unwrap_or(i64::MAX).min(100 * 365 * 86_400);
            Some(m.clock.now() - jiff::SignedDuration::from_secs(secs))
        }
    };
    let limit = q.limit.unwrap_or(100);
    crate::error::in_range("limit", limit.into(), 1, 10_000)?;
    let rows = m.store.audit_log(since, limit).await?;
    Ok(axum::Json(
        rows.into_iter()
            .map(|r| AuditView {
                id: r.id,
                at: r.at,
                actor: r.actor,
                action: r.action,
                target: r.target,
                detail: r.detail,
            })
            .collect(),
    ))
}
