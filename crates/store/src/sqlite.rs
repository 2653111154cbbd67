//! The SQLite adapter: every SQL statement for SQLite lives in this module.
//!
//! One writer pool of exactly one connection serialises all writes inside the process, so two
//! writers never race for the database lock (no `SQLITE_BUSY` under load); a separate reader
//! pool serves queries concurrently thanks to WAL. The SQL sticks to what PostgreSQL also
//! accepts (`RETURNING`, `ON CONFLICT`, plain types) so the other adapter can mirror it.

use std::path::Path;
use std::time::Duration;

use async_trait::async_trait;
use berth_model::api::{NodeState, Transition};
use berth_model::{EndCause, JobId, JobSpec, JobState, KernelUsage, StopCause, UnixId};
use jiff::Timestamp;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteRow, SqliteSynchronous};
use sqlx::{Row, SqlitePool};

use crate::sqlite_rows::{JOB_COLUMNS, from_ts, job_row, json, node_row, read_job, read_kernels, read_transitions, ts};
use crate::{
    Change, JobFilter, JobHistory, JobRow, KernelRow, NodeRow, QueueRow, Result, Store, StoreError, UsageRow, UserRow,
};

/// The SQLite store (a file in the data directory, WAL mode).
pub struct SqliteStore {
    pub(crate) writer: SqlitePool,
    pub(crate) reader: SqlitePool,
}

const READERS: u32 = 4;

impl SqliteStore {
    /// Opens (creating if needed) the database at `path` and runs the migrations.
    pub async fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        make_private(path.as_ref())?;
        let base = SqliteConnectOptions::new()
            .filename(path.as_ref())
            .journal_mode(SqliteJournalMode::Wal)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(Duration::from_secs(10))
            .foreign_keys(true);
        let writer = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            .acquire_timeout(Duration::from_secs(30))
            .after_release(|conn, _| Box::pin(async move { Ok(!left_in_transaction(conn).await) }))
            .connect_with(base.clone().create_if_missing(true))
            .await?;
        sqlx::migrate!("./migrations/sqlite").run(&writer).await?;
        let reader = SqlitePoolOptions::new()
            .max_connections(READERS)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(base.read_only(true))
            .await?;
        Ok(SqliteStore { writer, reader })
    }
}

/// Whether a connection going back to the pool is still inside a transaction, in sqlx's books or
/// in SQLite's. Then it must be closed (SQLite rolls back on close), never reused.
///
/// Why: when SQLite fails a statement or a `COMMIT` with `SQLITE_FULL` it may roll the whole
/// transaction back itself; sqlx's `ROLLBACK` on drop then fails ("no transaction is active")
/// and sqlx keeps counting the transaction as open, so the next `begin` became a `SAVEPOINT`
/// whose `RELEASE` never committed: a full disk turned into writes acknowledged and lost, with
/// the database locked for everyone else (issue 13). A fresh connection has neither problem.
async fn left_in_transaction(conn: &mut sqlx::SqliteConnection) -> bool {
    use sqlx::{Sqlite, TransactionManager};
    let sqlx_depth = <Sqlite as sqlx::Database>::TransactionManager::get_transaction_depth(conn);
    let in_sqlite = match conn.lock_handle().await {
        // SAFETY: the handle is a live connection, locked for this call; get_autocommit only reads.
        Ok(mut h) => unsafe { libsqlite3_sys::sqlite3_get_autocommit(h.as_raw_handle().as_ptr()) == 0 },
        Err(_) => true,
    };
    if sqlx_depth > 0 || in_sqlite {
        tracing::warn!(
            sqlx_depth,
            in_sqlite,
            "store: the writer connection was left inside a transaction; reopening it"
        );
        return true;
    }
    false
}

/// The database and its `-wal`/`-shm` files are the daemon's alone (0600): they hold every job's
/// spec, environment variables included. SQLite gives the side files the database file's mode,
/// so the file is made 0600 before SQLite first creates it, and files of an older install are
/// tightened.
fn make_private(db: &Path) -> Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let io = |e: std::io::Error, p: &Path| StoreError::Io(format!("{}: {e}", p.display()));
    std::fs::OpenOptions::new().append(true).create(true).mode(0o600).open(db).map_err(|e| io(e, db))?;
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = db.as_os_str().to_owned();
        p.push(suffix);
        let p = std::path::PathBuf::from(p);
        match std::fs::metadata(&p) {
            Ok(m) if m.permissions().mode() & 0o077 != 0 => {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).map_err(|e| io(e, &p))?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    // Model types always serialise (no maps with non-string keys, no failing impls).
    serde_json::to_string(v).expect("model types serialise to json")
}

