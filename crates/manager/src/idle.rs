//! The idle checker: an interactive session (a job serving apps) whose queue has an
//! `idle_timeout`, with no client attached and no app traffic for that long, is stopped and
//! ends TIMEOUT with the cause `idle` (`sessions.rs` keeps the activity). Also what `berth ps`
//! shows of it: the time a running job will be stopped, by its time limit or for being idle.

use std::sync::Arc;
use std::time::Duration;

use berth_model::api::{Deadline, DeadlineKind};
use berth_model::{JobId, JobState, StopCause};
use jiff::{SignedDuration, Timestamp};

use crate::manager::Manager;
use crate::state::Job;

/// How often sessions are checked: idle timeouts are minutes in practice, seconds in tests.
const TICK: Duration = Duration::from_secs(1);

pub async fn run(m: Arc<Manager>) {
    let mut shutdown = m.shutdown.clone();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(TICK) => {}
            _ = shutdown.changed() => break,
        }
        check(&m).await;
    }
}

/// When `job`'s session will be ended for being idle, if it is a running session with no
/// client attached in a queue with an idle timeout.
fn idle_deadline(m: &Manager, queues: &[berth_sched::QueueConfig], job: &Job) -> Option<(Timestamp, u64)> {
    if job.state != JobState::Running || !job.spec.is_session() {
        return None;
    }
    let timeout_ms = queues.iter().find(|q| q.name == job.queue)?.idle_timeout_ms?;
    let since = m.sessions.idle_since(job.id, job.attempt.started_at)?;
    let at = since.checked_add(SignedDuration::from_millis(timeout_ms)).ok()?;
    Some((at, (timeout_ms / 1000).max(0) as u64))
}

/// One round: stops the sessions idle past their queue's timeout.
pub async fn check(m: &Manager) {
    let queues = m.queues.all();
    let mut st = m.jobs.lock().await;
    let now = m.clock.now();
    let idle: Vec<(JobId, u64)> = st
        .live_jobs()
        .filter_map(|j| idle_deadline(m, &queues, j).filter(|(at, _)| *at <= now).map(|(_, secs)| (j.id, secs)))
        .collect();
    for (id, idle_secs) in idle {
        let reason = format!("idle for {}: stopping the session", berth_model::format_duration(idle_secs));
        tracing::info!(job = id, idle_secs, "stopping an idle session");
        if let Err(e) = m.jobs.stop_running(&mut st, id, StopCause::Idle { idle_secs }, reason).await {
            tracing::error!(job = id, "cannot stop an idle session: {e}");
        }
    }
    m.sessions.retain(|id| st.job(id).is_some_and(|j| j.state.holds_resources()));
}

/// The nearer of a running job's time limit and, for an idle session, its idle timeout.
pub fn deadline(m: &Manager, job: &Job) -> Option<Deadline> {
    let limit = job.time_limit_deadline();
    let idle = idle_deadline(m, &m.queues.all(), job).map(|(at, _)| Deadline { at, kind: DeadlineKind::Idle });
    match (limit, idle) {
        (Some(l), Some(i)) => Some(if i.at < l.at { i } else { l }),
        (l, i) => l.or(i),
    }
}
