//! [`crate::Retention`] for both SQL adapters (expanded in `sqlite.rs` and `postgres.rs`, see
//! `sql_rows.rs`): moving finished jobs from `jobs`, `transitions` and `kernels` into
//! `job_archive`, and reading archived jobs back as [`crate::JobRow`]s for the usage reports and
//! `berth show`. A batch is read, archived and deleted in one write transaction, so a job is in
//! exactly one of the two places at every commit.

/// This module's items, for the adapter module it is expanded in (`super`).
macro_rules! items {
    () => {
        use async_trait::async_trait;
        use berth_model::{JobId, JobSpec, JobState, ResourceRequest};
        use jiff::Timestamp;
        use sqlx::Row;

        use super::shared_lease::check_fence;
        use super::shared_rows::{job_row, measured};
        use super::{Adapter, DbConn, DbRow, sql};
        use crate::retention::Retention;
        use crate::rows::{JOB_COLUMNS, end_cause, from_ts, node_list, opt_ts, state, ts};
        use crate::{JobRow, Result, StoreError};

        /// The archive's columns, in the order [`insert_archived`] binds them.
        const ARCHIVE_COLUMNS: &str = "id, user_id, project, shared, queue, name, state, end_cause, exit_code, reason, \
             attempt, submitted_at, started_at, ended_at, node_count, kernels_per_node, cpu_milli, mem_bytes, \
             gpu_milli, \
             nodes, used_cpu_seconds, used_memory_peak_bytes, used_gpu_seconds";
        const ARCHIVE_WIDTH: usize = 23;

        /// Rows per INSERT: well under either database's limit on arguments.
        const INSERT_CHUNK: usize = 100;

        /// An archived row as a [`JobRow`] (see [`Retention::archived_job`]).
        fn archived_row(r: &DbRow) -> Result<JobRow> {
            let count = |col: &str| -> Result<u32> {
                let v: i64 = r.try_get(col)?;
                u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("archived job {col} {v}")))
            };
            let amount = |col: &str| -> Result<u64> { Ok(r.try_get::<i64, _>(col)?.max(0) as u64) };
            let queue: String = r.try_get("queue")?;
            let mut spec = JobSpec::command(Vec::<String>::new());
            spec.name = r.try_get("name")?;
            spec.project = Some(r.try_get::<String, _>("project")?).filter(|p| !p.is_empty());
            spec.shared = r.try_get("shared")?;
            spec.queue = Some(queue.clone());
            spec.nodes = count("node_count")?;
            spec.kernels = count("kernels_per_node")?;
            spec.resources = ResourceRequest {
                cpu_milli: amount("cpu_milli")?,
                mem_bytes: amount("mem_bytes")?,
                gpu_milli: amount("gpu_milli")?,
            };
            Ok(JobRow {
                id: r.try_get("id")?,
                user_id: r.try_get("user_id")?,
                user: r.try_get("user_name")?,
                spec,
                queue,
                priority: 0,
                state: state(r.try_get::<&str, _>("state")?)?,
                attempt: count("attempt")?,
                submitted_at: from_ts(r.try_get("submitted_at")?)?,
                started_at: opt_ts(r.try_get("started_at")?)?,
                ended_at: Some(from_ts(r.try_get("ended_at")?)?),
                exit_code: r.try_get::<Option<i64>, _>("exit_code")?.map(|v| v as i32),
                // The archive keeps the code only: sacct reads a killed job's signal from its state.
                end_signal: None,
                hold: None,
                reason: r.try_get("reason")?,
                pending_reason: None,
                nodes: node_list(r.try_get("nodes")?),
                submitter: None,
                stop: None,
                end_cause: end_cause(r.try_get("end_cause")?)?,
                used: measured(r, "used_cpu_seconds", "used_memory_peak_bytes", "used_gpu_seconds")?,
            })
        }

        /// Archived jobs submitted or ended at or after `since`, by id (read inside the caller's
        /// snapshot, beside the hot jobs).
        pub(crate) async fn archived_since(c: &mut DbConn, since: Timestamp) -> Result<Vec<JobRow>> {
            let q = "SELECT a.*, u.name AS user_name FROM job_archive a JOIN users u ON u.id = a.user_id \
                     WHERE a.submitted_at >= ? OR a.ended_at >= ? ORDER BY a.id";
            let rows = sqlx::query(&sql(q)).bind(ts(since)).bind(ts(since)).fetch_all(&mut *c).await?;
            rows.iter().map(archived_row).collect()
        }

        /// Writes `jobs` (finished, each with an end) into the archive.
        async fn insert_archived(c: &mut DbConn, jobs: &[JobRow]) -> Result<()> {
            let one = format!("({})", vec!["?"; ARCHIVE_WIDTH].join(", "));
            for chunk in jobs.chunks(INSERT_CHUNK) {
                let q = format!(
                    "INSERT INTO job_archive ({ARCHIVE_COLUMNS}) VALUES {}",
                    vec![one.as_str(); chunk.len()].join(", ")
                );
                let q = sql(&q);
                let mut query = sqlx::query(&q);
                for j in chunk {
                    let ended =
                        j.ended_at.ok_or_else(|| StoreError::Corrupt(format!("finished job {} has no end", j.id)))?;
                    let big = |v: u64| v.min(i64::MAX as u64) as i64;
                    let used = j.used.unwrap_or_default();
                    query = query
                        .bind(j.id)
                        .bind(j.user_id)
                        .bind(j.spec.project.clone().unwrap_or_default())
                        .bind(j.spec.shared)
                        .bind(j.queue.clone())
                        .bind(j.spec.name.clone())
                        .bind(j.state.as_str())
                        .bind(j.end_cause.map(|e| e.as_str()))
                        .bind(j.exit_code.map(i64::from))
                        .bind(j.reason.clone())
                        .bind(i64::from(j.attempt))
                        .bind(ts(j.submitted_at))
                        .bind(j.started_at.map(ts))
                        .bind(ts(ended))
                        .bind(i64::from(j.spec.nodes.max(1)))
                        .bind(i64::from(j.spec.kernels.max(1)))
                        .bind(big(j.spec.resources.cpu_milli))
                        .bind(big(j.spec.resources.mem_bytes))
                        .bind(big(j.spec.resources.gpu_milli))
                        .bind(j.nodes.join(","))
                        .bind(used.cpu_seconds)
                        .bind(used.memory_peak_bytes.map(big))
                        .bind(used.gpu_seconds);
                }
                query.execute(&mut *c).await?;
            }
            Ok(())
        }

        #[async_trait]
        impl Retention for Adapter {
            async fn archive_finished(&self, before: Timestamp, limit: u32) -> Result<u64> {
                if limit == 0 {
                    return Ok(0);
                }
                let done: Vec<&str> = JobState::ALL.iter().filter(|s| s.is_terminal()).map(|s| s.as_str()).collect();
                let q = format!(
                    "SELECT {JOB_COLUMNS} FROM jobs j JOIN users u ON u.id = j.user_id \
                     WHERE j.state IN ({}) AND j.ended_at < ? ORDER BY j.ended_at, j.id LIMIT ?",
                    vec!["?"; done.len()].join(", ")
                );
                let q = sql(&q);
                // Dropping `tx` on an early return rolls the whole batch back.
                let mut tx = self.writer.begin().await?;
                check_fence(self, &mut tx).await?;
                let mut query = sqlx::query(&q);
                for s in &done {
                    query = query.bind(*s);
                }
                let rows = query.bind(ts(before)).bind(i64::from(limit)).fetch_all(&mut *tx).await?;
                let jobs = rows.iter().map(job_row).collect::<Result<Vec<_>>>()?;
                if jobs.is_empty() {
                    return Ok(0);
                }
                insert_archived(&mut tx, &jobs).await?;
                // The ids are integers read from the database: written inline, with no limit on
                // placeholders to mind.
                let ids = jobs.iter().map(|j| j.id.to_string()).collect::<Vec<_>>().join(", ");
                for (table, col) in [("kernels", "job_id"), ("transitions", "job_id"), ("jobs", "id")] {
                    sqlx::query(&format!("DELETE FROM {table} WHERE {col} IN ({ids})")).execute(&mut *tx).await?;
                }
                tx.commit().await?;
                Ok(jobs.len() as u64)
            }

            async fn archived_job(&self, id: JobId) -> Result<Option<JobRow>> {
                let q = "SELECT a.*, u.name AS user_name FROM job_archive a JOIN users u ON u.id = a.user_id WHERE \
                a.id = ?";
                let r = sqlx::query(&sql(q)).bind(id).fetch_optional(&self.reader).await?;
                r.as_ref().map(archived_row).transpose()
            }

            async fn archived_count(&self) -> Result<u64> {
                let n: i64 =
                    sqlx::query_scalar(&sql("SELECT COUNT(*) FROM job_archive")).fetch_one(&self.reader).await?;
                Ok(n.max(0) as u64)
            }
        }
    };
}
pub(crate) use items;
