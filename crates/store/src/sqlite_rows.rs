//! Reading the SQLite store's job and node rows: the column lists, the typed decoding of each
//! row (states, stop and end causes, submitters) and the per-job reads that `SqliteStore`
//! serves alone or, for a job's detail, in one read transaction; and the time and JSON
//! decoding every SQLite module shares.

use berth_model::api::{NodeState, Transition};
use std::str::FromStr;

use berth_model::{EndCause, JobId, JobState, KernelUsage, PreemptAction, StopCause, UnixId};
use jiff::Timestamp;
use sqlx::Row;
use sqlx::sqlite::SqliteRow;

use crate::{JobRow, KernelRow, NodeRow, Result, StoreError};

pub(crate) fn ts(t: Timestamp) -> i64 {
    t.as_microsecond()
}

pub(crate) fn from_ts(v: i64) -> Result<Timestamp> {
    Timestamp::from_microsecond(v).map_err(|e| StoreError::Corrupt(format!("timestamp {v}: {e}")))
}

pub(crate) fn opt_ts(v: Option<i64>) -> Result<Option<Timestamp>> {
    v.map(from_ts).transpose()
}

pub(crate) fn state(s: &str) -> Result<JobState> {
    JobState::from_str(s).map_err(StoreError::Corrupt)
}

pub(crate) fn json<T: serde::de::DeserializeOwned>(what: &str, s: &str) -> Result<T> {
    serde_json::from_str(s).map_err(|e| StoreError::Corrupt(format!("{what}: {e}")))
}

pub(crate) const JOB_COLUMNS: &str = "j.id, j.user_id, u.name AS user_name, j.spec, j.queue, j.priority, j.state, j.attempt, \
     j.submitted_at, j.started_at, j.ended_at, j.exit_code, j.reason, j.pending_reason, j.nodes, \
     j.submitter_uid, j.submitter_gid, j.cancelled_by, j.preempted_by, j.preempt_action, j.idle_stop_secs, j.end_cause, \
     j.used_cpu_seconds, j.used_memory_peak_bytes, j.used_gpu_seconds";

pub(crate) fn job_row(r: &SqliteRow) -> Result<JobRow> {
    let pending: Option<String> = r.try_get("pending_reason")?;
    Ok(JobRow {
        id: r.try_get("id")?,
        user_id: r.try_get("user_id")?,
        user: r.try_get("user_name")?,
        spec: json("job spec", r.try_get::<&str, _>("spec")?)?,
        queue: r.try_get("queue")?,
        priority: r.try_get::<i64, _>("priority")? as i32,
        state: state(r.try_get::<&str, _>("state")?)?,
        attempt: r.try_get::<i64, _>("attempt")? as u32,
        submitted_at: from_ts(r.try_get("submitted_at")?)?,
        started_at: opt_ts(r.try_get("started_at")?)?,
        ended_at: opt_ts(r.try_get("ended_at")?)?,
        exit_code: r.try_get::<Option<i64>, _>("exit_code")?.map(|v| v as i32),
        reason: r.try_get("reason")?,
        pending_reason: pending.as_deref().map(|p| json("pending reason", p)).transpose()?,
        nodes: r.try_get::<&str, _>("nodes")?.split(',').filter(|n| !n.is_empty()).map(str::to_string).collect(),
        submitter: submitter(r.try_get("submitter_uid")?, r.try_get("submitter_gid")?)?,
        stop: stop_cause(
            r.try_get("cancelled_by")?,
            r.try_get("preempted_by")?,
            r.try_get("preempt_action")?,
            r.try_get("idle_stop_secs")?,
        )?,
        end_cause: r
            .try_get::<Option<&str>, _>("end_cause")?
            .map(|c| EndCause::parse(c).ok_or_else(|| StoreError::Corrupt(format!("job end cause `{c}`"))))
            .transpose()?,
        used: measured(r, "used_cpu_seconds", "used_memory_peak_bytes", "used_gpu_seconds")?,
    })
}

/// Measured usage from three nullable columns (CPU seconds, peak bytes, GPU seconds); `None`
/// when all three are NULL.
pub(crate) fn measured(r: &SqliteRow, cpu: &str, peak: &str, gpu: &str) -> Result<Option<KernelUsage>> {
    let u = KernelUsage {
        cpu_seconds: r.try_get(cpu)?,
        memory_peak_bytes: r.try_get::<Option<i64>, _>(peak)?.map(|b| b.max(0) as u64),
        gpu_seconds: r.try_get(gpu)?,
        ..Default::default()
    };
    Ok(Some(u).filter(KernelUsage::is_known))
}

