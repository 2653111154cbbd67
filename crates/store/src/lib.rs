//! berth's persistence: the [`Store`] trait the manager talks to, and its adapters
//! (docs/store.md). SQLite ([`SqliteStore`]) is the default; PostgreSQL ([`PgStore`])
//! implements the same trait with the same queries where the two agree, and both run the same
//! [`conformance`] suite. [`StoreUrl`] says which one a manager uses; [`copy()`] moves an
//! installation from one to the other.
//!
//! The store is the truth across restarts. The manager keeps a live copy of unfinished jobs in
//! memory and writes every state change here first ([`Store::apply`], one transaction per
//! batch, compare-and-set on the job state) before it acts on it.

pub mod cache;
pub mod conformance;
mod copy;
pub mod endpoints;
pub mod folders;
mod lease;

/// The queries both SQL adapters run alike, one module per `sql_*.rs` file, expanded in
/// `sqlite.rs` and in `postgres.rs` (see `sql_rows.rs`).
macro_rules! shared_sql {
    () => {
        mod shared_cache {
            crate::sql_cache::items!();
        }
        mod shared_copy {
            crate::sql_copy::items!();
        }
        mod shared_endpoints {
            crate::sql_endpoints::items!();
        }
        mod shared_folders {
            crate::sql_folders::items!();
        }
        mod shared_jobs {
            crate::sql_jobs::items!();
        }
        mod shared_lease {
            crate::sql_lease::items!();
        }
        mod shared_retention {
            crate::sql_retention::items!();
        }
        mod shared_rows {
            crate::sql_rows::items!();
        }
        mod shared_store {
            crate::sql_store::items!();
        }
        mod shared_tenancy {
            crate::sql_tenancy::items!();
        }
    };
}
pub(crate) use shared_sql;

mod postgres;
pub mod retention;
mod rows;
mod sql_cache;
mod sql_copy;
mod sql_endpoints;
mod sql_folders;
mod sql_jobs;
mod sql_lease;
mod sql_retention;
mod sql_rows;
mod sql_store;
mod sql_tenancy;
mod sqlite;
pub mod sqlite_backup;
pub mod tenancy;
#[cfg(feature = "test-support")]
pub mod test_support;
mod types;
mod url;

use async_trait::async_trait;
use berth_model::api::{NodeState, Transition};
use berth_model::{JobId, JobSpec, JobState, UnixId};
use jiff::Timestamp;
use thiserror::Error;

pub use cache::{CacheBucketRow, CacheNodeRow, CacheState};

pub use copy::{CopyReport, copy};
pub use endpoints::{EndpointRow, EndpointTokenRow, Endpoints};
pub use folders::{FolderRow, Folders};
pub use lease::{LeaderLease, LeaseRow};
pub use postgres::PgStore;
pub use retention::Retention;
pub use sqlite::SqliteStore;
pub use tenancy::{AuditRow, ProjectRow, Tenancy, TokenRow};
pub use types::{Change, JobFilter, JobHistory, JobRow, KernelRow, NewJob, NodeRow, QueueRow, UsageRow, UserRow};
pub use url::{StoreUrl, open};

