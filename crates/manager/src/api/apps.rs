//! A job's apps (`berth apps`, `berth open`): where the app proxy serves them, and one-time
//! links that open one in a browser (`apps/` serves them).

use std::sync::Arc;

use axum::extract::State;
use axum::http::HeaderMap;
use berth_model::JobId;
use berth_model::api::{AppLink, AppView};

use crate::auth::Auth;
use crate::error::{ApiError, Path};
use crate::login_links::LINK_TTL;
use crate::manager::Manager;

/// `GET /v1/jobs/{id}/apps`.
#[utoipa::path(get, path = "/v1/jobs/{id}/apps", params(("id" = i64, Path, description = "job id")), tag = "jobs",
    responses((status = 200, body = Vec<AppView>), (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn list(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    headers: HeaderMap,
    Path(id): Path<JobId>,
) -> Result<axum::Json<Vec<AppView>>, ApiError> {
    let row = super::jobs::visible_job(&m, &user, id).await?;
    let base = apps_base(&m, &headers)?;
    let apps = row.spec.apps.iter().map(|a| AppView {
        name: a.name.clone(),
        kind: a.kind,
        port: a.port,
        url: format!("{base}{}", berth_model::app::base_path(id, &a.name)),
    });
    Ok(axum::Json(apps.collect()))
}

/// `POST /v1/jobs/{id}/apps/{app}/link`.
#[utoipa::path(post, path = "/v1/jobs/{id}/apps/{app}/link",
    params(("id" = i64, Path, description = "job id"), ("app" = String, Path, description = "the app's name")),
    tag = "jobs",
    responses((status = 200, body = AppLink), (status = 404, body = berth_model::api::ErrorBody),
        (status = 503, description = "the app proxy is off", body = berth_model::api::ErrorBody)))]
pub async fn link(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    headers: HeaderMap,
    Path((id, app)): Path<(JobId, String)>,
) -> Result<axum::Json<AppLink>, ApiError> {
    let row = super::jobs::visible_job(&m, &user, id).await?;
    if !row.spec.apps.iter().any(|a| a.name == app) {
        let names: Vec<&str> = row.spec.apps.iter().map(|a| a.name.as_str()).collect();
        let have = if names.is_empty() { "none".to_string() } else { names.join(", ") };
        return Err(ApiError::not_found(format!("job {id} serves no app `{app}` (its apps: {have})")));
    }
    let base = apps_base(&m, &headers)?;
    let path = berth_model::app::base_path(id, &app);
    let code = m.login_links.create(crate::apps::link_owner(&user), &path);
    let url = format!("{base}{path}?{}={code}", crate::apps::LOGIN_PARAM);
    Ok(axum::Json(AppLink { url, expires_in_secs: LINK_TTL.as_secs() }))
}

/// The app proxy's URL as the caller reaches the manager: the host they used, the proxy's
/// port (or the configured public URL).
pub(crate) fn apps_base(m: &Manager, headers: &HeaderMap) -> Result<String, ApiError> {
    let Some(apps) = m.apps.get() else {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "the app proxy is off: start the manager with --apps-listen ADDR",
        ));
    };
    if let Some(url) = &apps.public_url {
        return Ok(url.trim_end_matches('/').to_string());
    }
    let host = headers.get(axum::http::header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("localhost");
    // `host[:port]`, `[v6][:port]`: the name without the API's port.
    let name = match host.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) && (!h.starts_with('[') || h.ends_with(']')) => h,
        _ => host,
    };
    let scheme = if m.tls { "https" } else { "http" };
    Ok(format!("{scheme}://{name}:{}", apps.port))
}
