//! `/v1/endpoints`: serving endpoints (create, list, show, update, scale, remove) and their
//! tokens. The controller (`serving/controller.rs`) does the rest from the stored row.
//!
//! Only the owner and admins see an endpoint; everyone else gets the 404 of one that does
//! not exist. A spec change that alters what replicas run (their job, port or probes) is a
//! new revision, rolled out one replica at a time; counts, autoscaling and public access
//! change in place.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use berth_model::endpoint::{
    CreateEndpoint, CreateEndpointToken, CreatedEndpointToken, EndpointSpec, EndpointTokenView, EndpointView,
    MAX_REPLICAS, Rollout, UpdateEndpoint,
};
use berth_store::endpoints::EndpointRow;

use crate::auth::Auth;
use crate::error::{ApiError, Json, Path};
use crate::identity::User;
use crate::local::Submitter;
use crate::manager::Manager;
use crate::serving::Endpoint;

type Answer<T> = Result<axum::Json<T>, ApiError>;

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(format!("no endpoint `{name}`: see berth serve ls"))
}

/// Endpoint `name`'s row, if `user` may see it.
fn visible(m: &Manager, user: &User, name: &str) -> Result<EndpointRow, ApiError> {
    let eps = m.serving.lock();
    eps.values()
        .find(|e| e.row.name == name && (user.is_admin() || e.row.owner_id == user.id))
        .map(|e| e.row.clone())
        .ok_or_else(|| not_found(name))
}

fn view_of(m: &Manager, headers: &HeaderMap, id: i64) -> Result<EndpointView, ApiError> {
    let v = m.serving.lock().get(&id).map(|e| e.view(m.serving.now(), &m.serving.routes));
    v.map(|v| with_url(m, headers, v)).ok_or_else(|| ApiError::not_found("the endpoint was removed"))
}

/// Fills in the endpoint's URL on the app listener, as the caller reaches the manager.
fn with_url(m: &Manager, headers: &HeaderMap, mut v: EndpointView) -> EndpointView {
    v.url = super::apps::apps_base(m, headers).ok().map(|base| format!("{base}{}", v.path));
    v
}

/// Checks a spec as a replica would be submitted: the spec's own rules, then every submit
/// check (queue, quota, project, folders, feasibility) for `user`.
async fn check(m: &Arc<Manager>, user: &User, spec: &EndpointSpec) -> Result<(), ApiError> {
    spec.validate().map_err(|e| ApiError::bad_request(e.0))?;
    crate::admission::admit(m, user, spec.replica_job(0, 0)).await.map(drop)
}

/// A token as the API shows it (never its hash).
fn token_view(t: berth_store::endpoints::EndpointTokenRow) -> EndpointTokenView {
    EndpointTokenView { id: t.id, label: t.label, created_at: t.created_at }
}

/// Make an endpoint: its replicas start at once.
#[utoipa::path(post, path = "/v1/endpoints", tag = "serving", request_body = CreateEndpoint,
    responses((status = 201, body = EndpointView), (status = 400, body = berth_model::api::ErrorBody),
        (status = 403, description = "not a member of the project", body = berth_model::api::ErrorBody),
        (status = 404, description = "no such project or queue", body = berth_model::api::ErrorBody),
        (status = 409, body = berth_model::api::ErrorBody), (status = 422, body = berth_model::api::ErrorBody)))]
pub async fn create(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Submitter(submitter): Submitter,
    headers: HeaderMap,
    Json(req): Json<CreateEndpoint>,
) -> Result<(StatusCode, axum::Json<EndpointView>), ApiError> {
    let spec = req.spec;
    check(&m, &user, &spec).await?;
    let _w = m.serving.writes.lock().await;
    if m.serving.id_of(&spec.name).is_some() {
        return Err(ApiError::conflict(format!(
            "endpoint `{}` already exists: change it with berth serve update, or pick another name",
            spec.name
        )));
    }
    let now = m.clock.now();
    let row =
        m.serving.store().create_endpoint(&spec.name, user.id, submitter, &spec, spec.initial_replicas(), now).await?;
    let id = row.id;
    m.serving.lock().insert(id, Endpoint::new(row, Default::default(), m.serving.now()));
    m.tenancy.audit(&user.name, "endpoint.create", &spec.name, "").await;
    m.serving.kick.notify_one();
    Ok((StatusCode::CREATED, axum::Json(view_of(&m, &headers, id)?)))
}

/// Your endpoints (admins: all).
#[utoipa::path(get, path = "/v1/endpoints", tag = "serving", responses((status = 200, body = Vec<EndpointView>)))]
pub async fn list(State(m): State<Arc<Manager>>, Auth(user): Auth, headers: HeaderMap) -> Answer<Vec<EndpointView>> {
    let now = m.serving.now();
    let views: Vec<EndpointView> = m
        .serving
        .lock()
        .values()
        .filter(|e| user.is_admin() || e.row.owner_id == user.id)
        .map(|e| e.view(now, &m.serving.routes))
        .collect();
    Ok(axum::Json(views.into_iter().map(|v| with_url(&m, &headers, v)).collect()))
}

