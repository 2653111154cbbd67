//! Backups of a SQLite store: an online, consistent copy taken while the manager runs
//! (`VACUUM INTO`, one read transaction, so concurrent writes are either all in or all out),
//! and the offline restore of one, which checks the file before it replaces anything.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use sqlx::Row;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};

use crate::{Result, StoreError};

/// Writes a consistent copy of the store behind `pool` to `to` (which must not exist).
pub(crate) async fn backup(pool: &sqlx::SqlitePool, to: &Path) -> Result<()> {
    let target = to.to_str().ok_or_else(|| StoreError::Io(format!("{} is not UTF-8", to.display())))?;
    sqlx::query("VACUUM INTO ?").bind(target).execute(pool).await?;
    // SQLite creates it with the umask's mode: it holds token hashes, so it is private.
    std::fs::set_permissions(to, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .map_err(|e| StoreError::Io(format!("{}: {e}", to.display())))?;
    Ok(())
}

/// What a backup holds, as checked before a restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupInfo {
    /// The last migration applied to it.
    pub schema_version: i64,
    pub jobs: i64,
    pub users: i64,
}

/// Checks that `file` is a whole berth store this build can open: SQLite's integrity check,
/// berth's tables, and no migration newer than this build knows.
pub async fn check_backup(file: &Path) -> Result<BackupInfo> {
    if !file.is_file() {
        return Err(StoreError::Io(format!("{} is not a file", file.display())));
    }
    let opts = SqliteConnectOptions::new().filename(file).read_only(true).immutable(true);
    let pool = SqlitePoolOptions::new().max_connections(1).connect_with(opts).await.map_err(not_a_store(file))?;
    let ok: String =
        sqlx::query("PRAGMA integrity_check").fetch_one(&pool).await.map_err(not_a_store(file))?.try_get(0)?;
    if ok != "ok" {
        return Err(StoreError::Corrupt(format!("{} fails SQLite's integrity check: {ok}", file.display())));
    }
    let version: Option<i64> = sqlx::query("SELECT MAX(version) FROM _sqlx_migrations WHERE success")
        .fetch_one(&pool)
        .await
        .map_err(not_a_store(file))?
        .try_get(0)?;
    let known = sqlx::migrate!("./migrations/sqlite").iter().map(|m| m.version).max().unwrap_or(0);
    let version = version.ok_or_else(|| StoreError::Corrupt(format!("{} has no berth schema", file.display())))?;
    if version > known {
        return Err(StoreError::Corrupt(format!(
            "{} comes from a newer berth (schema {version}, this one knows up to {known}): restore it with that \
             version",
            file.display()
        )));
    }
    let count = |table: &'static str| {
        let pool = pool.clone();
        async move {
            let row = sqlx::query(&format!("SELECT COUNT(*) FROM {table}")).fetch_one(&pool).await?;
            Ok::<i64, StoreError>(row.try_get(0)?)
        }
    };
    let info = BackupInfo { schema_version: version, jobs: count("jobs").await?, users: count("users").await? };
    pool.close().await;
    Ok(info)
}

fn not_a_store(file: &Path) -> impl Fn(sqlx::Error) -> StoreError + '_ {
    move |e| StoreError::Corrupt(format!("{} is not a berth store ({e})", file.display()))
}

/// Replaces the store at `db` (the manager stopped) with the checked backup `file`: the copy
/// is written beside it, synced and renamed over it, so a crash leaves the old store or the
/// new one; the old one is kept as `<db>.before-restore`.
pub async fn restore(file: &Path, db: &Path) -> Result<BackupInfo> {
    let info = check_backup(file).await?;
    let io = |what: &str, e: std::io::Error| StoreError::Io(format!("{what}: {e}"));
    let tmp = db.with_extension("db.restoring");
    let _ = std::fs::remove_file(&tmp);
    {
        let mut from = std::fs::File::open(file).map_err(|e| io(&file.display().to_string(), e))?;
        let mut to = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)
            .map_err(|e| io(&tmp.display().to_string(), e))?;
        std::io::copy(&mut from, &mut to).map_err(|e| io("copy", e))?;
        to.sync_all().map_err(|e| io("sync", e))?;
    }
    if db.exists() {
        std::fs::rename(db, db.with_extension("db.before-restore")).map_err(|e| io("keep the old store", e))?;
    }
    // The old store's log must not be replayed into the new one.
    for ext in ["db-wal", "db-shm"] {
        let _ = std::fs::remove_file(db.with_extension(ext));
    }
    std::fs::rename(&tmp, db).map_err(|e| io("put the backup in place", e))?;
    Ok(info)
}
