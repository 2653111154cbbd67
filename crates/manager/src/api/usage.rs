//! `GET /v1/usage`: what each user or project used over a period (GPU-hours, CPU-hours, jobs
//! by final state, mean wait), like Slurm's `sreport`/`sacct`. Admins see everyone; users see
//! themselves (by user) or their projects (by project).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use berth_model::JobState;
use berth_model::api::{UsageLine, UsageQuery};
use berth_store::JobRow;
use jiff::Timestamp;

use crate::auth::Auth;
use crate::error::{ApiError, Query};
use crate::manager::Manager;
use crate::state::personal_account;

/// Usage per user or project since a time.
#[utoipa::path(get, path = "/v1/usage", tag = "usage", params(UsageQuery),
    responses((status = 200, body = Vec<UsageLine>), (status = 400, body = berth_model::api::ErrorBody)))]
pub async fn usage(
    State(m): State<Arc<Manager>>,
    Auth(u): Auth,
    Query(q): Query<UsageQuery>,
) -> Result<axum::Json<Vec<UsageLine>>, ApiError> {
    let by_project = match q.by.as_deref().unwrap_or("user") {
        "user" => false,
        "project" => true,
        other => return Err(ApiError::bad_request(format!("cannot group by `{other}`: use `user` or `project`"))),
    };
    let since_text = q.since.as_deref().filter(|s| !s.is_empty()).unwrap_or("30d");
    let secs = berth_model::parse_duration(since_text)
        .map_err(|e| ApiError::bad_request(format!("invalid `since` `{since_text}`: {e} (e.g. 7d, 12h)")))?;
    let now = Timestamp::now();
    let secs = i64::try_from(secs).unwrap_or(i64::MAX).min(now.as_second());
    let since = now - jiff::SignedDuration::from_secs(secs);
    let rows = m.store.jobs_active_since(since).await?;
    let mut lines = aggregate(&rows, by_project, since, now);
    if !u.is_admin() {
        let own = personal_account(&u.name);
        lines.retain(|l| if by_project { u.member_of(&l.name) || l.name == own } else { l.name == u.name });
    }
    Ok(axum::Json(lines))
}

/// Sums jobs into one line per user or project. A job counts its requested GPUs and CPUs
/// (times its kernels) over the part of its run inside `[since, now]`.
pub fn aggregate(rows: &[JobRow], by_project: bool, since: Timestamp, now: Timestamp) -> Vec<UsageLine> {
    let mut lines: BTreeMap<String, (UsageLine, f64, u32)> = BTreeMap::new();
    for r in rows {
        // Jobs without a project count for their user's personal account, never for a project
        // that happens to share the user's name.
        let key = match (by_project, &r.spec.project) {
            (true, Some(p)) => p.clone(),
            (true, None) => personal_account(&r.user),
            (false, _) => r.user.clone(),
        };
        let (line, wait_sum, started) = lines.entry(key.clone()).or_insert_with(|| {
            let l = UsageLine {
                name: key,
                jobs: 0,
                succeeded: 0,
                failed: 0,
                cancelled: 0,
                timeout: 0,
                lost: 0,
                unfinished: 0,
                gpu_hours: 0.0,
                cpu_hours: 0.0,
                mean_wait_secs: None,
            };
            (l, 0.0, 0)
        });
        line.jobs += 1;
        match r.state {
            JobState::Succeeded => line.succeeded += 1,
            JobState::Failed => line.failed += 1,
            JobState::Cancelled => line.cancelled += 1,
            JobState::Timeout => line.timeout += 1,
            JobState::Lost => line.lost += 1,
            _ => line.unfinished += 1,
        }
        if let Some(start) = r.started_at {
            *wait_sum += start.duration_since(r.submitted_at).as_secs_f64().max(0.0);
            *started += 1;
            let from = start.max(since);
            let to = r.ended_at.unwrap_or(now).min(now);
            let hours = to.duration_since(from).as_secs_f64().max(0.0) / 3600.0;
            let kernels = r.spec.kernel_count() as f64;
            line.gpu_hours += hours * kernels * r.spec.resources.gpu_milli as f64 / 1000.0;
            line.cpu_hours += hours * kernels * r.spec.resources.cpu_milli as f64 / 1000.0;
        }
    }
    lines
        .into_values()
        .map(|(mut l, wait_sum, started)| {
            l.mean_wait_secs = (started > 0).then(|| wait_sum / started as f64);
            l
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::JobSpec;

    fn t(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn row(user: &str, project: Option<&str>, state: JobState, times: (i64, Option<i64>, Option<i64>)) -> JobRow {
        let mut spec = JobSpec::command(["x"]);
        spec.resources.gpu_milli = 2000;
        spec.resources.cpu_milli = 4000;
        spec.nodes = 2;
        spec.project = project.map(Into::into);
        JobRow {
            id: 1,
            user_id: 1,
            user: user.into(),
            spec,
            queue: "default".into(),
            priority: 0,
            state,
            attempt: 0,
            submitted_at: t(times.0),
            started_at: times.1.map(t),
            ended_at: times.2.map(t),
            exit_code: None,
            reason: None,
            pending_reason: None,
            nodes: vec![],
            submitter: None,
            stop: None,
            end_cause: None,
        }
    }

    #[test]
    fn hours_are_clipped_to_the_period_and_states_counted() {
        let rows = vec![
            // Ran an hour, half of it before the period: half an hour counts. 2 GPUs × 2 kernels.
            row("bob", Some("vision"), JobState::Succeeded, (0, Some(600), Some(4200))),
            // Still running at `now` (the period's end): from its start.
            row("bob", None, JobState::Running, (2400, Some(3000), None)),
            // Never started: counted as a job, no hours, no wait.
            row("carol", Some("vision"), JobState::Cancelled, (2500, None, Some(2600))),
        ];
        let lines = aggregate(&rows, false, t(2400), t(4200));
        assert_eq!(lines.len(), 2);
        let bob = &lines[0];
        assert_eq!((bob.name.as_str(), bob.jobs, bob.succeeded, bob.unfinished), ("bob", 2, 1, 1));
        // 0.5 h × 4 GPUs + 1/3 h × 4 GPUs
        assert!((bob.gpu_hours - (0.5 * 4.0 + (1200.0 / 3600.0) * 4.0)).abs() < 1e-9, "{bob:?}");
        assert!((bob.cpu_hours - 2.0 * bob.gpu_hours).abs() < 1e-9);
        assert_eq!(bob.mean_wait_secs, Some(600.0));
        let carol = &lines[1];
        assert_eq!((carol.cancelled, carol.gpu_hours, carol.mean_wait_secs), (1, 0.0, None));

        let by_project = aggregate(&rows, true, t(2400), t(4200));
        let names: Vec<&str> = by_project.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(names, ["user:bob", "vision"], "a job without a project counts for its user's own account");
        assert_eq!(by_project[1].jobs, 2);
    }
}