/// One endpoint with its replicas and traffic.
#[utoipa::path(get, path = "/v1/endpoints/{name}", tag = "serving", params(("name" = String, Path)),
    responses((status = 200, body = EndpointView), (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn show(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Answer<EndpointView> {
    let row = visible(&m, &user, &name)?;
    Ok(axum::Json(view_of(&m, &headers, row.id)?))
}

/// Change an endpoint: a new spec (rolled out replica by replica when what replicas run
/// changes), a replica count, or public access.
#[utoipa::path(patch, path = "/v1/endpoints/{name}", tag = "serving", params(("name" = String, Path)),
    request_body = UpdateEndpoint,
    responses((status = 200, body = EndpointView), (status = 400, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody), (status = 422, body = berth_model::api::ErrorBody)))]
pub async fn update(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    headers: HeaderMap,
    Path(name): Path<String>,
    Json(req): Json<UpdateEndpoint>,
) -> Answer<EndpointView> {
    visible(&m, &user, &name)?;
    if let Some(spec) = &req.spec {
        if spec.name != name {
            return Err(ApiError::bad_request(format!(
                "an endpoint keeps its name: the spec says `{}`, the path `{name}`",
                spec.name
            )));
        }
        check(&m, &user, spec).await?;
    }
    if let Some(n) = req.replicas
        && n > MAX_REPLICAS
    {
        return Err(ApiError::bad_request(format!("{n} replicas is more than {MAX_REPLICAS}")));
    }
    let _w = m.serving.writes.lock().await;
    let mut row = visible(&m, &user, &name)?;
    let replicas_live = m.serving.lock().get(&row.id).is_some_and(|e| !e.replicas.is_empty());
    if let Some(spec) = req.spec {
        // What a replica is started with rolls out; counts, scaling and access apply at once.
        let rolls = spec.job != row.spec.job || spec.port != row.spec.port || spec.health != row.spec.health;
        if spec.replicas != row.spec.replicas || spec.autoscale != row.spec.autoscale {
            row.desired = spec.initial_replicas();
        }
        if rolls {
            row.previous = Some(std::mem::replace(&mut row.spec, spec));
            row.revision += 1;
            row.rollout = if replicas_live { Rollout::Rolling } else { Rollout::Done };
            row.message = None;
        } else {
            row.spec = spec;
        }
    }
    if let Some(n) = req.replicas {
        row.spec.replicas = n;
        row.desired = row.spec.initial_replicas();
    }
    if let Some(p) = req.public {
        row.spec.public = p;
    }
    row.updated_at = m.clock.now();
    m.serving.store().update_endpoint(&row).await?;
    let id = row.id;
    if let Some(e) = m.serving.lock().get_mut(&id) {
        if e.row.revision != row.revision {
            e.rollout_failures = 0;
            e.failures = 0;
            e.start_after = None;
        }
        e.row = row;
    }
    m.tenancy.audit(&user.name, "endpoint.update", &name, "").await;
    m.serving.kick.notify_one();
    Ok(axum::Json(view_of(&m, &headers, id)?))
}

/// Remove an endpoint: its replicas stop and its tokens go.
#[utoipa::path(delete, path = "/v1/endpoints/{name}", tag = "serving", params(("name" = String, Path)),
    responses((status = 204), (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn remove(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let _w = m.serving.writes.lock().await;
    let row = visible(&m, &user, &name)?;
    m.serving.store().delete_endpoint(row.id).await?;
    m.serving.lock().remove(&row.id);
    m.jobs.cancel_replicas(row.id, &format!("serve (endpoint {name} removed)")).await;
    m.tenancy.audit(&user.name, "endpoint.remove", &name, "").await;
    Ok(StatusCode::NO_CONTENT)
}

/// Make a token that may call the endpoint (shown once).
#[utoipa::path(post, path = "/v1/endpoints/{name}/tokens", tag = "serving", params(("name" = String, Path)),
    request_body = CreateEndpointToken,
    responses((status = 201, body = CreatedEndpointToken), (status = 400, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn create_token(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(name): Path<String>,
    Json(req): Json<CreateEndpointToken>,
) -> Result<(StatusCode, axum::Json<CreatedEndpointToken>), ApiError> {
    if req.label.len() > 128 || req.label.chars().any(char::is_control) {
        return Err(ApiError::bad_request("a token label is at most 128 printable characters"));
    }
    let row = visible(&m, &user, &name)?;
    let secret = crate::token::new_token();
    let hash = crate::token::hash_token(&secret);
    let t = m.serving.store().create_endpoint_token(row.id, &req.label, &hash, m.clock.now()).await?;
    if let Some(e) = m.serving.lock().get_mut(&row.id) {
        e.tokens.insert(hash, t.id);
    }
    m.tenancy.audit(&user.name, "endpoint.token.create", &name, &t.id.to_string()).await;
    let token = token_view(t);
    Ok((StatusCode::CREATED, axum::Json(CreatedEndpointToken { token, secret })))
}

/// The endpoint's tokens (never their secrets).
#[utoipa::path(get, path = "/v1/endpoints/{name}/tokens", tag = "serving", params(("name" = String, Path)),
    responses((status = 200, body = Vec<EndpointTokenView>), (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn tokens(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(name): Path<String>,
) -> Answer<Vec<EndpointTokenView>> {
    let row = visible(&m, &user, &name)?;
    let rows = m.serving.store().endpoint_tokens(row.id).await?;
    Ok(axum::Json(rows.into_iter().map(token_view).collect()))
}

/// Revoke a token: it stops working at once.
#[utoipa::path(delete, path = "/v1/endpoints/{name}/tokens/{id}", tag = "serving",
    params(("name" = String, Path), ("id" = i64, Path)),
    responses((status = 204), (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn revoke_token(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path((name, id)): Path<(String, i64)>,
) -> Result<StatusCode, ApiError> {
    let row = visible(&m, &user, &name)?;
    if !m.serving.store().delete_endpoint_token(row.id, id).await? {
        return Err(ApiError::not_found(format!(
            "endpoint `{name}` has no token {id}: see berth serve token ls {name}"
        )));
    }
    if let Some(e) = m.serving.lock().get_mut(&row.id) {
        e.tokens.retain(|_, t| *t != id);
    }
    m.tenancy.audit(&user.name, "endpoint.token.revoke", &name, &id.to_string()).await;
    Ok(StatusCode::NO_CONTENT)
}
