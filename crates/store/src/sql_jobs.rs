//! A batch's job changes ([`crate::Change`]) and the job list's filter, for both SQL adapters
//! (expanded in `sqlite.rs` and `postgres.rs`, see `sql_rows.rs`). Transitions are a
//! compare-and-set on the current state: `UPDATE ... WHERE id = ? AND state = ?`, and the history
//! row is written only when that UPDATE matched; the adapter decides how many round trips that
//! takes (`super::update_then_insert`, `super::run_all`).

/// This module's items, for the adapter module it is expanded in (`super`).
macro_rules! items {
    () => {
        use berth_model::{EndCause, JobId, JobState, KernelUsage, StopCause};
        use jiff::Timestamp;
        use sqlx::Row;

        use super::{DbConn, GREATEST, NAME_CONTAINS, run_all, sql, update_then_insert};
        use crate::rows::{Arg, Stmt, to_json, ts};
        use crate::{JobFilter, Result, StoreError};

        /// Records who asked a job to stop (see `rows::stop_cause` for the columns).
        pub(crate) async fn set_stop(tx: &mut DbConn, job_id: JobId, cause: &StopCause) -> Result<()> {
            let (by, for_job, action, idle, scaled_to) = stop_columns(cause);
            let done = sqlx::query(&sql(
                "UPDATE jobs SET cancelled_by = ?, preempted_by = ?, preempt_action = ?, idle_stop_secs = ?, \
                 scaled_down_to = ? WHERE id = ?",
            ))
            .bind(by)
            .bind(for_job)
            .bind(action)
            .bind(idle)
            .bind(scaled_to)
            .bind(job_id)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() != 1 {
                return Err(StoreError::NotFound(format!("job {job_id}")));
            }
            Ok(())
        }

        /// Holds pending job `job_id` (`Some`) or releases it (`None`, stored as `released`, so that
        /// a job submitted held stays released: see `rows::hold`). `Conflict` unless PENDING.
        pub(crate) async fn set_hold(tx: &mut DbConn, job_id: JobId, hold: Option<berth_model::Hold>) -> Result<()> {
            let done = sqlx::query(&sql("UPDATE jobs SET hold = ? WHERE id = ? AND state = ?"))
                .bind(crate::rows::hold_column(hold))
                .bind(job_id)
                .bind(JobState::Pending.as_str())
                .execute(&mut *tx)
                .await?;
            if done.rows_affected() == 1 {
                return Ok(());
            }
            let actual: String = sqlx::query_scalar(&sql("SELECT state FROM jobs WHERE id = ?"))
                .bind(job_id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::NotFound(format!("job {job_id}")))?;
            Err(StoreError::Conflict { job_id, expected: JobState::Pending, actual })
        }

        /// The stop columns of `cause`: `cancelled_by`, `preempted_by`, `preempt_action`,
        /// `idle_stop_secs`, `scaled_down_to`.
        #[allow(clippy::type_complexity)]
        pub(crate) fn stop_columns(
            cause: &StopCause,
        ) -> (Option<&str>, Option<i64>, Option<&str>, Option<i64>, Option<i64>) {
            match cause {
                StopCause::Cancelled { by } => (Some(by.as_str()), None, None, None, None),
                StopCause::Preempted { by_job, action } => (None, Some(*by_job), Some(action.as_str()), None, None),
                StopCause::Idle { idle_secs } => (None, None, None, Some(*idle_secs as i64), None),
                // A requeue asked for by a user: the canceller's column with the requeue action and
                // no preemptor (the columns' CHECK allows it, so no migration).
                StopCause::Requeued { by } => (Some(by.as_str()), None, Some("requeue"), None, None),
                // The endpoint that stopped it in the canceller's column.
                StopCause::ScaledDown { endpoint, wants } => {
                    (Some(endpoint.as_str()), None, None, None, Some(i64::from(*wants)))
                }
            }
        }

        /// The fields of a [`crate::Change::Transition`].
        pub(crate) struct Move<'a> {
            pub job_id: JobId,
            pub from: JobState,
            pub to: JobState,
            pub at: Timestamp,
            pub reason: &'a str,
            pub exit_code: Option<i32>,
            pub end_signal: Option<i32>,
            pub end: Option<EndCause>,
        }

        /// Applies one transition inside `tx` (compare-and-set on the state). The old row is read
        /// only to explain a failure.
        pub(crate) async fn transition(tx: &mut DbConn, mv: Move<'_>) -> Result<()> {
            let Move { job_id, from, to, at, reason, exit_code, end_signal, end } = mv;
            if !from.can_become(to) {
                return Err(StoreError::InvalidTransition { job_id, from, to });
            }
            let requeue = to == JobState::Pending && from != JobState::Pending;
            let started_at = if requeue {
                "NULL"
            } else if to == JobState::Running {
                "COALESCE(started_at, ?)"
            } else {
                "started_at"
            };
            let ended_at = if to.is_terminal() { "?" } else { "ended_at" };
            let exit = if to.is_terminal() && exit_code.is_some() { "?" } else { "exit_code" };
            let signal = if to.is_terminal() && end_signal.is_some() { "?" } else { "end_signal" };
            let attempt = if requeue { "attempt + 1" } else { "attempt" };
            let pending = if from == JobState::Pending && to != JobState::Pending { "NULL" } else { "pending_reason" };
            let end_cause = if to.is_terminal() && end.is_some() { "?" } else { "end_cause" };
            let stop = if requeue {
                ", cancelled_by = NULL, preempted_by = NULL, preempt_action = NULL, idle_stop_secs = NULL, \
                 scaled_down_to = NULL"
            } else {
                ""
            };
            let mut args: Vec<Arg> = vec![to.as_str().into(), reason.into()];
            if to == JobState::Running && !requeue {
                args.push(ts(at).into());
            }
            if to.is_terminal() {
                args.push(ts(at).into());
                args.extend(exit_code.map(|c| Arg::from(c as i64)));
                args.extend(end_signal.map(|c| Arg::from(c as i64)));
                args.extend(end.map(|e| Arg::from(e.as_str())));
            }
            args.extend([job_id.into(), from.as_str().into()]);
            let update = Stmt {
                sql: format!(
                    "UPDATE jobs SET state = ?, reason = ?, started_at = {started_at}, ended_at = {ended_at}, \
                     exit_code = {exit}, end_signal = {signal}, attempt = {attempt}, pending_reason = {pending}, end_cause = \
                     {end_cause}{stop} \
                     WHERE id = ? AND state = ?"
                ),
                args,
            };
            let insert = Stmt {
                sql: "INSERT INTO transitions (job_id, at, from_state, to_state, reason) SELECT ?, ?, ?, ?, ?".into(),
                args: vec![job_id.into(), ts(at).into(), from.as_str().into(), to.as_str().into(), reason.into()],
            };
            if update_then_insert(tx, update, insert).await? {
                return Ok(());
            }
            let cur = sqlx::query(&sql("SELECT state FROM jobs WHERE id = ?"))
                .bind(job_id)
                .fetch_optional(&mut *tx)
                .await?
                .ok_or_else(|| StoreError::NotFound(format!("job {job_id}")))?;
            let actual: String = cur.try_get("state")?;
            Err(StoreError::Conflict { job_id, expected: from, actual })
        }

        /// Records a kernel's end: its exit code and what it used, which is also added to its job's
        /// totals (a figure unknown for every kernel stays NULL). Times add up over every kernel and
        /// attempt; the job's peak memory is the largest of its attempts' sums of kernel peaks.
        pub(crate) async fn kernel_exit(
            tx: &mut DbConn,
            job_id: JobId,
            attempt: u32,
            index: u32,
            exit_code: Option<i32>,
            usage: Option<&KernelUsage>,
        ) -> Result<()> {
            let u = usage.copied().unwrap_or_default();
            let peak = u.memory_peak_bytes.map(|b| b.min(i64::MAX as u64) as i64);
            let done = sqlx::query(&sql(
                "UPDATE kernels SET exit_code = ?, cpu_seconds = ?, memory_peak_bytes = ?, gpu_seconds = ? \
                 WHERE job_id = ? AND attempt = ? AND idx = ?",
            ))
            .bind(exit_code.map(|c| c as i64))
            .bind(u.cpu_seconds)
            .bind(peak)
            .bind(u.gpu_seconds)
            .bind(job_id)
            .bind(attempt as i64)
            .bind(index as i64)
            .execute(&mut *tx)
            .await?;
            if done.rows_affected() != 1 {
                return Err(StoreError::NotFound(format!("kernel {index} of job {job_id} attempt {attempt}")));
            }
            if u.is_known() {
                // NULL + x is NULL: a figure starts from the first kernel that knows it.
                let q = format!(
                    "UPDATE jobs SET used_cpu_seconds = CASE WHEN ?1 IS NULL THEN used_cpu_seconds \
                         ELSE COALESCE(used_cpu_seconds, 0) + ?1 END, \
                     used_memory_peak_bytes = CASE WHEN ?2 IS NULL THEN used_memory_peak_bytes \
                         ELSE {GREATEST}(COALESCE(used_memory_peak_bytes, 0), (SELECT SUM(memory_peak_bytes) \
                         FROM kernels WHERE job_id = ?4 AND attempt = ?5)) END, \
                     used_gpu_seconds = CASE WHEN ?3 IS NULL THEN used_gpu_seconds \
                         ELSE COALESCE(used_gpu_seconds, 0) + ?3 END \
                     WHERE id = ?4"
                );
                let q = sql(&q);
                sqlx::query(&q)
                    .bind(u.cpu_seconds)
                    .bind(peak)
                    .bind(u.gpu_seconds)
                    .bind(job_id)
                    .bind(attempt as i64)
                    .execute(&mut *tx)
                    .await?;
            }
            Ok(())
        }

        /// Records the kernels of a job's attempt (replacing earlier ones) and the job's node list.
        pub(crate) async fn set_kernels(
            tx: &mut DbConn,
            job_id: JobId,
            attempt: u32,
            bindings: &[berth_model::Binding],
        ) -> Result<()> {
            let mut nodes: Vec<&str> = bindings.iter().map(|b| b.node.as_str()).collect();
            nodes.dedup();
            let mut stmts = vec![
                Stmt {
                    sql: "DELETE FROM kernels WHERE job_id = ? AND attempt = ?".into(),
                    args: vec![job_id.into(), (attempt as i64).into()],
                },
                Stmt {
                    sql: "UPDATE jobs SET nodes = ? WHERE id = ?".into(),
                    args: vec![nodes.join(",").as_str().into(), job_id.into()],
                },
            ];
            if !bindings.is_empty() {
                let mut args = Vec::with_capacity(bindings.len() * 5);
                for (i, b) in bindings.iter().enumerate() {
                    args.extend([job_id.into(), (attempt as i64).into(), (i as i64).into(), b.node.as_str().into()]);
                    args.push(to_json(b).as_str().into());
                }
                let values = vec!["(?, ?, ?, ?, ?)"; bindings.len()].join(", ");
                stmts.push(Stmt {
                    sql: format!("INSERT INTO kernels (job_id, attempt, idx, node, binding) VALUES {values}"),
                    args,
                });
            }
            run_all(tx, &stmts).await
        }

        /// The SQL (with `?` placeholders) and arguments of [`crate::Store::jobs`]; `None` when no job
        /// can match.
        pub(crate) fn jobs_query(filter: &JobFilter) -> Option<Stmt> {
            let mut q =
                format!("SELECT {} FROM jobs j JOIN users u ON u.id = j.user_id WHERE 1 = 1", crate::rows::JOB_COLUMNS);
            let mut args: Vec<Arg> = Vec::new();
            if let Some(u) = filter.user_id {
                args.push(u.into());
                if filter.projects.is_empty() {
                    q.push_str(" AND j.user_id = ?");
                } else {
                    q.push_str(" AND (j.user_id = ? OR (j.shared = TRUE AND j.project IN (");
                    q.push_str(&vec!["?"; filter.projects.len()].join(", "));
                    q.push_str(")))");
                    args.extend(filter.projects.iter().map(|p| Arg::from(p.as_str())));
                }
            }
            if let Some(states) = &filter.states {
                if states.is_empty() {
                    return None;
                }
                q.push_str(" AND j.state IN (");
                q.push_str(&vec!["?"; states.len()].join(", "));
                q.push(')');
                args.extend(states.iter().map(|s| Arg::from(s.as_str())));
            }
            for (cond, text) in [
                (" AND u.name = ?", &filter.owner),
                (" AND j.queue = ?", &filter.queue),
                (NAME_CONTAINS, &filter.name_contains),
            ] {
                if let Some(t) = text {
                    q.push_str(cond);
                    args.push(t.as_str().into());
                }
            }
            if let Some(b) = filter.before {
                q.push_str(" AND j.id < ?");
                args.push(b.into());
            }
            if let Some(a) = filter.array_id {
                q.push_str(" AND j.array_id = ?");
                args.push(a.into());
            }
            if let Some(i) = filter.array_index {
                q.push_str(" AND j.array_index = ?");
                args.push(i64::from(i).into());
            }
            if let Some(ids) = &filter.ids {
                if ids.is_empty() {
                    return None;
                }
                q.push_str(" AND j.id IN (");
                q.push_str(&vec!["?"; ids.len()].join(", "));
                q.push(')');
                args.extend(ids.iter().map(|&i| Arg::from(i)));
            }
            // A time window as sacct draws it: a job is in it unless it ended before it opened or
            // was submitted after it closed.
            if let Some(t) = filter.since {
                q.push_str(" AND (j.ended_at IS NULL OR j.ended_at >= ?)");
                args.push(crate::rows::ts(t).into());
            }
            if let Some(t) = filter.until {
                q.push_str(" AND j.submitted_at < ?");
                args.push(crate::rows::ts(t).into());
            }
            q.push_str(" ORDER BY j.id DESC");
            if let Some(l) = filter.limit {
                q.push_str(" LIMIT ?");
                args.push(i64::from(l).into());
            }
            Some(Stmt { sql: q, args })
        }
    };
}
pub(crate) use items;
