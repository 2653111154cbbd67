//! The REST API under `/v1`: the router, with JSON errors for unknown routes and methods.

pub mod apps;
pub mod backup;
pub mod cache;
pub mod code;
pub mod endpoints;
pub mod envs;
pub mod exec;
pub mod folder_files;
pub mod folders;
pub mod forward;
pub mod hold;
pub mod images;
pub mod jobs;
pub mod kernel_stream;
pub mod logs;
pub mod metrics;
pub mod misc;
pub mod nodes;
pub mod queues;
pub mod quota;
pub mod requeue;
pub mod signal;
pub mod submit_preview;
pub mod tenancy;
pub mod usage;

use std::sync::Arc;

use axum::Router;
use axum::response::IntoResponse;
use axum::routing::{delete, get, post, put};

use crate::error::{ApiError, MAX_BODY};

/// The largest code manifest (`POST /v1/code/snapshots`): 100,000 files at ~300 bytes each.
const MAX_MANIFEST: usize = 32 << 20;
use crate::manager::Manager;

pub fn router(m: Arc<Manager>) -> Router {
    Router::new()
        .route("/v1/health", get(misc::health))
        .route("/v1/leader", get(misc::leader))
        .route("/metrics", get(metrics::scrape))
        .route("/openapi.json", get(crate::openapi::spec))
        .route("/v1/whoami", get(misc::whoami))
        .route("/v1/jobs", post(jobs::submit).get(jobs::list))
        .route("/v1/jobs/preview", post(submit_preview::preview))
        .route("/v1/jobs/{id}", get(jobs::show))
        .route("/v1/jobs/{id}/cancel", post(jobs::cancel))
        .route("/v1/jobs/{id}/tasks/cancel", post(jobs::cancel_tasks))
        .route("/v1/jobs/{id}/signal", post(signal::signal))
        .route("/v1/jobs/{id}/requeue", post(requeue::requeue))
        .route("/v1/jobs/{id}/hold", post(hold::hold))
        .route("/v1/jobs/{id}/release", post(hold::release))
        .route("/v1/jobs/{id}/logs", get(logs::logs))
        .route("/v1/jobs/{id}/exec", get(exec::exec))
        .route("/v1/jobs/{id}/port-forward", get(forward::forward))
        .route("/v1/jobs/{id}/apps", get(apps::list))
        .route("/v1/jobs/{id}/apps/{app}/link", post(apps::link))
        .route("/v1/jobs/{id}/attach", get(exec::attach))
        .route("/v1/nodes", get(nodes::list))
        .route("/v1/nodes/timeline", get(nodes::timeline))
        .route("/v1/images", get(images::list))
        .route("/v1/envs", get(envs::list))
        .route("/v1/envs/{key}", delete(envs::remove))
        .route("/v1/nodes/{name}/drain", post(nodes::drain))
        .route("/v1/nodes/{name}/undrain", post(nodes::undrain))
        .route("/v1/queues", get(queues::list))
        .route("/v1/queues/{name}", put(queues::put))
        .route("/v1/admin/users", post(misc::create_user).get(tenancy::list_users))
        .route("/v1/admin/users/{name}/disable", post(tenancy::disable_user))
        .route("/v1/admin/users/{name}/enable", post(tenancy::enable_user))
        .route("/v1/projects", get(tenancy::list_projects))
        .route("/v1/admin/projects", post(tenancy::create_project))
        .route("/v1/admin/projects/{name}/members", post(tenancy::add_member))
        .route("/v1/admin/projects/{name}/members/{user}", delete(tenancy::remove_member))
        .route("/v1/tokens", post(tenancy::create_token).get(tenancy::list_tokens))
        .route("/v1/tokens/{id}", delete(tenancy::revoke_token))
        .route("/v1/admin/audit", get(tenancy::audit_log))
        .route("/v1/quotas", get(quota::list))
        .route("/v1/usage", get(usage::usage))
        .route("/v1/usage/timeline", get(usage::timeline))
        .route("/v1/admin/quotas/{kind}/{name}", put(quota::put).delete(quota::delete))
        .route("/v1/admin/join-tokens", post(misc::create_join_token))
        .route("/v1/admin/backup", post(backup::backup))
        .route("/v1/admin/store/purge", post(backup::purge))
        .route("/v1/endpoints", post(endpoints::create).get(endpoints::list))
        .route("/v1/endpoints/{name}", get(endpoints::show).patch(endpoints::update).delete(endpoints::remove))
        .route("/v1/endpoints/{name}/tokens", post(endpoints::create_token).get(endpoints::tokens))
        .route("/v1/endpoints/{name}/tokens/{id}", delete(endpoints::revoke_token))
        .route("/v1/folders", post(folders::create).get(folders::list))
        .route("/v1/folders/{name}", get(folders::show).delete(folders::remove))
        .route("/v1/folders/{name}/quota", put(folders::set_quota))
        .route("/v1/folders/{name}/shares", post(folders::share))
        .route("/v1/folders/{name}/shares/{project}", delete(folders::unshare))
        .route("/v1/folders/{name}/list", get(folder_files::list))
        .route("/v1/folders/{name}/files/{*path}", get(folder_files::download).put(folder_files::upload))
        .route("/v1/folders/{name}/uploads/{*path}", get(folder_files::upload_state))
        .route("/v1/code/missing", post(code::missing))
        .route("/v1/code/blobs/{sha256}", put(code::put_blob))
        // A manifest of many files is more than the 1 MiB JSON bodies are held to.
        .route("/v1/code/snapshots", post(code::snapshot).layer(axum::extract::DefaultBodyLimit::max(MAX_MANIFEST)))
        .route("/v1/cache/members", get(cache::members))
        .route("/v1/admin/cache/buckets", get(cache::buckets))
        .route("/v1/admin/cache/buckets/{name}", put(cache::put_bucket).delete(cache::delete_bucket))
        .route("/v1/admin/cache/members/{node}", put(cache::put_member).delete(cache::remove_member))
        .route("/v1/admin/cache/members/{node}/add", post(cache::add_member))
        .route("/v1/agents/connect", get(crate::agent_conn::connect))
        .route("/v1/agents/streams/{stream}", get(exec::agent_stream))
        .merge(crate::web::routes())
        .fallback(|headers: axum::http::HeaderMap, uri: axum::http::Uri| async move {
            if crate::web::wants_page(&headers, uri.path()) {
                return crate::web::not_found_page();
            }
            ApiError::not_found(format!("no route {uri}: see /openapi.json for the API")).into_response()
        })
        .method_not_allowed_fallback(|method: axum::http::Method, uri: axum::http::Uri| async move {
            ApiError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                format!("{method} is not allowed on {}: see /openapi.json", uri.path()),
            )
        })
        // Job specs and admin requests are small; a bigger body is refused (413) before it
        // is read, so nobody can make the manager buffer megabytes.
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY))
        .layer(axum::middleware::from_fn(crate::access_log::log))
        .layer(axum::middleware::from_fn_with_state(m.clone(), track_store_health))
        // Outermost, so it times the whole request; `Router::layer` wraps each route, so it
        // sees the matched route template.
        .layer(axum::middleware::from_fn_with_state(m.clone(), metrics::track))
        .with_state(m)
}

/// Keeps [`crate::store_health::StoreHealth`] up to date from the answers: a 507 (a write the
/// full disk refused) marks the store full and gets the data dir named in its message; a
/// successful write clears it once a probe write commits (a request may succeed without writing).
async fn track_store_health(
    axum::extract::State(m): axum::extract::State<Arc<Manager>>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::http::{Method, StatusCode};
    use axum::response::IntoResponse;
    let write = !matches!(*req.method(), Method::GET | Method::HEAD | Method::OPTIONS);
    let res = next.run(req).await;
    if res.status() == StatusCode::INSUFFICIENT_STORAGE {
        m.store_health.refused("a write of the API");
        return ApiError::new(StatusCode::INSUFFICIENT_STORAGE, m.store_health.refusal()).into_response();
    }
    if write && res.status().is_success() && m.store_health.is_full() {
        m.store_health.probe(&*m.store).await;
    }
    res
}
