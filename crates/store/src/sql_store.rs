//! [`crate::Store`] for both SQL adapters (expanded in `sqlite.rs` and `postgres.rs` for their
//! `Adapter`, see `sql_rows.rs`): users, tokens, jobs, nodes, queues, usage and meta. Writes go
//! through the adapter's writer pool, reads through its reader pool.

/// This module's items, for the adapter module it is expanded in (`super`).
macro_rules! items {
    () => {
        use async_trait::async_trait;
        use berth_model::api::{NodeState, Transition};
        use berth_model::{JobId, JobSpec, JobState, UnixId};
        use jiff::Timestamp;
        use sqlx::Row;

        use super::shared_jobs::{Move, jobs_query, kernel_exit, set_hold, set_kernels, set_stop, transition};
        use super::shared_lease::check_fence;
        use super::shared_rows::{job_row, node_row, read_job, read_kernels, read_transitions, user_row};
        use super::{Adapter, DbConn, snapshot, sql};
        use crate::rows::{JOB_COLUMNS, bind_args, duplicate, from_ts, json, returned, to_json, ts};
        use crate::{
            Change, JobFilter, JobHistory, JobRow, KernelRow, NewJob, NodeRow, QueueRow, Result, Store, StoreError,
            UsageRow, UserRow,
        };

        #[async_trait]
        impl Store for Adapter {
            async fn create_user(&self, name: &str, role: &str, at: Timestamp) -> Result<UserRow> {
                let r = sqlx::query(&sql(
                    "INSERT INTO users (name, role, disabled, created_at) VALUES (?, ?, FALSE, ?) RETURNING *",
                ))
                .bind(name)
                .bind(role)
                .bind(ts(at))
                .fetch_all(&self.writer)
                .await
                .map_err(duplicate(|| format!("user {name}")))?;
                user_row(returned(&r)?)
            }

            async fn create_user_with_token(
                &self,
                name: &str,
                role: &str,
                hash: &str,
                label: &str,
                at: Timestamp,
            ) -> Result<UserRow> {
                let mut tx = self.writer.begin().await?;
                let rows = sqlx::query(&sql(
                    "INSERT INTO users (name, role, disabled, created_at) VALUES (?, ?, FALSE, ?) RETURNING *",
                ))
                .bind(name)
                .bind(role)
                .bind(ts(at))
                .fetch_all(&mut *tx)
                .await
                .map_err(duplicate(|| format!("user {name}")))?;
                let user = user_row(returned(&rows)?)?;
                sqlx::query(&sql(
                    "INSERT INTO api_tokens (hash, user_id, label, created_at) VALUES (?, ?, ?, ?)",
                ))
                .bind(hash)
                .bind(user.id)
                .bind(label)
                .bind(ts(at))
                .execute(&mut *tx)
                .await
                .map_err(duplicate(|| "api token".into()))?;
                tx.commit().await?;
                Ok(user)
            }

            async fn user_by_name(&self, name: &str) -> Result<Option<UserRow>> {
                let r = sqlx::query(&sql("SELECT * FROM users WHERE name = ?"))
                    .bind(name)
                    .fetch_optional(&self.reader)
                    .await?;
                r.as_ref().map(user_row).transpose()
            }

            async fn add_api_token(&self, user_id: i64, hash: &str, label: &str, at: Timestamp) -> Result<()> {
                sqlx::query(&sql(
                    "INSERT INTO api_tokens (hash, user_id, label, created_at) VALUES (?, ?, ?, ?)",
                ))
                .bind(hash)
                .bind(user_id)
                .bind(label)
                .bind(ts(at))
                .execute(&self.writer)
                .await
                .map_err(duplicate(|| "api token".into()))?;
                Ok(())
            }

            async fn user_by_token_hash(&self, hash: &str) -> Result<Option<UserRow>> {
                let r = sqlx::query(&sql(
                    "SELECT u.* FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = ?",
                ))
                .bind(hash)
                .fetch_optional(&self.reader)
                .await?;
                r.as_ref().map(user_row).transpose()
            }

            async fn add_join_token(&self, hash: &str, at: Timestamp) -> Result<()> {
                sqlx::query(&sql(
                    "INSERT INTO join_tokens (hash, created_at) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING",
                ))
                .bind(hash)
                .bind(ts(at))
                .execute(&self.writer)
                .await?;
                Ok(())
            }

            async fn join_token_exists(&self, hash: &str) -> Result<bool> {
                let r = sqlx::query(&sql("SELECT 1 FROM join_tokens WHERE hash = ?"))
                    .bind(hash)
                    .fetch_optional(&self.reader)
                    .await?;
                Ok(r.is_some())
            }

            async fn join_token_hashes(&self) -> Result<Vec<String>> {
                let rows = sqlx::query(&sql("SELECT hash FROM join_tokens ORDER BY created_at"))
                    .fetch_all(&self.reader)
                    .await?;
                rows.iter().map(|r| Ok(r.try_get("hash")?)).collect()
            }

            async fn insert_job(
                &self,
                user_id: i64,
                spec: &JobSpec,
                submitter: Option<UnixId>,
                at: Timestamp,
            ) -> Result<JobId> {
                let mut tx = self.writer.begin().await?;
                check_fence(self, &mut tx).await?;
                let id = insert_jobs_in(
                    &mut tx,
                    &[NewJob {
                        user_id,
                        spec,
                        submitter,
                        at,
                    }],
                )
                .await?[0];
                tx.commit().await?;
                Ok(id)
            }

            async fn insert_jobs(&self, jobs: &[NewJob<'_>]) -> Result<Vec<JobId>> {
                if jobs.is_empty() {
                    return Ok(Vec::new());
                }
                // SQLite: one transaction of `insert_jobs_in`; PostgreSQL: one statement (`pg_insert.rs`).
                super::insert_jobs(self, jobs).await
            }

            async fn insert_job_once(
                &self,
                user_id: i64,
                spec: &JobSpec,
                submitter: Option<UnixId>,
                at: Timestamp,
                key: &str,
            ) -> Result<(JobId, bool)> {
                let mut tx = self.writer.begin().await?;
                check_fence(self, &mut tx).await?;
                // Keys are kept for a day, like other APIs' idempotency keys.
                sqlx::query(&sql("DELETE FROM submit_keys WHERE user_id = ? AND at < ?"))
                    .bind(user_id)
                    .bind(ts(at) - SUBMIT_KEY_LIFE_MICROS)
                    .execute(&mut *tx)
                    .await?;
                let known = sqlx::query_scalar(&sql(
                    "SELECT job_id FROM submit_keys WHERE user_id = ? AND key = ?",
                ))
                .bind(user_id)
                .bind(key)
                .fetch_optional(&mut *tx)
                .await?;
                if let Some(id) = known {
                    return Ok((id, false));
                }
                let id = insert_jobs_in(
                    &mut tx,
                    &[NewJob {
                        user_id,
                        spec,
                        submitter,
                        at,
                    }],
                )
                .await?[0];
                let kept = sqlx::query(&sql(
                    "INSERT INTO submit_keys (user_id, key, job_id, at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
                ))
                .bind(user_id)
                .bind(key)
                .bind(id)
                .bind(ts(at))
                .execute(&mut *tx)
                .await?;
                if kept.rows_affected() == 0 {
                    // The same key committed meanwhile by a concurrent request: that job is the one.
                    drop(tx);
                    let id = sqlx::query_scalar(&sql(
                        "SELECT job_id FROM submit_keys WHERE user_id = ? AND key = ?",
                    ))
                    .bind(user_id)
                    .bind(key)
                    .fetch_one(&self.writer)
                    .await?;
                    return Ok((id, false));
                }
                tx.commit().await?;
                Ok((id, true))
            }

            async fn job(&self, id: JobId) -> Result<Option<JobRow>> {
                read_job(&mut *self.reader.acquire().await?, id).await
            }

            async fn job_history(&self, id: JobId) -> Result<Option<JobHistory>> {
                // One read transaction: the row, its kernels and its history from one snapshot (as
                // separate reads, a change committed between them showed a TERMINATING row beside a
                // history that had already moved on).
                let mut tx = snapshot(&self.reader).await?;
                let Some(job) = read_job(&mut tx, id).await? else {
                    return Ok(None);
                };
                let kernels = read_kernels(&mut tx, id).await?;
                let transitions = read_transitions(&mut tx, id).await?;
                tx.commit().await?;
                Ok(Some(JobHistory {
                    job,
                    kernels,
                    transitions,
                }))
            }

            async fn jobs(&self, filter: &JobFilter) -> Result<Vec<JobRow>> {
                let Some(q) = jobs_query(filter) else {
                    return Ok(Vec::new());
                };
                let text = sql(&q.sql);
                let rows = bind_args!(sqlx::query(&text), &q.args)
                    .fetch_all(&self.reader)
                    .await?;
                rows.iter().map(job_row).collect()
            }

            async fn jobs_active_since(&self, since: Timestamp) -> Result<Vec<JobRow>> {
                let q = format!(
                    "SELECT {JOB_COLUMNS} FROM jobs j JOIN users u ON u.id = j.user_id \
                     WHERE j.submitted_at >= ? OR j.ended_at IS NULL OR j.ended_at >= ? ORDER BY j.id"
                );
                // One snapshot: a job archived meanwhile is read in exactly one of the two tables.
                let mut tx = snapshot(&self.reader).await?;
                let rows = sqlx::query(&sql(&q))
                    .bind(ts(since))
                    .bind(ts(since))
                    .fetch_all(&mut *tx)
                    .await?;
                let mut jobs = rows.iter().map(job_row).collect::<Result<Vec<_>>>()?;
                jobs.extend(super::shared_retention::archived_since(&mut tx, since).await?);
                tx.commit().await?;
                jobs.sort_by_key(|j| j.id);
                Ok(jobs)
            }

            async fn unfinished_jobs(&self) -> Result<Vec<JobRow>> {
                let live: Vec<&str> = JobState::ALL
                    .iter()
                    .filter(|s| !s.is_terminal())
                    .map(|s| s.as_str())
                    .collect();
                let text = format!(
                    "SELECT {JOB_COLUMNS} FROM jobs j JOIN users u ON u.id = j.user_id WHERE j.state IN ({}) ORDER \
                     BY j.id",
                    vec!["?"; live.len()].join(", ")
                );
                let text = sql(&text);
                let mut q = sqlx::query(&text);
                for s in live {
                    q = q.bind(s);
                }
                let rows = q.fetch_all(&self.reader).await?;
                rows.iter().map(job_row).collect()
            }

            async fn job_count(&self) -> Result<u64> {
                let n: i64 = sqlx::query_scalar(&sql("SELECT COUNT(*) FROM jobs"))
                    .fetch_one(&self.reader)
                    .await?;
                Ok(n.max(0) as u64)
            }

            async fn transitions(&self, id: JobId) -> Result<Vec<Transition>> {
                read_transitions(&mut *self.reader.acquire().await?, id).await
            }

            async fn kernels(&self, id: JobId) -> Result<Vec<KernelRow>> {
                read_kernels(&mut *self.reader.acquire().await?, id).await
            }

            async fn apply(&self, changes: &[Change]) -> Result<()> {
                if changes.is_empty() {
                    return Ok(());
                }
                // Dropping `tx` on an early return rolls everything back.
                let mut tx = self.writer.begin().await?;
                check_fence(self, &mut tx).await?;
                super::apply_changes(&mut tx, changes).await?;
                tx.commit().await?;
                Ok(())
            }

            async fn upsert_node(&self, n: &NodeRow) -> Result<()> {
                let mut tx = self.writer.begin().await?;
                check_fence(self, &mut tx).await?;
                sqlx::query(&sql(
                    "INSERT INTO nodes (name, queue, topology, version, state, last_heartbeat, address) \
                     VALUES (?, ?, ?, ?, ?, ?, ?) \
                     ON CONFLICT (name) DO UPDATE SET queue = excluded.queue, topology = excluded.topology, \
                     version = excluded.version, state = excluded.state, last_heartbeat = excluded.last_heartbeat, \
                     address = excluded.address",
                ))
                .bind(&n.name)
                .bind(&n.queue)
                .bind(to_json(&n.topology))
                .bind(&n.version)
                .bind(n.state.as_str())
                .bind(n.last_heartbeat.map(ts))
                .bind(&n.address)
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn set_node_drain(&self, name: &str, reason: Option<&str>) -> Result<()> {
                let mut tx = self.writer.begin().await?;
                check_fence(self, &mut tx).await?;
                let done = sqlx::query(&sql("UPDATE nodes SET drain_reason = ? WHERE name = ?"))
                    .bind(reason)
                    .bind(name)
                    .execute(&mut *tx)
                    .await?;
                one_node(done.rows_affected(), name)?;
                Ok(tx.commit().await?)
            }

            async fn set_node_state(
                &self,
                name: &str,
                state: NodeState,
                last_heartbeat: Option<Timestamp>,
            ) -> Result<()> {
                let mut tx = self.writer.begin().await?;
                check_fence(self, &mut tx).await?;
                let done = sqlx::query(&sql(
                    "UPDATE nodes SET state = ?, last_heartbeat = COALESCE(?, last_heartbeat) WHERE name = ?",
                ))
                .bind(state.as_str())
                .bind(last_heartbeat.map(ts))
                .bind(name)
                .execute(&mut *tx)
                .await?;
                one_node(done.rows_affected(), name)?;
                Ok(tx.commit().await?)
            }

            async fn nodes(&self) -> Result<Vec<NodeRow>> {
                let rows = sqlx::query(&sql("SELECT * FROM nodes ORDER BY name"))
                    .fetch_all(&self.reader)
                    .await?;
                rows.iter().map(node_row).collect()
            }

            async fn queues(&self) -> Result<Vec<QueueRow>> {
                let rows = sqlx::query(&sql("SELECT * FROM queues ORDER BY name"))
                    .fetch_all(&self.reader)
                    .await?;
                rows.iter()
                    .map(|r| {
                        Ok(QueueRow {
                            name: r.try_get("name")?,
                            policy: json("queue policy", r.try_get::<&str, _>("policy")?)?,
                            seed: r.try_get("seed")?,
                            updated_at: from_ts(r.try_get("updated_at")?)?,
                        })
                    })
                    .collect()
            }

            async fn put_queue(&self, q: &QueueRow) -> Result<()> {
                sqlx::query(&sql(
                    "INSERT INTO queues (name, policy, seed, updated_at) VALUES (?, ?, ?, ?) ON CONFLICT (name) \
                     DO UPDATE SET policy = excluded.policy, seed = excluded.seed, updated_at = excluded.updated_at",
                ))
                .bind(&q.name)
                .bind(to_json(&q.policy))
                .bind(&q.seed)
                .bind(ts(q.updated_at))
                .execute(&self.writer)
                .await?;
                Ok(())
            }

            async fn usage(&self) -> Result<Vec<UsageRow>> {
                let rows = sqlx::query(&sql("SELECT * FROM usage ORDER BY kind, name"))
                    .fetch_all(&self.reader)
                    .await?;
                rows.iter()
                    .map(|r| {
                        Ok(UsageRow {
                            kind: r.try_get("kind")?,
                            name: r.try_get("name")?,
                            value: r.try_get("value")?,
                            at: from_ts(r.try_get("at")?)?,
                        })
                    })
                    .collect()
            }

            async fn meta_get(&self, key: &str) -> Result<Option<String>> {
                let r = sqlx::query(&sql("SELECT value FROM meta WHERE key = ?"))
                    .bind(key)
                    .fetch_optional(&self.reader)
                    .await?;
                Ok(r.map(|r| r.try_get("value")).transpose()?)
            }

            async fn meta_set(&self, key: &str, value: &str) -> Result<()> {
                sqlx::query(&sql(
                    "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = \
                     excluded.value",
                ))
                .bind(key)
                .bind(value)
                .execute(&self.writer)
                .await?;
                Ok(())
            }

            async fn backup(&self, to: &std::path::Path) -> Result<()> {
                super::backup(self, to).await
            }

            async fn close(&self) {
                self.writer.close().await;
                self.reader.close().await;
                self.lease_pool.close().await;
            }
        }

        /// An update of node `name` must have hit exactly its row.
        fn one_node(rows_affected: u64, name: &str) -> Result<()> {
            if rows_affected != 1 {
                return Err(StoreError::NotFound(format!("node {name}")));
            }
            Ok(())
        }

        /// How long a submit's idempotency key is kept (a day, in the store's microseconds).
        const SUBMIT_KEY_LIFE_MICROS: i64 = 86_400 * 1_000_000;

        /// Rows of one multi-row INSERT of [`insert_jobs_in`]: 12 arguments each, under SQLite's
        /// 32,766 and PostgreSQL's 65,535 bound arguments.
        const JOBS_PER_INSERT: usize = 500;

        /// Inserts PENDING jobs and their first transitions on `c`, two statements per
        /// [`JOBS_PER_INSERT`] jobs: their ids, in `jobs`' order.
        pub(super) async fn insert_jobs_in(c: &mut DbConn, jobs: &[NewJob<'_>]) -> Result<Vec<JobId>> {
            let mut ids = Vec::with_capacity(jobs.len());
            for part in jobs.chunks(JOBS_PER_INSERT) {
                let rows = vec!["(?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?)"; part.len()].join(", ");
                let text = format!(
                    "INSERT INTO jobs (user_id, spec, queue, priority, state, attempt, submitted_at, project, shared, \
                     submitter_uid, submitter_gid, array_id, array_index) VALUES {rows} RETURNING id"
                );
                let text = sql(&text);
                let mut q = sqlx::query(&text);
                for j in part {
                    let (spec, submitter) = (j.spec, j.submitter);
                    q = q
                        .bind(j.user_id)
                        .bind(to_json(spec))
                        .bind(spec.queue_name())
                        .bind(spec.priority as i64)
                        .bind(JobState::Pending.as_str())
                        .bind(ts(j.at))
                        .bind(spec.project.as_deref().unwrap_or(""))
                        .bind(spec.shared)
                        .bind(submitter.map(|s| s.uid as i64))
                        .bind(submitter.map(|s| s.gid as i64))
                        .bind(spec.array_task.map(|t| t.array_id))
                        .bind(spec.array_task.map(|t| i64::from(t.index)));
                }
                let returned = q.fetch_all(&mut *c).await.map_err(crate::rows::duplicate(|| {
                    let tasks: Vec<String> = part
                        .iter()
                        .filter_map(|j| j.spec.array_task)
                        .map(|t| format!("{}_{}", t.array_id, t.index))
                        .collect();
                    format!("array task {}", tasks.join(", "))
                }))?;
                let mut new: Vec<JobId> = returned
                    .iter()
                    .map(|r| r.try_get("id"))
                    .collect::<Result<_, _>>()?;
                if new.len() != part.len() {
                    return Err(StoreError::Corrupt(format!(
                        "{} jobs inserted, {} ids returned",
                        part.len(),
                        new.len()
                    )));
                }
                // One statement numbers its rows one after the other in the order of VALUES (SQLite's
                // single writer, PostgreSQL's nextval per row as it is inserted); RETURNING's order is
                // not promised, so the ids are put in order and matched to the rows by rank.
                new.sort_unstable();
                let rows = vec!["(?, ?, NULL, ?, ?)"; part.len()].join(", ");
                let text = format!("INSERT INTO transitions (job_id, at, from_state, to_state, reason) VALUES {rows}");
                let text = sql(&text);
                let mut q = sqlx::query(&text);
                for (j, id) in part.iter().zip(&new) {
                    q = q
                        .bind(*id)
                        .bind(ts(j.at))
                        .bind(JobState::Pending.as_str())
                        .bind("submitted");
                }
                q.execute(&mut *c).await?;
                ids.extend(new);
            }
            Ok(ids)
        }

        /// Applies `changes` one at a time, in order, inside the caller's transaction: one statement
        /// (or one query) per change. SQLite's whole `apply` (in-process, a statement costs no round
        /// trip), and PostgreSQL's for a single change (`pg_batch.rs` writes larger batches).
        pub(super) async fn apply_each(tx: &mut DbConn, changes: &[Change]) -> Result<()> {
            for c in changes {
                match c {
                    Change::Transition {
                        job_id,
                        from,
                        to,
                        at,
                        reason,
                        exit_code,
                        end_signal,
                        end,
                    } => {
                        let mv = Move {
                            job_id: *job_id,
                            from: *from,
                            to: *to,
                            at: *at,
                            reason,
                            exit_code: *exit_code,
                            end_signal: *end_signal,
                            end: *end,
                        };
                        transition(tx, mv).await?;
                    }
                    Change::Stop { job_id, cause } => set_stop(&mut *tx, *job_id, cause).await?,
                    Change::SetKernels {
                        job_id,
                        attempt,
                        bindings,
                    } => {
                        set_kernels(&mut *tx, *job_id, *attempt, bindings).await?;
                    }
                    Change::KernelExit {
                        job_id,
                        attempt,
                        index,
                        exit_code,
                        usage,
                    } => {
                        kernel_exit(&mut *tx, *job_id, *attempt, *index, *exit_code, usage.as_ref()).await?;
                    }
                    Change::Usage(u) => {
                        sqlx::query(&sql(
                            "INSERT INTO usage (kind, name, value, at) VALUES (?, ?, ?, ?) \
                             ON CONFLICT (kind, name) DO UPDATE SET value = excluded.value, at = excluded.at",
                        ))
                        .bind(&u.kind)
                        .bind(&u.name)
                        .bind(u.value)
                        .bind(ts(u.at))
                        .execute(&mut *tx)
                        .await?;
                    }
                    Change::Hold { job_id, hold } => set_hold(&mut *tx, *job_id, *hold).await?,
                    Change::PendingReason { job_id, reason } => {
                        let done = sqlx::query(&sql("UPDATE jobs SET pending_reason = ? WHERE id = ?"))
                            .bind(reason.as_ref().map(to_json))
                            .bind(job_id)
                            .execute(&mut *tx)
                            .await?;
                        if done.rows_affected() != 1 {
                            return Err(StoreError::NotFound(format!("job {job_id}")));
                        }
                    }
                }
            }
            Ok(())
        }
    };
}
pub(crate) use items;
