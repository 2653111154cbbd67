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
    responses((status = 200, body = Vec<AppView>), (status = 404, body = berth_model::api::ErrorBody),
        (status = 503, description = "the app proxy is off, or has no host name of the app's own to give",
            body = berth_model::api::ErrorBody)))]
pub async fn list(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    headers: HeaderMap,
    Path(id): Path<JobId>,
) -> Result<axum::Json<Vec<AppView>>, ApiError> {
    let row = super::jobs::visible_job(&m, &user, id).await?;
    let apps = row.spec.apps.iter().map(|a| {
        Ok(AppView {
            name: a.name.clone(),
            kind: a.kind,
            port: a.port,
            url: format!("{}{}", app_origin(&m, &headers, id, &a.name)?, berth_model::app::base_path(id, &a.name)),
            path: a.path,
        })
    });
    Ok(axum::Json(apps.collect::<Result<_, ApiError>>()?))
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
    let base = app_origin(&m, &headers, id, &app)?;
    let path = berth_model::app::base_path(id, &app);
    let code = m.login_links.create(crate::apps::link_owner(&user), &path);
    let url = format!("{base}{path}?{}={code}", crate::apps::LOGIN_PARAM);
    Ok(axum::Json(AppLink { url, expires_in_secs: LINK_TTL.as_secs() }))
}

/// The app proxy's URL as the caller reaches the manager: the host they used, the proxy's
/// port (or the configured public URL). Serving endpoints are reached here (`/serve/NAME/`);
/// their pages run sandboxed (`apps/`), so sharing the dashboard's site does them no good.
pub(crate) fn apps_base(m: &Manager, headers: &HeaderMap) -> Result<String, ApiError> {
    let apps = proxy_on(m)?;
    if let Some(url) = &apps.public_url {
        return Ok(url.replace("*.", "").trim_end_matches('/').to_string());
    }
    let scheme = if m.tls { "https" } else { "http" };
    Ok(format!("{scheme}://{}:{}", crate::apps::caller_host(headers), apps.port))
}

/// The origin app `app` of job `id` is served at: a host of its own, so that its pages (code
/// the job's owner wrote) are a site apart from the dashboard, whose session cookie is sent
/// to any port of the dashboard's host, and an origin apart from every other app. From
/// `--apps-url` (`*` in its host name stands for `<job>-<app>`), or, for a caller on this
/// machine, `<job>-<app>.localhost` (which browsers resolve to the loopback address). Past
/// that there is no host name of the app's own to give: the caller is told how to set one.
pub(crate) fn app_origin(m: &Manager, headers: &HeaderMap, id: JobId, app: &str) -> Result<String, ApiError> {
    let apps = proxy_on(m)?;
    let label = berth_model::app::host_label(id, app);
    if let Some(url) = &apps.public_url {
        return Ok(url.replacen('*', &label, 1).trim_end_matches('/').to_string());
    }
    let host = crate::apps::caller_host(headers);
    if !is_loopback(host) {
        return Err(ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "apps need a site apart from the dashboard's ({host}): start the manager with \
                 --apps-url 'http://*.apps.example.org:{}' and a wildcard DNS name for this host \
                 (docs/sessions.md), or reach it as 127.0.0.1 through an SSH tunnel",
                apps.port
            ),
        ));
    }
    let scheme = if m.tls { "https" } else { "http" };
    Ok(format!("{scheme}://{label}.localhost:{}", apps.port))
}

fn proxy_on(m: &Manager) -> Result<&crate::manager::AppsEndpoint, ApiError> {
    m.apps.as_ref().ok_or_else(|| {
        ApiError::new(
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            "the app proxy is off: start the manager with --apps-listen ADDR",
        )
    })
}

/// Whether a host name is this machine's loopback, where `*.localhost` reaches the proxy too.
fn is_loopback(host: &str) -> bool {
    let name = host.trim_start_matches('[').trim_end_matches(']');
    let name = name.trim_end_matches('.').to_ascii_lowercase();
    name == "localhost"
        || name.ends_with(".localhost")
        || name.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names() {
        for h in ["127.0.0.1", "127.1.2.3", "[::1]", "localhost", "LOCALHOST.", "7-web.localhost"] {
            assert!(is_loopback(h), "{h}");
        }
        for h in ["10.0.0.5", "berth.example.org", "localhost.example.org", "[::2]"] {
            assert!(!is_loopback(h), "{h}");
        }
    }
}
