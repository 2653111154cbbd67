//! `/v1/jobs`: submit, list, show and cancel.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use berth_model::api::{
    CancelResult, CancelTasks, ErrorReason, JobDetail, JobListQuery, JobView, KernelView, SubmitRequest, TaskCancelled,
};
use berth_model::{JobId, JobState};
use berth_store::{JobFilter, JobRow};

use crate::auth::Auth;
use crate::cluster_env::role;
use crate::error::{ApiError, Json, Path, Query};
use crate::identity::User;
use crate::job_requests::{not_yours, task_outside};
use crate::local::Submitter;
use crate::manager::Manager;
use crate::state::{Owner, row_view};

/// Submit a job.
#[utoipa::path(post, path = "/v1/jobs", request_body = SubmitRequest, tag = "jobs",
    params(("Idempotency-Key" = Option<String>, Header,
        description = "sent again with the same key (1 to 128 visible ASCII characters), a submit answers with the job the first one made")),
    responses((status = 201, body = JobView), (status = 400, body = berth_model::api::ErrorBody),
        (status = 401, body = berth_model::api::ErrorBody),
        (status = 403, description = "not a member of the project, or a priority above the quota's", body = berth_model::api::ErrorBody),
        (status = 404, description = "no such project or queue", body = berth_model::api::ErrorBody),
        (status = 422, body = berth_model::api::ErrorBody),
        (status = 429, description = "the pending-jobs quota is full", body = berth_model::api::ErrorBody)))]
pub async fn submit(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Submitter(submitter): Submitter,
    headers: axum::http::HeaderMap,
    Json(req): Json<SubmitRequest>,
) -> Result<(StatusCode, axum::Json<JobView>), ApiError> {
    let key = idempotency_key(&headers)?;
    let spec = req.spec;
    refuse_manager_fields(&spec)?;
    let (spec, queue, data_on) = crate::admission::admit(&m, &user, spec).await?;
    let owner = Owner { user_id: user.id, name: user.name.clone(), submitter };
    let view = m.quotas.submit(&m.jobs, owner, spec, queue, key.as_deref(), data_on).await?;
    Ok((StatusCode::CREATED, axum::Json(view)))
}

/// Fields only the manager sets, refused in what a client submits (or previews).
pub(crate) fn refuse_manager_fields(spec: &berth_model::JobSpec) -> Result<(), ApiError> {
    if spec.array_task.is_some() {
        return Err(ApiError::bad_request(
            "`array_task` is set by the manager for the tasks of an array: submit the array (`array`)",
        ));
    }
    if spec.replica_of.is_some() {
        return Err(ApiError::bad_request(
            "`replica_of` is set by the manager for a serving endpoint's replicas: create an endpoint (`berth serve create`)",
        ));
    }
    Ok(())
}

/// The `Idempotency-Key` header: a submit sent again with the same key (by the same user,
/// within a day) answers with the job the first one made instead of making another.
fn idempotency_key(headers: &axum::http::HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get("idempotency-key") else { return Ok(None) };
    match v.to_str() {
        Ok(k) if !k.is_empty() && k.len() <= 128 && k.bytes().all(|b| b.is_ascii_graphic()) => Ok(Some(k.to_string())),
        _ => Err(ApiError::bad_request(
            "bad Idempotency-Key header: use 1 to 128 visible ASCII characters (e.g. a UUID)",
        )),
    }
}

/// List jobs: your own (admins: all), unfinished unless `all=true`, newest first.
#[utoipa::path(get, path = "/v1/jobs", params(JobListQuery), tag = "jobs",
    responses((status = 200, body = Vec<JobView>), (status = 400, body = berth_model::api::ErrorBody)))]
