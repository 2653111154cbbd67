//! The PostgreSQL adapter: connecting (with errors that say what to fix), its pool, its
//! migrations (`migrations/postgres`), and what differs from SQLite. The queries both
//! databases run alike are the SQLite adapter's (`sql_store.rs` and its siblings), expanded
//! here as modules of this one (`crate::shared_sql!`) and given PostgreSQL's `$N` placeholders.
//!
//! The schema keeps SQLite's representation (BIGINT microsecond timestamps, JSON as TEXT) so
//! one set of row decoders serves both, with PostgreSQL's own types where they are stricter
//! (BIGINT identity ids, BOOLEAN flags, CHECK constraints on states and causes). Transitions
//! are compare-and-set under READ COMMITTED: a concurrent UPDATE of the same job waits for
//! the other and then re-checks `state = ?` on the row it left, so two writers never both win.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{ConnectOptions, PgPool};

use crate::rows::{Stmt, bind_args, dollar_placeholders};
use crate::{Result, StoreError};

// The queries shared with SQLite, expanded against PostgreSQL's types (see `sql_rows.rs`).
crate::shared_sql!();

#[path = "pg_batch.rs"]
mod pg_batch;
use pg_batch::apply_changes;
#[path = "pg_insert.rs"]
mod pg_insert;
use pg_insert::insert_jobs;

pub(crate) use shared_copy::{read_all as copy_read, rows_in as copy_rows_in, write_all as copy_write};

/// The database's clock, in milliseconds since the Unix epoch (the leader lease's times).
const NOW_MS: &str = "CAST(EXTRACT(EPOCH FROM clock_timestamp()) * 1000 AS BIGINT)";
/// The fence check's lock on the lease row, and a takeover's (`sql_lease.rs`): KEY SHARE
/// conflicts with FOR UPDATE only, so renewals (plain UPDATEs) never wait for writes.
const FENCE_LOCK: &str = " FOR KEY SHARE";
const TAKEOVER_LOCK: &str = " FOR UPDATE";

type Adapter = PgStore;
type Db = sqlx::Postgres;
type DbRow = sqlx::postgres::PgRow;
type DbConn = sqlx::PgConnection;

fn sql(q: &str) -> std::borrow::Cow<'_, str> {
    dollar_placeholders(q).into()
}

/// [`crate::JobFilter::name_contains`], matched as given like SQLite's `instr`.
const NAME_CONTAINS: &str = " AND strpos(COALESCE(j.spec::jsonb ->> 'name', ''), ?) > 0";
const GREATEST: &str = "GREATEST";

/// Runs `update` and, when it changed exactly one row, `insert` (an `INSERT ... SELECT` without
/// FROM), in one round trip: the insert reads the update's returned row, so it inserts
/// nothing when the update matched nothing. Whether the update matched. (Round trips were most
/// of a large scheduling batch's time on PostgreSQL: docs/perf.md.)
async fn update_then_insert(c: &mut DbConn, update: Stmt, insert: Stmt) -> Result<bool> {
    let joined = format!("WITH matched AS ({} RETURNING 1) {} FROM matched", update.sql, insert.sql);
    let text = sql(&joined);
    let q = bind_args!(sqlx::query(&text), update.args.iter().chain(&insert.args));
    Ok(q.execute(&mut *c).await?.rows_affected() == 1)
}

/// Runs `stmts` in order.
async fn run_all(c: &mut DbConn, stmts: &[Stmt]) -> Result<()> {
    for s in stmts {
        let text = sql(&s.sql);
        bind_args!(sqlx::query(&text), &s.args).execute(&mut *c).await?;
    }
    Ok(())
}

/// After `berth admin store copy` wrote ids: the identity sequences move past them, so the
/// next row gets a fresh id.
/// PostgreSQL is backed up with its own tools (`pg_dump`, docs/store.md), not through berth.
async fn backup(_a: &Adapter, _to: &std::path::Path) -> Result<()> {
    Err(StoreError::Io("a PostgreSQL store is backed up with pg_dump (docs/store.md), not berth admin backup".into()))
}

async fn after_copy(tx: &mut DbConn) -> Result<()> {
    for (table, col) in [
        ("users", "id"),
        ("projects", "id"),
        ("jobs", "id"),
        ("transitions", "seq"),
        ("audit", "id"),
        ("folders", "id"),
        ("endpoints", "id"),
        ("endpoint_tokens", "id"),
    ] {
        let q = format!(
            "SELECT setval(pg_get_serial_sequence('{table}', '{col}'), COALESCE(MAX({col}), 0) + 1, false) FROM {table}"
        );
        sqlx::query(&q).execute(&mut *tx).await?;
    }
    // Archived jobs' ids are not in `jobs`: a new job must not take one of them either.
    sqlx::query(
        "SELECT setval(pg_get_serial_sequence('jobs', 'id'), GREATEST((SELECT COALESCE(MAX(id), 0) FROM jobs), \
         (SELECT COALESCE(MAX(id), 0) FROM job_archive)) + 1, false)",
    )
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// A read transaction that sees one snapshot (READ COMMITTED would give each statement its own).
async fn snapshot(pool: &PgPool) -> Result<sqlx::Transaction<'_, Db>> {
    let mut tx = pool.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY").execute(&mut *tx).await?;
    Ok(tx)
}