/// The stop columns: a canceller, or a preemptor with its action (both or neither).
pub(crate) fn stop_cause(
    by: Option<String>,
    for_job: Option<i64>,
    action: Option<&str>,
    idle: Option<i64>,
) -> Result<Option<StopCause>> {
    if let Some(secs) = idle {
        return match (by, for_job, action) {
            (None, None, None) => Ok(Some(StopCause::Idle { idle_secs: secs.max(0) as u64 })),
            (by, job, action) => Err(StoreError::Corrupt(format!(
                "job stop cause: idle_stop_secs {secs} with cancelled_by {by:?}, preempted_by {job:?}, \
                 preempt_action {action:?}"
            ))),
        };
    }
    Ok(match (by, for_job, action) {
        (None, None, None) => None,
        (Some(by), None, None) => Some(StopCause::Cancelled { by }),
        (None, Some(by_job), Some(a)) => {
            let action = PreemptAction::parse(a).ok_or_else(|| StoreError::Corrupt(format!("preempt action `{a}`")))?;
            Some(StopCause::Preempted { by_job, action })
        }
        (by, job, action) => {
            return Err(StoreError::Corrupt(format!(
                "job stop cause: cancelled_by {by:?}, preempted_by {job:?}, preempt_action {action:?}"
            )));
        }
    })
}

pub(crate) fn node_state(s: &str) -> Result<NodeState> {
    NodeState::parse(s).ok_or_else(|| StoreError::Corrupt(format!("node state `{s}`")))
}

/// A job's row (with its owner's name).
pub(crate) async fn read_job(c: &mut sqlx::SqliteConnection, id: JobId) -> Result<Option<JobRow>> {
    let sql = format!("SELECT {JOB_COLUMNS} FROM jobs j JOIN users u ON u.id = j.user_id WHERE j.id = ?");
    let r = sqlx::query(&sql).bind(id).fetch_optional(&mut *c).await?;
    r.as_ref().map(job_row).transpose()
}

/// A job's state changes, in order.
pub(crate) async fn read_transitions(c: &mut sqlx::SqliteConnection, id: JobId) -> Result<Vec<Transition>> {
    let rows = sqlx::query("SELECT at, from_state, to_state, reason FROM transitions WHERE job_id = ? ORDER BY seq")
        .bind(id)
        .fetch_all(&mut *c)
        .await?;
    rows.iter()
        .map(|r| {
            Ok(Transition {
                at: from_ts(r.try_get("at")?)?,
                from: r.try_get::<Option<&str>, _>("from_state")?.map(state).transpose()?,
                to: state(r.try_get("to_state")?)?,
                reason: r.try_get("reason")?,
            })
        })
        .collect()
}

/// A job's kernels, every attempt.
pub(crate) async fn read_kernels(c: &mut sqlx::SqliteConnection, id: JobId) -> Result<Vec<KernelRow>> {
    let rows =
        sqlx::query("SELECT * FROM kernels WHERE job_id = ? ORDER BY attempt, idx").bind(id).fetch_all(&mut *c).await?;
    rows.iter()
        .map(|r| {
            Ok(KernelRow {
                job_id: r.try_get("job_id")?,
                attempt: r.try_get::<i64, _>("attempt")? as u32,
                index: r.try_get::<i64, _>("idx")? as u32,
                node: r.try_get("node")?,
                binding: json("binding", r.try_get::<&str, _>("binding")?)?,
                exit_code: r.try_get::<Option<i64>, _>("exit_code")?.map(|v| v as i32),
                usage: measured(r, "cpu_seconds", "memory_peak_bytes", "gpu_seconds")?,
            })
        })
        .collect()
}

/// The `submitter_uid`/`submitter_gid` pair: both or neither, each a u32.
pub(crate) fn submitter(uid: Option<i64>, gid: Option<i64>) -> Result<Option<UnixId>> {
    match (uid, gid) {
        (None, None) => Ok(None),
        (Some(u), Some(g)) => match (u32::try_from(u), u32::try_from(g)) {
            (Ok(uid), Ok(gid)) => Ok(Some(UnixId { uid, gid })),
            _ => Err(StoreError::Corrupt(format!("job submitter uid {u} / gid {g} out of range"))),
        },
        _ => Err(StoreError::Corrupt("job submitter has a uid or a gid but not both".into())),
    }
}

pub(crate) fn node_row(r: &SqliteRow) -> Result<NodeRow> {
    Ok(NodeRow {
        name: r.try_get("name")?,
        queue: r.try_get("queue")?,
        topology: json("topology", r.try_get::<&str, _>("topology")?)?,
        version: r.try_get("version")?,
        state: node_state(r.try_get("state")?)?,
        last_heartbeat: opt_ts(r.try_get("last_heartbeat")?)?,
        address: r.try_get("address")?,
        drain_reason: r.try_get("drain_reason")?,
    })
}