pub async fn list(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Query(q): Query<JobListQuery>,
) -> Result<axum::response::Response, ApiError> {
    // The spec's enum, in any case (an empty `state=` is refused like any other non-state).
    let states = match q.state.as_deref() {
        Some(s) => Some(
            s.split(',')
                .map(|s| {
                    s.parse::<JobState>().map_err(|e| {
                        let all: Vec<_> = JobState::ALL.iter().map(|s| s.as_str()).collect();
                        ApiError::bad_request(format!("{e}: use one of {}", all.join(", ")))
                    })
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        None => None,
    };
    let since = q.since.as_deref().map(|t| list_time("since", t)).transpose()?;
    let until = q.until.as_deref().map(|t| list_time("until", t)).transpose()?;
    let ids = q.ids.as_deref().map(list_ids).transpose()?;
    let fields =
        q.fields.as_deref().map(berth_model::api::job_view_fields).transpose().map_err(ApiError::bad_request)?;
    if let Some(l) = q.limit {
        crate::error::in_range("limit", l.into(), 0, i32::MAX as u64)?;
    }
    if let Some(b) = q.before {
        crate::error::in_range("before", b.max(0) as u64, 1, i64::MAX as u64)?;
    }
    if let Some(a) = q.array {
        crate::error::in_range("array", a.max(0) as u64, 1, i64::MAX as u64)?;
    }
    let limit = q.limit.map(|l| l as usize).unwrap_or(usize::MAX);
    let filter = JobFilter {
        user_id: (!user.is_admin()).then_some(user.id),
        projects: user.projects.clone(),
        states,
        limit: q.limit,
        owner: q.user.filter(|u| !u.is_empty()),
        queue: q.queue.filter(|u| !u.is_empty()),
        name_contains: q.name.filter(|u| !u.is_empty()),
        before: q.before,
        ids,
        since,
        until,
        array_id: q.array,
        array_index: None,
    };
    // Unfinished jobs live in memory: only ended ones are read from the store, and only when
    // the list asks for them. Memory is read first: a job that ends meanwhile is then in both
    // (the store's ended row wins), and one that ended before was stored before it left memory.
    let live = m.jobs.live_views(&user, &filter, limit, |j| crate::idle::deadline(&m, j)).await;
    let wants_ended = q.all || filter.states.as_ref().is_some_and(|s| s.iter().any(|s| s.is_terminal()));
    if !wants_ended {
        return Ok(listing(&live, fields.as_deref()));
    }
    let ended: Vec<JobState> = match &filter.states {
        Some(s) => s.iter().copied().filter(|s| s.is_terminal()).collect(),
        None => JobState::ALL.into_iter().filter(|s| s.is_terminal()).collect(),
    };
    let rows = m.store.jobs(&JobFilter { states: Some(ended), ..filter }).await?;
    let mut views: std::collections::BTreeMap<JobId, JobView> = live.into_iter().map(|v| (v.id, v)).collect();
    views.extend(rows.iter().map(|r| (r.id, row_view(r, r.nodes.clone()))));
    let views: Vec<JobView> = views.into_values().rev().take(limit).collect();
    Ok(listing(&views, fields.as_deref()))
}

/// The jobs list's answer: whole views, or with `fields=` only those fields of each (a tenth
/// of the bytes for a two-column `sacct` over 100,000 jobs, to write and to read).
fn listing(views: &[JobView], fields: Option<&[&'static str]>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let Some(fields) = fields else { return axum::Json(views).into_response() };
    let partial: Vec<_> = views.iter().map(|v| berth_model::api::job_view_partial(v, fields)).collect();
    axum::Json(partial).into_response()
}

/// A time of the jobs list's window: RFC 3339 or Unix seconds.
fn list_time(param: &str, t: &str) -> Result<jiff::Timestamp, ApiError> {
    let parsed = match t.parse::<i64>() {
        Ok(secs) => jiff::Timestamp::from_second(secs).ok(),
        Err(_) => t.parse::<jiff::Timestamp>().ok(),
    };
    parsed.ok_or_else(|| {
        ApiError::bad_request(format!("bad `{param}` `{t}`: use RFC 3339 (2026-11-20T10:00:00Z) or Unix seconds"))
    })
}

/// The `ids` of the jobs list: job ids separated by commas.
fn list_ids(s: &str) -> Result<Vec<JobId>, ApiError> {
    let ids = s
        .split(',')
        .map(|i| i.trim().parse::<JobId>().ok().filter(|&i| i >= 1))
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| ApiError::bad_request(format!("bad `ids` `{s}`: use job ids separated by commas (3,7,12)")))?;
    if ids.len() > berth_model::api::MAX_LISTED_IDS {
        return Err(ApiError::bad_request(format!(
            "`ids` names {} jobs: at most {} at once",
            ids.len(),
            berth_model::api::MAX_LISTED_IDS
        )));
    }
    Ok(ids)
}

pub use crate::job_requests::no_such_job;

/// Loads a job the user may see; 404 otherwise.
/// An archived job (retention) the user may see answers 404 too, saying so and what the
/// archive keeps of it.
pub async fn visible_job(m: &Manager, user: &User, id: JobId) -> Result<JobRow, ApiError> {
    match m.store.job(id).await? {
        Some(row) if user.can_see(row.user_id, &row.spec) => Ok(row),
        Some(_) => Err(no_such_job(id)),
        None => match m.store.archived_job(id).await? {
            Some(a) if user.can_see(a.user_id, &a.spec) => {
                Err(ApiError::not_found(crate::retention::archived_message(m, &a)))
            }
            _ => Err(no_such_job(id)),
        },
    }
}

/// Everything about one job: spec, kernels, history.
#[utoipa::path(get, path = "/v1/jobs/{id}", params(("id" = i64, Path, description = "job id")), tag = "jobs",
    responses((status = 200, body = JobDetail), (status = 403, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody)))]
pub async fn show(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(id): Path<JobId>,
) -> Result<axum::Json<JobDetail>, ApiError> {
    visible_job(&m, &user, id).await?;
    // The row, kernels and history from one snapshot: separate reads could show a row that a
    // state change committed between them had already left.
    let h = m.store.job_history(id).await?.ok_or_else(|| no_such_job(id))?;
    let (row, transitions) = (h.job, h.transitions);
    let kernels: Vec<KernelView> = h
        .kernels
        .into_iter()
        .filter(|k| k.attempt == row.attempt)
        .map(|k| KernelView {
            index: k.index,
            role: role(k.index),
            binding: k.binding,
            exit_code: k.exit_code,
            usage: k.usage,
        })
        .collect();
    let mut nodes: Vec<String> = kernels.iter().map(|k| k.binding.node.clone()).collect();
    nodes.dedup();
    let mut job = row_view(&row, nodes);
    m.jobs.add_live(&mut job, |j| crate::idle::deadline(&m, j)).await;
    let mut spec = row.spec;
    if row.user_id != user.id && !user.is_admin() {
        hide_secrets(&mut spec);
    }
    Ok(axum::Json(JobDetail { job, spec, kernels, transitions, submitter: row.submitter }))
}

/// A spec as a project member who is not its owner sees it. Its environment may hold the
/// owner's secrets (`--env API_KEY=...`, keys in exported variables): the exported environment
/// goes, and every `--env` value reads as `HIDDEN_ENV_VALUE` (the names stay, so the member
/// still sees what the job was given).
fn hide_secrets(spec: &mut berth_model::JobSpec) {
    spec.submit_env.clear();
    for v in spec.env.values_mut() {
        *v = berth_model::api::HIDDEN_ENV_VALUE.to_string();
    }
}

/// Cancel a job: at once while pending, by stopping its kernels otherwise.
#[utoipa::path(post, path = "/v1/jobs/{id}/cancel", params(("id" = i64, Path, description = "job id")), tag = "jobs",
    responses((status = 200, body = CancelResult), (status = 403, body = berth_model::api::ErrorBody),
        (status = 404, body = berth_model::api::ErrorBody), (status = 409, body = berth_model::api::ErrorBody)))]
