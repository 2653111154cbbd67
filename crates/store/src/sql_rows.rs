//! Reading job, kernel, node and user rows, for both SQL adapters. Each `sql_*.rs` file holds its
//! items in a macro, `items!`, that `crate::shared_sql!` expands once inside `sqlite.rs` and once
//! inside `postgres.rs`, as a module of each (`shared_rows` here): the code is written once and
//! compiled against each database's concrete row and connection types (`super::DbRow`,
//! `super::DbConn`, `super::Adapter`, the adapter's `sql()` and SQL fragments), with no generic
//! bounds over sqlx's traits. The per-job reads serve a job alone or, for its detail, inside one
//! read transaction.

/// This module's items, for the adapter module it is expanded in (`super`).
macro_rules! items {
    () => {
        use berth_model::api::Transition;
        use berth_model::{JobId, KernelUsage};
        use sqlx::Row;

        use super::{DbConn, DbRow, sql};
        use crate::rows::{
            JOB_COLUMNS, end_cause, from_ts, json, node_list, node_state, opt_ts, state, stop_cause, submitter,
        };
        use crate::{JobRow, KernelRow, NodeRow, Result, UserRow};

        pub(crate) fn job_row(r: &DbRow) -> Result<JobRow> {
            let pending: Option<String> = r.try_get("pending_reason")?;
            let spec: berth_model::JobSpec = json("job spec", r.try_get::<&str, _>("spec")?)?;
            Ok(JobRow {
                hold: crate::rows::hold(r.try_get("hold")?, spec.hold)?,
                end_signal: r.try_get::<Option<i64>, _>("end_signal")?.map(|v| v as i32),
                id: r.try_get("id")?,
                user_id: r.try_get("user_id")?,
                user: r.try_get("user_name")?,
                spec,
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
                nodes: node_list(r.try_get("nodes")?),
                submitter: submitter("job", r.try_get("submitter_uid")?, r.try_get("submitter_gid")?)?,
                stop: stop_cause(
                    r.try_get("cancelled_by")?,
                    r.try_get("preempted_by")?,
                    r.try_get("preempt_action")?,
                    r.try_get("idle_stop_secs")?,
                    r.try_get("scaled_down_to")?,
                )?,
                end_cause: end_cause(r.try_get("end_cause")?)?,
                used: measured(r, "used_cpu_seconds", "used_memory_peak_bytes", "used_gpu_seconds")?,
            })
        }

        /// Measured usage from three nullable columns (CPU seconds, peak bytes, GPU seconds); `None`
        /// when all three are NULL.
        pub(crate) fn measured(r: &DbRow, cpu: &str, peak: &str, gpu: &str) -> Result<Option<KernelUsage>> {
            let u = KernelUsage {
                cpu_seconds: r.try_get(cpu)?,
                memory_peak_bytes: r.try_get::<Option<i64>, _>(peak)?.map(|b| b.max(0) as u64),
                gpu_seconds: r.try_get(gpu)?,
                ..Default::default()
            };
            Ok(Some(u).filter(KernelUsage::is_known))
        }

        /// A job's row (with its owner's name).
        pub(crate) async fn read_job(c: &mut DbConn, id: JobId) -> Result<Option<JobRow>> {
            let q = format!("SELECT {JOB_COLUMNS} FROM jobs j JOIN users u ON u.id = j.user_id WHERE j.id = ?");
            let r = sqlx::query(&sql(&q)).bind(id).fetch_optional(&mut *c).await?;
            r.as_ref().map(job_row).transpose()
        }

        /// A job's state changes, in order.
        pub(crate) async fn read_transitions(c: &mut DbConn, id: JobId) -> Result<Vec<Transition>> {
            let rows = sqlx::query(&sql(
                "SELECT at, from_state, to_state, reason FROM transitions WHERE job_id = ? ORDER BY seq",
            ))
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
        pub(crate) async fn read_kernels(c: &mut DbConn, id: JobId) -> Result<Vec<KernelRow>> {
            let rows = sqlx::query(&sql("SELECT * FROM kernels WHERE job_id = ? ORDER BY attempt, idx"))
                .bind(id)
                .fetch_all(&mut *c)
                .await?;
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

        pub(crate) fn node_row(r: &DbRow) -> Result<NodeRow> {
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

        pub(crate) fn user_row(r: &DbRow) -> Result<UserRow> {
            Ok(UserRow {
                id: r.try_get("id")?,
                name: r.try_get("name")?,
                role: r.try_get("role")?,
                disabled: r.try_get("disabled")?,
                created_at: from_ts(r.try_get("created_at")?)?,
            })
        }
    };
}
pub(crate) use items;