/// `SQLITE_FULL` (13), alone or as the primary code of an extended one.
pub(crate) fn is_disk_full(e: &sqlx::Error) -> bool {
    const SQLITE_FULL: i32 = 13;
    matches!(e, sqlx::Error::Database(d)
        if d.code().and_then(|c| c.parse::<i32>().ok()).is_some_and(|c| c & 0xff == SQLITE_FULL))
}

/// The one row a write's `RETURNING` gave.
///
/// Writes with `RETURNING` are read with `fetch_all`, never `fetch_one`/`fetch_optional`: SQLite
/// hands the row out before the statement has finished (and, outside a transaction, before it
/// has committed), and those stop reading at the first row, so a failure after it (a full disk
/// at commit) went unseen and the caller got a row that was never stored (issue 13).
pub(crate) fn returned<R>(rows: &[R]) -> Result<&R> {
    rows.first().ok_or_else(|| StoreError::Corrupt("a write's RETURNING gave no row".into()))
}

pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d) if d.is_unique_violation())
}

pub(crate) fn user_row(r: &SqliteRow) -> Result<UserRow> {
    Ok(UserRow {
        id: r.try_get("id")?,
        name: r.try_get("name")?,
        role: r.try_get("role")?,
        disabled: r.try_get::<i64, _>("disabled")? != 0,
        created_at: from_ts(r.try_get("created_at")?)?,
    })
}

/// Records who asked a job to stop (see [`stop_cause`] for the columns).
async fn set_stop(tx: &mut sqlx::SqliteConnection, job_id: JobId, cause: &StopCause) -> Result<()> {
    let (by, for_job, action, idle) = match cause {
        StopCause::Cancelled { by } => (Some(by.as_str()), None, None, None),
        StopCause::Preempted { by_job, action } => (None, Some(*by_job), Some(action.as_str()), None),
        StopCause::Idle { idle_secs } => (None, None, None, Some(*idle_secs as i64)),
    };
    let done = sqlx::query(
        "UPDATE jobs SET cancelled_by = ?, preempted_by = ?, preempt_action = ?, idle_stop_secs = ? WHERE id = ?",
    )
    .bind(by)
    .bind(for_job)
    .bind(action)
    .bind(idle)
    .bind(job_id)
    .execute(&mut *tx)
    .await?;
    if done.rows_affected() != 1 {
        return Err(StoreError::NotFound(format!("job {job_id}")));
    }
    Ok(())
}

/// An update of node `name` must have hit exactly its row.
fn one_node(done: sqlx::sqlite::SqliteQueryResult, name: &str) -> Result<()> {
    if done.rows_affected() != 1 {
        return Err(StoreError::NotFound(format!("node {name}")));
    }
    Ok(())
}

/// The fields of a [`Change::Transition`].
struct Move<'a> {
    job_id: JobId,
    from: JobState,
    to: JobState,
    at: Timestamp,
    reason: &'a str,
    exit_code: Option<i32>,
    end: Option<EndCause>,
}

