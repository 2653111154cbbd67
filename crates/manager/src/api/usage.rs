//! `GET /v1/usage`: what each user or project used over a period (GPU-hours, CPU-hours, jobs
//! by final state, mean wait), like Slurm's `sreport`/`sacct`; `GET /v1/usage/timeline`: the
//! same hours per period, for charts. Admins see everyone; users see themselves (by user) or
//! their projects (by project).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::State;
use berth_model::JobState;
use berth_model::api::{TimelineQuery, UsageLine, UsagePeriod, UsageQuery, UsageTimeline};
use berth_store::JobRow;
use jiff::Timestamp;

use crate::auth::Auth;
use crate::error::{ApiError, Query};
use crate::identity::User;
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
    let by_project = grouping(q.by.as_deref())?;
    let now = m.clock.now();
    let since = now - jiff::SignedDuration::from_secs(crate::error::period("since", q.since.as_deref(), "30d", now)?);
    let mut rows = m.store.jobs_active_since(since).await?;
    m.jobs.fill_live_usage(&mut rows).await;
    let mut lines = aggregate(&rows, by_project, since, now);
    lines.retain(|l| may_see(&u, by_project, &l.name));
    Ok(axum::Json(lines))
}

/// Usage per period, for the dashboard's charts: each user's or project's GPU- and CPU-hours,
/// and the cluster's beside its capacity.
#[utoipa::path(get, path = "/v1/usage/timeline", tag = "usage", params(TimelineQuery),
    responses((status = 200, body = UsageTimeline), (status = 400, body = berth_model::api::ErrorBody)))]
pub async fn timeline(
    State(m): State<Arc<Manager>>,
    Auth(u): Auth,
    Query(q): Query<TimelineQuery>,
) -> Result<axum::Json<UsageTimeline>, ApiError> {
    let by_project = grouping(q.by.as_deref())?;
    let now = m.clock.now();
    let span = crate::error::period("since", q.since.as_deref(), "7d", now)?;
    let step = match q.step.as_deref().filter(|s| !s.is_empty()) {
        Some(_) => crate::error::period("step", q.step.as_deref(), "1h", now)?,
        None => (span / 48).max(60),
    };
    if step == 0 || span / step > MAX_PERIODS {
        return Err(ApiError::bad_request(format!(
            "{} periods of {step}s in {span}s: at most {MAX_PERIODS}; choose a longer `step` or a shorter `since`",
            span / step.max(1)
        )));
    }
    let start = now - jiff::SignedDuration::from_secs(span);
    let rows = m.store.jobs_active_since(start).await?;
    let mut t = periods(&rows, by_project, start, step, now, |name| may_see(&u, by_project, name));
    for shape in m.nodes.shapes().iter() {
        t.cpus_total += shape.topology().cpus.len() as f64;
        t.gpus_total += shape.topology().gpus.len() as f64;
    }
    Ok(axum::Json(t))
}

/// The most periods a timeline has.
const MAX_PERIODS: i64 = 1000;

/// `by=`: group by project (true) or user (false).
fn grouping(by: Option<&str>) -> Result<bool, ApiError> {
    match by.unwrap_or("user") {
        "user" => Ok(false),
        "project" => Ok(true),
        other => Err(ApiError::bad_request(format!("cannot group by `{other}`: use `user` or `project`"))),
    }
}

/// Whether `u` may see the usage of `name` (a user, or a project when `by_project`): admins
/// everyone's, users their own and their projects'.
fn may_see(u: &User, by_project: bool, name: &str) -> bool {
    u.is_admin() || if by_project { u.member_of(name) || name == personal_account(&u.name) } else { name == u.name }
}

/// The user or project a job's usage counts for. Jobs without a project count for their
/// user's personal account, never for a project that happens to share the user's name.
fn account_of(r: &JobRow, by_project: bool) -> String {
    match (by_project, &r.spec.project) {
        (true, Some(p)) => p.clone(),
        (true, None) => personal_account(&r.user),
        (false, _) => r.user.clone(),
    }
}

/// GPUs and CPUs a job holds (what it asked for, times its kernels).
fn held(r: &JobRow) -> (f64, f64) {
    let kernels = r.spec.kernel_count() as f64;
    (kernels * r.spec.resources.gpu_milli as f64 / 1000.0, kernels * r.spec.resources.cpu_milli as f64 / 1000.0)
}