pub async fn cancel(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(id): Path<JobId>,
) -> Result<axum::Json<CancelResult>, ApiError> {
    if let Some(state) = m.jobs.cancel_for(&user, id).await? {
        return Ok(axum::Json(CancelResult { id, state }));
    }
    let row = cancellable_row(&m, &user, id).await?;
    if row.state.is_terminal() {
        return Err(
            ApiError::conflict(format!("job {id} already finished ({})", row.state)).because(ErrorReason::JobEnded)
        );
    }
    Err(ApiError::conflict(format!("job {id} is being submitted; try again")))
}

/// Cancel tasks of a job array, made or not yet (Slurm's `scancel 12_7`): a task not made yet
/// is recorded as CANCELLED and never runs; tasks that already ended are left as they are.
#[utoipa::path(post, path = "/v1/jobs/{id}/tasks/cancel", params(("id" = i64, Path, description = "the array's job id")),
    request_body = CancelTasks, tag = "jobs",
    responses((status = 200, body = Vec<TaskCancelled>), (status = 400, body = berth_model::api::ErrorBody),
        (status = 403, body = berth_model::api::ErrorBody), (status = 404, body = berth_model::api::ErrorBody),
        (status = 409, body = berth_model::api::ErrorBody), (status = 422, body = berth_model::api::ErrorBody)))]
pub async fn cancel_tasks(
    State(m): State<Arc<Manager>>,
    Auth(user): Auth,
    Path(id): Path<JobId>,
    Json(body): Json<CancelTasks>,
) -> Result<axum::Json<Vec<TaskCancelled>>, ApiError> {
    let wanted = task_list(&body.tasks)?;
    if let Some(done) = m.jobs.cancel_tasks_for(&user, id, &wanted).await? {
        return Ok(axum::Json(done));
    }
    let row = cancellable_row(&m, &user, id).await?;
    let Some(array) = &row.spec.array else {
        return Err(ApiError::unprocessable(format!("job {id} is not a job array")));
    };
    Err(task_outside(id, &wanted, array).unwrap_or_else(|| {
        ApiError::conflict(format!("job array {id} already finished ({})", row.state)).because(ErrorReason::JobEnded)
    }))
}

/// A request's `tasks` of a job array (`1-5,9`, `--array`'s syntax without a throttle).
pub(super) fn task_list(tasks: &str) -> Result<berth_model::ArraySpec, ApiError> {
    let wanted: berth_model::ArraySpec =
        tasks.parse().map_err(|e: berth_model::SpecError| ApiError::bad_request(format!("tasks: {}", e.0)))?;
    if wanted.throttle.is_some() {
        return Err(ApiError::bad_request("tasks: a throttle (%N) means nothing here: give indices only"));
    }
    Ok(wanted)
}

/// The stored row of a job no longer in memory, once `user` may cancel it: the same answers as
/// `job_requests::may_cancel`, given before anything about the job's state, so a job one may not cancel
/// reveals neither whether it ended nor what it was.
pub(super) async fn cancellable_row(m: &Manager, user: &User, id: JobId) -> Result<JobRow, ApiError> {
    let row = visible_job(m, user, id).await?;
    if !user.is_admin() && row.user_id != user.id {
        return Err(not_yours(id, &row.user));
    }
    Ok(row)
}