/// `disk_full` (SQLSTATE 53100).
pub(crate) fn is_disk_full(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(d)
        if d.try_downcast_ref::<sqlx::postgres::PgDatabaseError>().is_some() && d.code().as_deref() == Some("53100"))
}

/// The PostgreSQL store: one pool for reads and writes (the server serialises what must be).
pub struct PgStore {
    pub(crate) writer: PgPool,
    pub(crate) reader: PgPool,
    /// The leader lease's renewals and takeovers: a pool of one connection of its own.
    pub(crate) lease_pool: PgPool,
    /// The epoch writes are fenced with (0: none), see [`crate::LeaderLease::fence`].
    pub(crate) fence: std::sync::atomic::AtomicU64,
}

const CONNECTIONS: u32 = 8;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Below the default leader lease (5 s): see [`PgStore::open`].
const IDLE_IN_TRANSACTION_MS: &str = "3000";

impl PgStore {
    /// Connects to `url` (`postgres://USER@HOST[:PORT]/DATABASE`; the password comes from
    /// `PGPASSFILE` or `~/.pgpass` when the URL has none) and runs the migrations.
    pub async fn open(url: &str) -> Result<PgStore> {
        let opts = PgConnectOptions::from_str(url).map_err(|e| {
            StoreError::BadUrl(format!("bad PostgreSQL URL: {e}: write it as postgres://USER@HOST[:PORT]/DATABASE"))
        })?;
        // A manager frozen inside a transaction (SIGSTOP, a stalled VM) would hold the lease row's
        // key-share lock (`sql_lease.rs`) and keep a standby from taking over: the server ends such
        // a session after IDLE_IN_TRANSACTION, which rolls it back.
        let opts = opts
            .log_statements(tracing::log::LevelFilter::Trace)
            .options([("idle_in_transaction_session_timeout", IDLE_IN_TRANSACTION_MS)]);
        // One connection first, by hand: the pool retries until its timeout and then reports
        // only that it timed out, not why.
        let first = tokio::time::timeout(CONNECT_TIMEOUT, opts.connect()).await;
        let conn = match first {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(connect_error(&opts, e)),
            Err(_) => {
                return Err(StoreError::Connect(format!(
                    "cannot reach PostgreSQL at {}: no answer in {}s: is the server running, and the host and \
                     port right?",
                    server(&opts),
                    CONNECT_TIMEOUT.as_secs()
                )));
            }
        };
        let pool = PgPoolOptions::new()
            .max_connections(CONNECTIONS)
            .acquire_timeout(Duration::from_secs(30))
            .connect_lazy_with(opts.clone());
        drop(conn);
        let migrator = sqlx::migrate!("./migrations/postgres");
        migrator.run(&pool).await.map_err(crate::migrate_error(&migrator))?;
        // The lease's own connection: a renewal never waits for a slot of the pool, which the
        // report loop, the scheduling pass, submits and reads can all hold for a while under
        // load (issue 42: renewals took 12-19 s and the leadership was lost).
        let lease_pool =
            PgPoolOptions::new().max_connections(1).acquire_timeout(Duration::from_secs(30)).connect_lazy_with(opts);
        Ok(PgStore { writer: pool.clone(), reader: pool, lease_pool, fence: Default::default() })
    }
}

/// Where `opts` points, without the password.
fn server(opts: &PgConnectOptions) -> String {
    format!(
        "{}:{} (database {}, user {})",
        opts.get_host(),
        opts.get_port(),
        opts.get_database().unwrap_or("?"),
        opts.get_username()
    )
}

/// A failed first connection, as what to fix.
fn connect_error(opts: &PgConnectOptions, e: sqlx::Error) -> StoreError {
    let at = server(opts);
    let code = match &e {
        sqlx::Error::Database(d) => d.code().map(|c| c.into_owned()),
        _ => None,
    };
    StoreError::Connect(match code.as_deref() {
        Some("28P01") | Some("28000") => format!(
            "PostgreSQL at {at} refused the login: {e}: put the password in ~/.pgpass or the file PGPASSFILE names \
             (never on a command line), or fix pg_hba.conf"
        ),
        Some("3D000") => format!("PostgreSQL at {at}: {e}: create the database first (createdb)"),
        _ if matches!(e, sqlx::Error::Io(_) | sqlx::Error::Tls(_)) => {
            format!("cannot reach PostgreSQL at {at}: {e}: is the server running, and the host and port right?")
        }
        _ => format!("cannot connect to PostgreSQL at {at}: {e}"),
    })
}
