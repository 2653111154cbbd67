//! Retention (issue 18): finished jobs older than the retention period leave the hot tables
//! (`jobs`, `transitions`, `kernels`) for a compact row each in `job_archive`, so that a busy
//! site's store stops growing with its history while its accounting stays whole. Like Slurm's
//! `PurgeJobAfter` with an archive: an archived job keeps who ran it, where it was accounted,
//! what it asked for and used, when, and how it ended; its spec (command, environment), its
//! history and its kernels' bindings are gone. A supertrait of [`crate::Store`], like
//! [`crate::Tenancy`].
//!
//! [`crate::Store::jobs_active_since`] (the usage reports) reads archived jobs beside hot
//! ones, so the accounting counts a job the same before and after it is archived.
//!
//! Ids are never given again: the archive keeps the job's id, and the jobs table's counter
//! (SQLite `AUTOINCREMENT`, a PostgreSQL identity) only moves forward.

use async_trait::async_trait;
use berth_model::JobId;
use jiff::Timestamp;

use crate::{JobRow, Result};

/// Archiving finished jobs, and reading what the archive keeps.
#[async_trait]
pub trait Retention: Send + Sync {
    /// Moves up to `limit` finished jobs (terminal state) that ended before `before`, oldest
    /// first, from the hot tables into the archive, in one transaction; how many it moved. A
    /// caller archives a long backlog in batches, so no transaction holds the writer long.
    async fn archive_finished(&self, before: Timestamp, limit: u32) -> Result<u64>;
    /// An archived job, as a row with what the archive keeps: its spec has only the name,
    /// project, sharing, queue, resources and node and kernel counts (no command), and it has
    /// no pending reason, stop cause or submitter. `None`: never archived.
    async fn archived_job(&self, id: JobId) -> Result<Option<JobRow>>;
    /// How many jobs the archive holds.
    async fn archived_count(&self) -> Result<u64>;
}
