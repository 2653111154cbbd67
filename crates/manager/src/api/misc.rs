//! Health, the leader, whoami and the admin routes (users, join tokens).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use berth_model::api::{CreateUserRequest, Health, JoinTokenCreated, LeaderView, UserCreated, WhoAmI};
use berth_store::StoreError;

use crate::auth::{Admin, Auth};
use crate::error::{ApiError, Json};
use crate::manager::Manager;
use crate::token::{hash_token, new_token};

/// Liveness, and what works only partly (`status` `degraded` with `problems`, e.g. a full
/// disk refusing writes); needs no token.
#[utoipa::path(get, path = "/v1/health", tag = "meta", responses((status = 200, body = Health)))]
pub async fn health(State(m): State<Arc<Manager>>) -> axum::Json<Health> {
    m.store_health.probe(&*m.store).await;
    let mut problems: Vec<String> = m.store_health.problem().into_iter().collect();
    if m.lease.lost() {
        problems.push("this manager lost the leadership and is stopping: use the new leader (GET /v1/leader)".into());
    }
    let status = if problems.is_empty() { "ok" } else { "degraded" };
    axum::Json(Health { status: status.into(), version: env!("CARGO_PKG_VERSION").into(), problems })
}

/// Which manager leads (this one, while it answers here; standbys answer the same route with
/// the leader's URL); needs no token, so clients and agents can find the leader.
#[utoipa::path(get, path = "/v1/leader", tag = "meta", responses((status = 200, body = LeaderView)))]
pub async fn leader(State(m): State<Arc<Manager>>) -> axum::Json<LeaderView> {
    let url = m.leader_url.clone();
    let leads = m.lease.may_act();
    axum::Json(LeaderView {
        role: if leads { "leader" } else { "standby" }.into(),
        leader: leads.then(|| url.clone()),
        url,
        epoch: m.lease.epoch(),
    })
}

/// The user behind the token.
#[utoipa::path(get, path = "/v1/whoami", tag = "meta",
    responses((status = 200, body = WhoAmI), (status = 401, body = berth_model::api::ErrorBody)))]
pub async fn whoami(Auth(user): Auth) -> axum::Json<WhoAmI> {
    axum::Json(WhoAmI {
        user: user.name.clone(),
        role: user.role.clone(),
        projects: user.projects.clone(),
        id: Some(user.id),
    })
}

/// Create a user and its first API token (admin only).
#[utoipa::path(post, path = "/v1/admin/users", request_body = CreateUserRequest, tag = "admin",
    responses((status = 201, body = UserCreated), (status = 400, body = berth_model::api::ErrorBody),
        (status = 403, body = berth_model::api::ErrorBody), (status = 409, body = berth_model::api::ErrorBody)))]
pub async fn create_user(
    State(m): State<Arc<Manager>>,
    Admin(admin): Admin,
    Json(req): Json<CreateUserRequest>,
) -> Result<(StatusCode, axum::Json<UserCreated>), ApiError> {
    let name = req.name.trim();
    if name.is_empty()
        || name.len() > 64
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(ApiError::bad_request(format!(
            "invalid user name `{}`: use 1-64 letters, digits, `-`, `_` or `.`",
            req.name
        )));
    }
    let role = req.role.as_deref().unwrap_or("user");
    if role != "user" && role != "admin" {
        return Err(ApiError::bad_request(format!("invalid role `{role}`: use `user` or `admin`")));
    }
    let now = m.clock.now();
    let token = new_token();
    let user = match m.store.create_user_with_token(name, role, &hash_token(&token), "created by admin", now).await {
        Ok(u) => u,
        Err(StoreError::Duplicate(_)) => return Err(ApiError::conflict(format!("user {name} already exists"))),
        Err(e) => return Err(e.into()),
    };
    m.tenancy.audit(&admin.name, "user.create", &user.name, &format!("role {}", user.role)).await;
    Ok((StatusCode::CREATED, axum::Json(UserCreated { user: user.name, role: user.role, token })))
}

/// Create a join token for another agent (admin only).
#[utoipa::path(post, path = "/v1/admin/join-tokens", tag = "admin",
    responses((status = 200, body = JoinTokenCreated), (status = 403, body = berth_model::api::ErrorBody)))]
pub async fn create_join_token(
    State(m): State<Arc<Manager>>,
    Admin(admin): Admin,
) -> Result<axum::Json<JoinTokenCreated>, ApiError> {
    let token = m.tenancy.create_join_token().await?;
    m.tenancy.audit(&admin.name, "join-token.create", &crate::token::hash_token(&token)[..12], "").await;
    Ok(axum::Json(JoinTokenCreated { token }))
}
