//! Admission: every check a new job passes before it is stored (a submit's, a preview's and a
//! serving endpoint's replicas'): the spec, its project, folders, datasets, dependencies,
//! code, queue and QoS, feasibility on the queue's nodes and the user's quota. It completes
//! the spec (folder mounts resolved, QoS and queue time limits applied); the HTTP handlers
//! (`api::jobs`, `api::submit_preview`, `api::endpoints`) and the serving controller call it,
//! so none of them calls another's.

use std::sync::Arc;

use crate::error::ApiError;
use crate::identity::User;
use crate::manager::Manager;

/// Every check a new job passes before it is stored (a submit's, and a serving endpoint's
/// replicas'): the spec, its project, folders, datasets, dependencies, code, queue, QoS,
/// feasibility on the queue's nodes and the user's quota. Returns the spec as completed
/// (folder mounts resolved, QoS applied), its queue and where its data is cached.
pub async fn admit(
    m: &Arc<Manager>,
    user: &User,
    mut spec: berth_model::JobSpec,
) -> Result<(berth_model::JobSpec, String, Vec<(String, u64)>), ApiError> {
    spec.validate().map_err(|e| ApiError::bad_request(e.0))?;
    if let Some(p) = &spec.project {
        check_project(m, user, p).await?;
    }
    m.folders.resolve_mounts(user, &mut spec).await?;
    crate::datasets::check(m, &spec)?;
    crate::holds::check_at_submit(m, user, &spec).await?;
    if let Some(c) = &spec.code
        && !m.code.exists(&c.id)
    {
        return Err(ApiError::bad_request(format!(
            "no code snapshot {}: upload the code first (`berth submit --code DIR` does)",
            c.id
        )));
    }
    let queue = spec.queue_name().to_string();
    let Some(q) = m.queues.get(&queue) else {
        return Err(ApiError::bad_request(format!("unknown queue `{queue}`: known queues are {}", m.queues.names())));
    };
    m.qos.apply(&mut spec, q.default_time_limit_ms)?;
    check_queue_access(&q, user, &mut spec)?;
    if let (Some(sig), None) = (&spec.signal, spec.time_limit_secs) {
        // Slurm counts back from the partition's limit; a berth queue without a maximum
        // enforces none, so there is nothing to count back from.
        return Err(ApiError::bad_request(format!(
            "--signal {sig} is sent before the job's time limit, and the job has none (queue `{}` sets no \
             max_time_limit): add --time-limit (#SBATCH --time), e.g. --time-limit {}",
            q.name,
            berth_model::format_duration((q.default_time_limit_ms / 1000).max(1) as u64)
        )));
    }
    {
        let shapes = m.nodes.shapes();
        let offering = berth_sched::nodes_offering(spec.constraint.as_ref(), &shapes, &queue)
            .map_err(|e| ApiError::unprocessable(e.to_string()))?;
        // Every node of the queue is a candidate without a constraint: then check once per node
        // shape (per node, this was 11 % of a manager's CPU under 500 agents).
        let feasible = match spec.constraint {
            None => m.nodes.by_shape().check_kernels(&spec.resources, spec.nodes, spec.kernels, spec.numa, &queue),
            Some(_) => berth_sched::check_feasible_kernels(
                &spec.resources,
                spec.nodes,
                spec.kernels,
                spec.numa,
                &offering,
                &queue,
            ),
        };
        feasible.map_err(|e| ApiError::unprocessable(e.to_string()))?;
        let mounts: Vec<String> = spec.mounts.iter().map(|m| m.source.clone()).collect();
        berth_sched::check_mounts(&mounts, &shapes, &queue).map_err(|e| ApiError::unprocessable(e.to_string()))?;
        let folders: Vec<String> = spec.folders.iter().map(|f| f.folder.clone()).collect();
        berth_sched::check_folders(&folders, spec.image.is_some(), &shapes, &queue)
            .map_err(|e| ApiError::unprocessable(e.to_string()))?;
    }
    m.quotas.check_quota_at_submit(user, &spec)?;
    // Measured before the job is queued, so its first pass already knows where its data is.
    let data_on = crate::datasets::holdings(m, &spec).await;
    Ok((spec, queue, data_on))
}

/// The queue's own rules: which projects may use it, and its maximum time limit (a job
/// without a limit gets the queue's default, capped by the maximum, as its real limit; a
/// session without one gets the queue's `max_session`).
fn check_queue_access(
    q: &berth_sched::QueueConfig,
    user: &User,
    spec: &mut berth_model::JobSpec,
) -> Result<(), ApiError> {
    if !q.projects.is_empty() && !spec.project.as_ref().is_some_and(|p| q.projects.contains(p)) {
        let mine: Vec<&String> = q.projects.iter().filter(|p| user.member_of(p)).collect();
        let hint = match mine.first() {
            Some(p) => format!("submit with --project {p}"),
            None => "ask an admin to add you to one of them".to_string(),
        };
        return Err(ApiError::forbidden(format!(
            "queue `{}` is open to projects {} only: {hint}",
            q.name,
            q.projects.join(", ")
        )));
    }
    // A session's time limit: its own up to the queue's `max_session`, or that maximum.
    if spec.is_session()
        && let Some(session_ms) = q.max_session_ms
    {
        let max = (session_ms / 1000).max(1) as u64;
        match spec.time_limit_secs {
            Some(t) if t > max => {
                return Err(ApiError::bad_request(format!(
                    "time limit {} is above queue `{}`'s longest session ({}, max_session): use --time-limit {} or \
                     less",
                    berth_model::format_duration(t),
                    q.name,
                    berth_model::format_duration(max),
                    berth_model::format_duration(max)
                )));
            }
            Some(_) => {}
            None => {
                let cap = q.max_time_limit_ms.map_or(max, |m| max.min((m / 1000).max(1) as u64));
                spec.time_limit_secs = Some(cap);
            }
        }
    }
    if let Some(max_ms) = q.max_time_limit_ms {
        let max = (max_ms / 1000).max(1) as u64;
        match spec.time_limit_secs {
            Some(t) if t > max => {
                return Err(ApiError::bad_request(format!(
                    "time limit {} is above queue `{}`'s maximum of {}: use --time-limit {} or less",
                    berth_model::format_duration(t),
                    q.name,
                    berth_model::format_duration(max),
                    berth_model::format_duration(max)
                )));
            }
            Some(_) => {}
            None => spec.time_limit_secs = Some(((q.default_time_limit_ms / 1000).max(1) as u64).min(max)),
        }
    }
    Ok(())
}

/// A job may go to a project its submitter belongs to (admins: any existing project).
pub async fn check_project(m: &Manager, user: &User, project: &str) -> Result<(), ApiError> {
    if user.member_of(project) {
        return Ok(());
    }
    if user.is_admin() {
        if m.store.projects().await?.iter().any(|p| p.name == project) {
            return Ok(());
        }
        return Err(ApiError::not_found(format!(
            "no project `{project}`: create it with `berth admin project create {project}`"
        )));
    }
    Err(ApiError::forbidden(format!(
        "you are not a member of project `{project}`: ask an admin to run `berth admin project add-member {project} {}`",
        user.name
    )))
}