/// What can go wrong in a store call.
#[derive(Debug, Error)]
pub enum StoreError {
    /// A compare-and-set failed: the job is not in the state the change expected. Nothing of
    /// the batch was written.
    #[error("job {job_id} is {actual}, not {expected}")]
    Conflict { job_id: JobId, expected: JobState, actual: String },
    /// The lifecycle does not allow this transition (see `JobState::can_become`).
    #[error("job {job_id} cannot go from {from} to {to}")]
    InvalidTransition { job_id: JobId, from: JobState, to: JobState },
    /// A row the call needs does not exist.
    #[error("{0} not found")]
    NotFound(String),
    /// A unique name is already taken.
    #[error("{0} already exists")]
    Duplicate(String),
    /// A stored value could not be read back (corrupt JSON, unknown state, ...).
    #[error("corrupt stored data: {0}")]
    Corrupt(String),
    /// The database's disk is full (SQLite `SQLITE_FULL`): nothing of the call was written.
    #[error("the database's disk is full: {0}")]
    DiskFull(String),
    #[error("database error: {0}")]
    Db(sqlx::Error),
    /// The store's files could not be prepared (created, made private).
    #[error("cannot prepare the database file {0}")]
    Io(String),
    #[error("migration failed: {0}")]
    Migrate(sqlx::migrate::MigrateError),
    /// The database has a migration this berth does not know: a newer berth wrote it.
    #[error(
        "the database's schema is from a newer berth (it has migration {applied}, this berth knows up to \
         {known}): upgrade berth, or point it at another database"
    )]
    NewerSchema { applied: i64, known: i64 },
    /// The database server could not be reached or refused us (what to fix is in the text).
    #[error("{0}")]
    Connect(String),
    /// A `--store` URL or store file that cannot be used (what to fix is in the text).
    #[error("{0}")]
    BadUrl(String),
    /// This manager no longer leads: another took the lease over (epoch `now`) since it was
    /// fenced with `mine`. Nothing of the call was written.
    #[error("this manager lost the leadership (its epoch is {mine}, the store's is {now}): nothing was written")]
    Fenced { mine: u64, now: u64 },
}

/// Runs `migrator`'s migrations, telling a database from a newer berth apart.
pub(crate) fn migrate_error(migrator: &sqlx::migrate::Migrator) -> impl Fn(sqlx::migrate::MigrateError) -> StoreError {
    let known = migrator.iter().map(|m| m.version).max().unwrap_or(0);
    move |e| match e {
        sqlx::migrate::MigrateError::VersionMissing(applied) => StoreError::NewerSchema { applied, known },
        e => StoreError::Migrate(e),
    }
}

impl StoreError {
    /// Whether the call failed because the database's disk is full (a write may work again
    /// once space is freed; reads still work).
    pub fn is_disk_full(&self) -> bool {
        matches!(self, StoreError::DiskFull(_))
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(e: sqlx::Error) -> StoreError {
        if sqlite::is_disk_full(&e) || postgres::is_disk_full(&e) {
            StoreError::DiskFull(e.to_string())
        } else {
            StoreError::Db(e)
        }
    }
}

pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Everything the manager persists. Implementations must be safe to share (`Arc<dyn Store>`).
#[async_trait]
pub trait Store: Tenancy + CacheState + Folders + Endpoints + LeaderLease + Retention + Send + Sync {
    // --- users and tokens -------------------------------------------------------------
    /// Creates a user; `Duplicate` if the name is taken.
    async fn create_user(&self, name: &str, role: &str, at: Timestamp) -> Result<UserRow>;
    /// Creates a user and its first API token (sha256 hex) in one transaction: both or neither.
    async fn create_user_with_token(
        &self,
        name: &str,
        role: &str,
        hash: &str,
        label: &str,
        at: Timestamp,
    ) -> Result<UserRow>;
    async fn user_by_name(&self, name: &str) -> Result<Option<UserRow>>;
    /// Stores the sha256 (hex) of an API token for `user_id`.
    async fn add_api_token(&self, user_id: i64, hash: &str, label: &str, at: Timestamp) -> Result<()>;
    /// The (enabled or disabled) user owning the token with this hash.
    async fn user_by_token_hash(&self, hash: &str) -> Result<Option<UserRow>>;
    /// Stores the hash of an agent join token; adding a known hash again is a no-op.
    async fn add_join_token(&self, hash: &str, at: Timestamp) -> Result<()>;
    async fn join_token_exists(&self, hash: &str) -> Result<bool>;
    /// Every join token hash (the manager caches them).
    async fn join_token_hashes(&self) -> Result<Vec<String>>;