/// Splits each started job's run inside `[start, now]` over periods of `step` seconds; only
/// accounts `visible` says may be seen count, in the totals too.
pub fn periods(
    rows: &[JobRow],
    by_project: bool,
    start: Timestamp,
    step: i64,
    now: Timestamp,
    visible: impl Fn(&str) -> bool,
) -> UsageTimeline {
    let s0 = start.as_second();
    let count = ((now.as_second() - s0).max(0) + step - 1) / step;
    let mut periods: Vec<UsagePeriod> = (0..count.max(1))
        .map(|i| UsagePeriod {
            start: Timestamp::from_second(s0 + i * step).unwrap_or(start),
            gpu_hours: 0.0,
            cpu_hours: 0.0,
            by: BTreeMap::new(),
        })
        .collect();
    for r in rows {
        let Some(started) = r.started_at else { continue };
        let key = account_of(r, by_project);
        if !visible(&key) {
            continue;
        }
        let (gpus, cpus) = held(r);
        let from = started.as_second().max(s0);
        let to = r.ended_at.unwrap_or(now).min(now).as_second();
        let mut at = from;
        while at < to {
            let i = ((at - s0) / step) as usize;
            let Some(p) = periods.get_mut(i) else { break };
            let end = (s0 + (i as i64 + 1) * step).min(to);
            let hours = (end - at) as f64 / 3600.0;
            p.gpu_hours += gpus * hours;
            p.cpu_hours += cpus * hours;
            let h = p.by.entry(key.clone()).or_default();
            h.gpu_hours += gpus * hours;
            h.cpu_hours += cpus * hours;
            at = end;
        }
    }
    UsageTimeline { start, step_secs: step as u64, periods, gpus_total: 0.0, cpus_total: 0.0 }
}

/// Sums jobs into one line per user or project. A job counts its requested GPUs and CPUs
/// (times its kernels) over the part of its run inside `[since, now]`.
pub fn aggregate(rows: &[JobRow], by_project: bool, since: Timestamp, now: Timestamp) -> Vec<UsageLine> {
    let mut lines: BTreeMap<String, (UsageLine, f64, u32)> = BTreeMap::new();
    for r in rows {
        let key = account_of(r, by_project);
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
                gpu_hours_used: None,
                cpu_hours_used: None,
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
            let (gpus, cpus) = held(r);
            line.gpu_hours += hours * gpus;
            line.cpu_hours += hours * cpus;
            if let Some(used) = &r.used {
                let run = r.ended_at.unwrap_or(now).duration_since(start).as_secs_f64();
                // The share of the run inside the period (all of it for a run of no length).
                let share = if run > 0.0 { (hours * 3600.0 / run).min(1.0) } else { 1.0 };
                let add = |sum: &mut Option<f64>, secs: Option<f64>| {
                    if let Some(s) = secs {
                        *sum = Some(sum.unwrap_or(0.0) + s * share / 3600.0);
                    }
                };
                add(&mut line.cpu_hours_used, used.cpu_seconds);
                add(&mut line.gpu_hours_used, used.gpu_seconds);
            }
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
            end_signal: None,
            hold: None,
            reason: None,
            pending_reason: None,
            nodes: vec![],
            submitter: None,
            stop: None,
            end_cause: None,
            used: None,
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

    #[test]
    fn a_timeline_splits_runs_over_periods_and_hides_what_may_not_be_seen() {
        let rows = vec![
            // 600..4200 with 4 GPUs (2 × 2 kernels): from 1200 on, in periods of 1200 s.
            row("bob", Some("vision"), JobState::Succeeded, (0, Some(600), Some(4200))),
            row("carol", None, JobState::Running, (0, Some(3000), None)),
        ];
        let tl = periods(&rows, false, t(1200), 1200, t(4800), |_| true);
        assert_eq!(tl.periods.len(), 3);
        let gpu: Vec<f64> = tl.periods.iter().map(|p| p.gpu_hours).collect();
        // bob: 1200 s × 4 GPUs in each of the first two, 1800..4200 → 1200/1200/600; carol from 3000.
        let h = |secs: f64| secs / 3600.0 * 4.0;
        assert!((gpu[0] - h(1200.0)).abs() < 1e-9, "{gpu:?}");
        assert!((gpu[1] - (h(1200.0) + h(600.0))).abs() < 1e-9, "{gpu:?}");
        assert!((gpu[2] - (h(600.0) + h(1200.0))).abs() < 1e-9, "{gpu:?}");
        assert_eq!(tl.periods[2].by.len(), 2);
        let only_bob = periods(&rows, false, t(1200), 1200, t(4800), |n| n == "bob");
        assert!(only_bob.periods.iter().all(|p| !p.by.contains_key("carol")));
        assert!((only_bob.periods[2].gpu_hours - h(600.0)).abs() < 1e-9, "totals hold only what is visible");
    }
}
