//! The SQLite adapter: opening the file, its pools, and what differs from PostgreSQL. The
//! queries both databases run alike are in `sql_store.rs`, `sql_jobs.rs`, `sql_rows.rs`,
//! `sql_tenancy.rs`, `sql_cache.rs`, `sql_folders.rs`, `sql_endpoints.rs`, `sql_lease.rs`,
//! `sql_copy.rs` and `sql_retention.rs`, expanded here as modules of this one
//! (`crate::shared_sql!`).
//!
//! One writer pool of exactly one connection serialises all writes inside the process, so two
//! writers never race for the database lock (no `SQLITE_BUSY` under load); a separate reader
//! pool serves queries concurrently thanks to WAL. The SQL sticks to what PostgreSQL also
//! accepts (`RETURNING`, `ON CONFLICT`, plain types) so the other adapter can mirror it.

use std::path::Path;
use std::time::Duration;

use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

use crate::rows::{Stmt, bind_args};
use crate::{Result, StoreError};

// The queries shared with PostgreSQL, expanded against SQLite's types (see `sql_rows.rs`).
crate::shared_sql!();

/// `Store::apply`'s changes: one at a time (in-process, a statement costs no round trip).
use shared_store::apply_each as apply_changes;

/// `Store::insert_jobs`: one transaction (the fence check, then two statements per 500 jobs).
async fn insert_jobs(a: &Adapter, jobs: &[crate::NewJob<'_>]) -> Result<Vec<berth_model::JobId>> {
    let mut tx = a.writer.begin().await?;
    shared_lease::check_fence(a, &mut tx).await?;
    let ids = shared_store::insert_jobs_in(&mut tx, jobs).await?;
    tx.commit().await?;
    Ok(ids)
}

pub(crate) use shared_copy::{read_all as copy_read, rows_in as copy_rows_in, write_all as copy_write};

/// The database's clock, in milliseconds since the Unix epoch (the leader lease's times).
const NOW_MS: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";
/// Row locks of `sql_lease.rs`: none, SQLite's write lock serialises the transactions.
const FENCE_LOCK: &str = "";
const TAKEOVER_LOCK: &str = "";

type Adapter = SqliteStore;
type Db = sqlx::Sqlite;
type DbRow = sqlx::sqlite::SqliteRow;
type DbConn = sqlx::SqliteConnection;

/// The shared SQL is written with SQLite's placeholders.
fn sql(q: &str) -> std::borrow::Cow<'_, str> {
    q.into()
}

/// [`crate::JobFilter::name_contains`]: `instr`, not LIKE, so the text is matched as given,
/// `%` and `_` included.
const NAME_CONTAINS: &str = " AND instr(COALESCE(json_extract(j.spec, '$.name'), ''), ?) > 0";
/// SQLite's two-argument `MAX` is PostgreSQL's `GREATEST`.
const GREATEST: &str = "MAX";

/// Runs `update` and, when it changed exactly one row, `insert`, as ONE query: each sqlx query
/// is a round trip to the connection's worker thread, and those hops (not SQLite) were most of
/// the manager's time under load. Whether the update matched.
async fn update_then_insert(c: &mut DbConn, update: Stmt, insert: Stmt) -> Result<bool> {
    let text = format!("{}; {} WHERE changes() = 1", update.sql, insert.sql);
    let q = bind_args!(sqlx::query(&text), update.args.iter().chain(&insert.args));
    Ok(q.execute(&mut *c).await?.rows_affected() == 2)
}

/// Runs `stmts` in order as one query (see [`update_then_insert`] for why).
async fn run_all(c: &mut DbConn, stmts: &[Stmt]) -> Result<()> {
    let text = stmts.iter().map(|s| s.sql.as_str()).collect::<Vec<_>>().join("; ");
    bind_args!(sqlx::query(&text), stmts.iter().flat_map(|s| &s.args)).execute(&mut *c).await?;
    Ok(())
}

/// A consistent copy while the store is in use (`Store::backup`): `VACUUM INTO`.
async fn backup(a: &Adapter, to: &Path) -> Result<()> {
    crate::sqlite_backup::backup(&a.reader, to).await
}

/// After `berth admin store copy` wrote ids: SQLite's AUTOINCREMENT counters follow the largest
/// id inserted, but an archived job's id is in `job_archive`, not `jobs`, so the jobs counter
/// is moved past the archive's ids too (a new job never takes an archived job's id).
async fn after_copy(tx: &mut DbConn) -> Result<()> {
    sqlx::query(
        "INSERT INTO sqlite_sequence (name, seq) SELECT 'jobs', m FROM (SELECT MAX(id) AS m FROM job_archive) \
         WHERE m IS NOT NULL AND NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = 'jobs')",
    )
    .execute(&mut *tx)
    .await?;
    sqlx::query(
        "UPDATE sqlite_sequence SET seq = MAX(seq, (SELECT COALESCE(MAX(id), 0) FROM job_archive)) \
         WHERE name = 'jobs'",
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// A read transaction: SQLite reads it from one snapshot (WAL).
async fn snapshot(pool: &SqlitePool) -> Result<sqlx::Transaction<'_, Db>> {
    Ok(pool.begin().await?)
}

/// The SQLite store (a file in the data directory, WAL mode).
pub struct SqliteStore {
    pub(crate) writer: SqlitePool,
    pub(crate) reader: SqlitePool,
    /// The leader lease's writes: the writer itself (SQLite takes one writer at a time).
    pub(crate) lease_pool: SqlitePool,
    /// The epoch writes are fenced with (0: none), see [`crate::LeaderLease::fence`].
    pub(crate) fence: std::sync::atomic::AtomicU64,
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
        let migrator = sqlx::migrate!("./migrations/sqlite");
        migrator.run(&writer).await.map_err(crate::migrate_error(&migrator))?;
        let reader = SqlitePoolOptions::new()
            .max_connections(READERS)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(base.read_only(true))
            .await?;
        Ok(SqliteStore { lease_pool: writer.clone(), writer, reader, fence: Default::default() })
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

/// `SQLITE_FULL` (13), alone or as the primary code of an extended one.
pub(crate) fn is_disk_full(e: &sqlx::Error) -> bool {
    const SQLITE_FULL: i32 = 13;
    matches!(e, sqlx::Error::Database(d)
        if d.try_downcast_ref::<sqlx::sqlite::SqliteError>().is_some()
            && d.code().and_then(|c| c.parse::<i32>().ok()).is_some_and(|c| c & 0xff == SQLITE_FULL))
}