/// Applies one transition inside `tx` (compare-and-set on the state).
///
/// The UPDATE and the INSERT into `transitions` go to SQLite as ONE query: each sqlx query
/// is a round trip to the connection's worker thread, and those hops (not SQLite) were most
/// of the manager's time under load. The INSERT only happens when the UPDATE matched
/// (`changes() = 1`); the old row is read only to explain a failure.
async fn transition(tx: &mut sqlx::SqliteConnection, mv: Move<'_>) -> Result<()> {
    let Move { job_id, from, to, at, reason, exit_code, end } = mv;
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
    let attempt = if requeue { "attempt + 1" } else { "attempt" };
    let pending = if from == JobState::Pending && to != JobState::Pending { "NULL" } else { "pending_reason" };
    let end_cause = if to.is_terminal() && end.is_some() { "?" } else { "end_cause" };
    let stop = if requeue {
        ", cancelled_by = NULL, preempted_by = NULL, preempt_action = NULL, idle_stop_secs = NULL"
    } else {
        ""
    };
    let sql = format!(
        "UPDATE jobs SET state = ?, reason = ?, started_at = {started_at}, ended_at = {ended_at}, \
         exit_code = {exit}, attempt = {attempt}, pending_reason = {pending}, end_cause = {end_cause}{stop} \
         WHERE id = ? AND state = ?; \
         INSERT INTO transitions (job_id, at, from_state, to_state, reason) \
         SELECT ?, ?, ?, ?, ? WHERE changes() = 1"
    );
    let mut q = sqlx::query(&sql).bind(to.as_str()).bind(reason);
    if to == JobState::Running && !requeue {
        q = q.bind(ts(at));
    }
    if to.is_terminal() {
        q = q.bind(ts(at));
        if let Some(c) = exit_code {
            q = q.bind(c as i64);
        }
        if let Some(e) = end {
            q = q.bind(e.as_str());
        }
    }
    let done = q
        .bind(job_id)
        .bind(from.as_str())
        .bind(job_id)
        .bind(ts(at))
        .bind(from.as_str())
        .bind(to.as_str())
        .bind(reason)
        .execute(&mut *tx)
        .await?;
    if done.rows_affected() == 2 {
        return Ok(());
    }
    let cur = sqlx::query("SELECT state FROM jobs WHERE id = ?")
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
async fn kernel_exit(
    tx: &mut sqlx::SqliteConnection,
    job_id: JobId,
    attempt: u32,
    index: u32,
    exit_code: Option<i32>,
    usage: Option<&KernelUsage>,
) -> Result<()> {
    let u = usage.copied().unwrap_or_default();
    let peak = u.memory_peak_bytes.map(|b| b.min(i64::MAX as u64) as i64);
    let done = sqlx::query(
        "UPDATE kernels SET exit_code = ?, cpu_seconds = ?, memory_peak_bytes = ?, gpu_seconds = ? \
         WHERE job_id = ? AND attempt = ? AND idx = ?",
    )
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
        sqlx::query(
            "UPDATE jobs SET used_cpu_seconds = CASE WHEN ?1 IS NULL THEN used_cpu_seconds \
                 ELSE COALESCE(used_cpu_seconds, 0) + ?1 END, \
             used_memory_peak_bytes = CASE WHEN ?2 IS NULL THEN used_memory_peak_bytes \
                 ELSE MAX(COALESCE(used_memory_peak_bytes, 0), (SELECT SUM(memory_peak_bytes) \
                 FROM kernels WHERE job_id = ?4 AND attempt = ?5)) END, \
             used_gpu_seconds = CASE WHEN ?3 IS NULL THEN used_gpu_seconds \
                 ELSE COALESCE(used_gpu_seconds, 0) + ?3 END \
             WHERE id = ?4",
        )
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

/// Records the kernels of a job's attempt, in one query (see [`transition`] for why).
async fn set_kernels(
    tx: &mut sqlx::SqliteConnection,
    job_id: JobId,
    attempt: u32,
    bindings: &[berth_model::Binding],
) -> Result<()> {
    let mut nodes: Vec<&str> = bindings.iter().map(|b| b.node.as_str()).collect();
    nodes.dedup();
    let mut sql =
        String::from("DELETE FROM kernels WHERE job_id = ? AND attempt = ?; UPDATE jobs SET nodes = ? WHERE id = ?");
    if !bindings.is_empty() {
        sql.push_str("; INSERT INTO kernels (job_id, attempt, idx, node, binding) VALUES ");
        sql.push_str(&vec!["(?, ?, ?, ?, ?)"; bindings.len()].join(", "));
    }
    let mut q = sqlx::query(&sql).bind(job_id).bind(attempt as i64).bind(nodes.join(",")).bind(job_id);
    for (i, b) in bindings.iter().enumerate() {
        q = q.bind(job_id).bind(attempt as i64).bind(i as i64).bind(&b.node).bind(to_json(b));
    }
    q.execute(&mut *tx).await?;
    Ok(())
}

#[async_trait]
impl Store for SqliteStore {
    async fn create_user(&self, name: &str, role: &str, at: Timestamp) -> Result<UserRow> {
        let r = sqlx::query("INSERT INTO users (name, role, disabled, created_at) VALUES (?, ?, 0, ?) RETURNING *")
            .bind(name)
            .bind(role)
            .bind(ts(at))
            .fetch_all(&self.writer)
            .await
            .map_err(
                |e| if is_unique_violation(&e) { StoreError::Duplicate(format!("user {name}")) } else { e.into() },
            )?;
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
        let rows = sqlx::query("INSERT INTO users (name, role, disabled, created_at) VALUES (?, ?, 0, ?) RETURNING *")
            .bind(name)
            .bind(role)
            .bind(ts(at))
            .fetch_all(&mut *tx)
            .await
            .map_err(
                |e| if is_unique_violation(&e) { StoreError::Duplicate(format!("user {name}")) } else { e.into() },
            )?;
        let user = user_row(returned(&rows)?)?;
        sqlx::query("INSERT INTO api_tokens (hash, user_id, label, created_at) VALUES (?, ?, ?, ?)")
            .bind(hash)
            .bind(user.id)
            .bind(label)
            .bind(ts(at))
            .execute(&mut *tx)
            .await
            .map_err(|e| if is_unique_violation(&e) { StoreError::Duplicate("api token".into()) } else { e.into() })?;
        tx.commit().await?;
        Ok(user)
    }

    async fn user_by_name(&self, name: &str) -> Result<Option<UserRow>> {
        let r = sqlx::query("SELECT * FROM users WHERE name = ?").bind(name).fetch_optional(&self.reader).await?;
        r.as_ref().map(user_row).transpose()
    }

    async fn add_api_token(&self, user_id: i64, hash: &str, label: &str, at: Timestamp) -> Result<()> {
        sqlx::query("INSERT INTO api_tokens (hash, user_id, label, created_at) VALUES (?, ?, ?, ?)")
            .bind(hash)
            .bind(user_id)
            .bind(label)
            .bind(ts(at))
            .execute(&self.writer)
            .await
            .map_err(|e| if is_unique_violation(&e) { StoreError::Duplicate("api token".into()) } else { e.into() })?;
        Ok(())
    }

    async fn user_by_token_hash(&self, hash: &str) -> Result<Option<UserRow>> {
        let r = sqlx::query("SELECT u.* FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = ?")
            .bind(hash)
            .fetch_optional(&self.reader)
            .await?;
        r.as_ref().map(user_row).transpose()
    }

    async fn add_join_token(&self, hash: &str, at: Timestamp) -> Result<()> {
        sqlx::query("INSERT INTO join_tokens (hash, created_at) VALUES (?, ?) ON CONFLICT (hash) DO NOTHING")
            .bind(hash)
            .bind(ts(at))
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    async fn join_token_exists(&self, hash: &str) -> Result<bool> {
        let r = sqlx::query("SELECT 1 FROM join_tokens WHERE hash = ?").bind(hash).fetch_optional(&self.reader).await?;
        Ok(r.is_some())
    }

    async fn join_token_hashes(&self) -> Result<Vec<String>> {
        let rows = sqlx::query("SELECT hash FROM join_tokens ORDER BY created_at").fetch_all(&self.reader).await?;
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
        let id = sqlx::query(
            "INSERT INTO jobs (user_id, spec, queue, priority, state, attempt, submitted_at, project, shared, \
             submitter_uid, submitter_gid) VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?) RETURNING id",
        )
        .bind(user_id)
        .bind(to_json(spec))
        .bind(spec.queue_name())
        .bind(spec.priority as i64)
        .bind(JobState::Pending.as_str())
        .bind(ts(at))
        .bind(spec.project.as_deref().unwrap_or(""))
        .bind(spec.shared as i64)
        .bind(submitter.map(|s| s.uid as i64))
        .bind(submitter.map(|s| s.gid as i64))
        .fetch_all(&mut *tx)
        .await?;
        let id: i64 = returned(&id)?.try_get("id")?;
        sqlx::query("INSERT INTO transitions (job_id, at, from_state, to_state, reason) VALUES (?, ?, NULL, ?, ?)")
            .bind(id)
            .bind(ts(at))
            .bind(JobState::Pending.as_str())
            .bind("submitted")
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        Ok(id)
    }

    async fn job(&self, id: JobId) -> Result<Option<JobRow>> {
        read_job(&mut *self.reader.acquire().await?, id).await
    }

    async fn job_history(&self, id: JobId) -> Result<Option<JobHistory>> {
        // One read transaction: the row, its kernels and its history from one snapshot (as
        // separate reads, a change committed between them showed a TERMINATING row beside a
        // history that had already moved on).
        let mut tx = self.reader.begin().await?;
        let Some(job) = read_job(&mut tx, id).await? else { return Ok(None) };
        let kernels = read_kernels(&mut tx, id).await?;
        let transitions = read_transitions(&mut tx, id).await?;
        tx.commit().await?;
        Ok(Some(JobHistory { job, kernels, transitions }))
    }

    async fn jobs(&self, filter: &JobFilter) -> Result<Vec<JobRow>> {
        let mut sql = format!("SELECT {JOB_COLUMNS} FROM jobs j JOIN users u ON u.id = j.user_id WHERE 1 = 1");
        if filter.user_id.is_some() {
            if filter.projects.is_empty() {
                sql.push_str(" AND j.user_id = ?");
            } else {
                sql.push_str(" AND (j.user_id = ? OR (j.shared = 1 AND j.project IN (");
                sql.push_str(&vec!["?"; filter.projects.len()].join(", "));
                sql.push_str(")))");
            }
        }
        if let Some(states) = &filter.states {
            if states.is_empty() {
                return Ok(Vec::new());
            }
            sql.push_str(" AND j.state IN (");
            sql.push_str(&vec!["?"; states.len()].join(", "));
            sql.push(')');
        }
        if filter.owner.is_some() {
            sql.push_str(" AND u.name = ?");
        }
        if filter.queue.is_some() {
            sql.push_str(" AND j.queue = ?");
        }
        if filter.name_contains.is_some() {
            // instr, not LIKE: the text is matched as given, `%` and `_` included.
            sql.push_str(" AND instr(COALESCE(json_extract(j.spec, '$.name'), ''), ?) > 0");
        }
        if filter.before.is_some() {
            sql.push_str(" AND j.id < ?");
        }
        sql.push_str(" ORDER BY j.id DESC");
        if filter.limit.is_some() {
            sql.push_str(" LIMIT ?");
        }
        let mut q = sqlx::query(&sql);
        if let Some(u) = filter.user_id {
            q = q.bind(u);
            for p in &filter.projects {
                q = q.bind(p);
            }
        }
        for s in filter.states.iter().flatten() {
            q = q.bind(s.as_str());
        }
        for text in [&filter.owner, &filter.queue, &filter.name_contains].into_iter().flatten() {
            q = q.bind(text);
        }
        if let Some(b) = filter.before {
            q = q.bind(b);
        }
        if let Some(l) = filter.limit {
            q = q.bind(l as i64);
        }
        let rows = q.fetch_all(&self.reader).await?;
        rows.iter().map(job_row).collect()
    }

    async fn jobs_active_since(&self, since: Timestamp) -> Result<Vec<JobRow>> {
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs j JOIN users u ON u.id = j.user_id \
             WHERE j.submitted_at >= ? OR j.ended_at IS NULL OR j.ended_at >= ? ORDER BY j.id"
        );
        let rows = sqlx::query(&sql).bind(ts(since)).bind(ts(since)).fetch_all(&self.reader).await?;
        rows.iter().map(job_row).collect()
    }

    async fn unfinished_jobs(&self) -> Result<Vec<JobRow>> {
        let live: Vec<&str> = JobState::ALL.iter().filter(|s| !s.is_terminal()).map(|s| s.as_str()).collect();
        let sql = format!(
            "SELECT {JOB_COLUMNS} FROM jobs j JOIN users u ON u.id = j.user_id WHERE j.state IN ({}) ORDER BY j.id",
            vec!["?"; live.len()].join(", ")
        );
        let mut q = sqlx::query(&sql);
        for s in live {
            q = q.bind(s);
        }
        let rows = q.fetch_all(&self.reader).await?;
        rows.iter().map(job_row).collect()
    }

    async fn job_count(&self) -> Result<u64> {
        let n: i64 = sqlx::query_scalar("SELECT COUNT(*) FROM jobs").fetch_one(&self.reader).await?;
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
        for c in changes {
            match c {
                Change::Transition { job_id, from, to, at, reason, exit_code, end } => {
                    let mv = Move {
                        job_id: *job_id,
                        from: *from,
                        to: *to,
                        at: *at,
                        reason,
                        exit_code: *exit_code,
                        end: *end,
                    };
                    transition(&mut tx, mv).await?;
                }
                Change::Stop { job_id, cause } => set_stop(&mut tx, *job_id, cause).await?,
                Change::SetKernels { job_id, attempt, bindings } => {
                    set_kernels(&mut tx, *job_id, *attempt, bindings).await?;
                }
                Change::KernelExit { job_id, attempt, index, exit_code, usage } => {
                    kernel_exit(&mut tx, *job_id, *attempt, *index, *exit_code, usage.as_ref()).await?;
                }
                Change::Usage(u) => {
                    sqlx::query(
                        "INSERT INTO usage (kind, name, value, at) VALUES (?, ?, ?, ?) \
                         ON CONFLICT (kind, name) DO UPDATE SET value = excluded.value, at = excluded.at",
                    )
                    .bind(&u.kind)
                    .bind(&u.name)
                    .bind(u.value)
                    .bind(ts(u.at))
                    .execute(&mut *tx)
                    .await?;
                }
                Change::PendingReason { job_id, reason } => {
                    let done = sqlx::query("UPDATE jobs SET pending_reason = ? WHERE id = ?")
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
        tx.commit().await?;
        Ok(())
    }

    async fn upsert_node(&self, n: &NodeRow) -> Result<()> {
        sqlx::query(
            "INSERT INTO nodes (name, queue, topology, version, state, last_heartbeat, address) \
             VALUES (?, ?, ?, ?, ?, ?, ?) \
             ON CONFLICT (name) DO UPDATE SET queue = excluded.queue, topology = excluded.topology, \
             version = excluded.version, state = excluded.state, last_heartbeat = excluded.last_heartbeat, \
             address = excluded.address",
        )
        .bind(&n.name)
        .bind(&n.queue)
        .bind(to_json(&n.topology))
        .bind(&n.version)
        .bind(n.state.as_str())
        .bind(n.last_heartbeat.map(ts))
        .bind(&n.address)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    async fn set_node_drain(&self, name: &str, reason: Option<&str>) -> Result<()> {
        let done = sqlx::query("UPDATE nodes SET drain_reason = ? WHERE name = ?")
            .bind(reason)
            .bind(name)
            .execute(&self.writer)
            .await?;
        one_node(done, name)
    }

    async fn set_node_state(&self, name: &str, state: NodeState, last_heartbeat: Option<Timestamp>) -> Result<()> {
        let done =
            sqlx::query("UPDATE nodes SET state = ?, last_heartbeat = COALESCE(?, last_heartbeat) WHERE name = ?")
                .bind(state.as_str())
                .bind(last_heartbeat.map(ts))
                .bind(name)
                .execute(&self.writer)
                .await?;
        one_node(done, name)
    }

    async fn nodes(&self) -> Result<Vec<NodeRow>> {
        let rows = sqlx::query("SELECT * FROM nodes ORDER BY name").fetch_all(&self.reader).await?;
        rows.iter().map(node_row).collect()
    }

    async fn queues(&self) -> Result<Vec<QueueRow>> {
        let rows = sqlx::query("SELECT * FROM queues ORDER BY name").fetch_all(&self.reader).await?;
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
        sqlx::query(
            "INSERT INTO queues (name, policy, seed, updated_at) VALUES (?, ?, ?, ?) ON CONFLICT (name) \
             DO UPDATE SET policy = excluded.policy, seed = excluded.seed, updated_at = excluded.updated_at",
        )
        .bind(&q.name)
        .bind(to_json(&q.policy))
        .bind(&q.seed)
        .bind(ts(q.updated_at))
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    async fn usage(&self) -> Result<Vec<UsageRow>> {
        let rows = sqlx::query("SELECT * FROM usage ORDER BY kind, name").fetch_all(&self.reader).await?;
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
        let r = sqlx::query("SELECT value FROM meta WHERE key = ?").bind(key).fetch_optional(&self.reader).await?;
        Ok(r.map(|r| r.try_get("value")).transpose()?)
    }

    async fn meta_set(&self, key: &str, value: &str) -> Result<()> {
        sqlx::query(
            "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
        )
        .bind(key)
        .bind(value)
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    async fn backup(&self, to: &std::path::Path) -> Result<()> {
        crate::sqlite_backup::backup(&self.reader, to).await
    }

    async fn close(&self) {
        self.writer.close().await;
        self.reader.close().await;
    }
}