    // --- jobs -------------------------------------------------------------------------
    /// Inserts a PENDING job and its first transition (`submitted`) in one transaction;
    /// `submitter` is the Unix user the manager's host vouched for, if any.
    async fn insert_job(&self, user_id: i64, spec: &JobSpec, submitter: Option<UnixId>, at: Timestamp)
    -> Result<JobId>;
    /// Inserts every job of `jobs` as [`Store::insert_job`] does, all in one transaction: all
    /// of them or none (one that cannot be inserted, e.g. an array task already stored, fails
    /// the whole call). Their ids, in `jobs`' order, which is also the ids' order (a group
    /// commit of concurrent submits, so many cost one transaction).
    async fn insert_jobs(&self, jobs: &[NewJob<'_>]) -> Result<Vec<JobId>>;
    /// [`Store::insert_job`] once per idempotency `key` of the user: a key seen in the last
    /// day gives back the job it made (`false`: not inserted now).
    async fn insert_job_once(
        &self,
        user_id: i64,
        spec: &JobSpec,
        submitter: Option<UnixId>,
        at: Timestamp,
        key: &str,
    ) -> Result<(JobId, bool)>;
    async fn job(&self, id: JobId) -> Result<Option<JobRow>>;
    /// Jobs matching `filter`, newest first.
    async fn jobs(&self, filter: &JobFilter) -> Result<Vec<JobRow>>;
    /// Jobs submitted at or after `since`, or unfinished, or ended at or after it (usage
    /// reports), oldest first, archived ones included (see [`Retention`]).
    async fn jobs_active_since(&self, since: Timestamp) -> Result<Vec<JobRow>>;
    /// Every job not in a terminal state, oldest first (rebuilds the manager on restart).
    async fn unfinished_jobs(&self) -> Result<Vec<JobRow>>;
    /// How many jobs the hot tables hold, finished ones included (not the archived ones).
    async fn job_count(&self) -> Result<u64>;
    /// The job's history, in the order it happened.
    async fn transitions(&self, id: JobId) -> Result<Vec<Transition>>;
    /// A job with its kernels and history, all from one snapshot of the store.
    async fn job_history(&self, id: JobId) -> Result<Option<JobHistory>>;
    /// The job's kernels of every attempt, by attempt then index.
    async fn kernels(&self, id: JobId) -> Result<Vec<KernelRow>>;
    /// Commits all changes in one transaction, or none of them (see [`Change`]).
    async fn apply(&self, changes: &[Change]) -> Result<()>;

    // --- nodes ------------------------------------------------------------------------
    /// Inserts or replaces a node (on agent register).
    async fn upsert_node(&self, node: &NodeRow) -> Result<()>;
    async fn set_node_state(&self, name: &str, state: NodeState, last_heartbeat: Option<Timestamp>) -> Result<()>;
    /// Drains (`Some(reason)`) or undrains (`None`) a node; `NotFound` for an unknown node.
    async fn set_node_drain(&self, name: &str, reason: Option<&str>) -> Result<()>;
    async fn nodes(&self) -> Result<Vec<NodeRow>>;

    // --- queues and usage -------------------------------------------------------------
    /// Every stored queue, by name.
    async fn queues(&self) -> Result<Vec<QueueRow>>;
    /// Inserts or replaces a queue.
    async fn put_queue(&self, q: &QueueRow) -> Result<()>;
    /// Every usage row (written through [`Change::Usage`]).
    async fn usage(&self) -> Result<Vec<UsageRow>>;

    // --- meta -------------------------------------------------------------------------
    async fn meta_get(&self, key: &str) -> Result<Option<String>>;
    async fn meta_set(&self, key: &str, value: &str) -> Result<()>;

    /// Writes a consistent copy of the store to `to` while it is in use (`berth admin
    /// backup`). Stores whose server has its own tools (PostgreSQL: `pg_dump`) say so.
    async fn backup(&self, to: &std::path::Path) -> Result<()> {
        let _ = to;
        Err(StoreError::Io("this store is backed up with its database server's own tools".into()))
    }

    /// Waits for in-flight writes and closes the connections.
    async fn close(&self);
}
