//! Retention (issue 18, `--retain 180d`): finished jobs that ended longer ago than the
//! retention period leave the store's hot tables for its compact archive
//! ([`berth_store::Retention`]), so a busy site's store stops growing with its history, while
//! the usage reports still count them (the store reads the archive beside the hot jobs).
//! Like Slurm's `PurgeJobAfter`. Without a period every job is kept.
//!
//! The task archives at start and then hourly, in batches of [`BATCH`] jobs, one transaction
//! each, yielding between them, so a long backlog (a first run on a big store) never holds
//! the store's writer for long; it stops at shutdown. `POST /v1/admin/store/purge` (`berth
//! admin store purge --older-than`) runs one pass by hand.

use std::sync::Arc;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

use crate::manager::Manager;

/// Jobs archived per transaction.
pub const BATCH: u32 = 1000;

/// How often the task looks for jobs to archive.
const EVERY: Duration = Duration::from_secs(3600);

/// Archives, at start and then every [`EVERY`], the finished jobs that ended more than
/// `period` ago (the manager's `--retain`); nothing without a period.
pub async fn run(m: Arc<Manager>) {
    let Some(period) = m.retain else { return };
    let mut shutdown = m.shutdown.clone();
    loop {
        let before = m.clock.now() - SignedDuration::try_from(period).unwrap_or(SignedDuration::MAX);
        match archive_before(&m, before).await {
            Ok(0) => tracing::debug!("retention: no finished job to archive"),
            Ok(n) => tracing::info!(
                jobs = n,
                retain = %berth_model::format_duration(period.as_secs()),
                "retention: archived finished jobs that ended before the retention period"
            ),
            Err(e) => tracing::warn!("retention: cannot archive finished jobs: {e}"),
        }
        tokio::select! {
            _ = tokio::time::sleep(EVERY) => {}
            _ = shutdown.changed() => break,
        }
    }
}

/// Archives every finished job that ended before `before`, [`BATCH`] a transaction; how many
/// it moved (also counted in `berth_jobs_archived_total`). Stops early at shutdown.
pub async fn archive_before(m: &Manager, before: Timestamp) -> Result<u64, berth_store::StoreError> {
    let mut total = 0;
    loop {
        let n = m.store.archive_finished(before, BATCH).await?;
        m.metrics.archived(n);
        total += n;
        if n < u64::from(BATCH) || *m.shutdown.borrow() {
            return Ok(total);
        }
        // Let the scheduler's and the agents' commits in between batches.
        tokio::task::yield_now().await;
    }
}

/// The 404 of an archived job the user may see: what the archive keeps of it, and why it is
/// no longer shown in full.
pub fn archived_message(m: &Manager, job: &berth_store::JobRow) -> String {
    let mut what = job.state.to_string();
    if let Some(code) = job.exit_code {
        what.push_str(&format!(", exit code {code}"));
    }
    if let Some(end) = job.ended_at {
        what.push_str(&format!(", ended {}", end.strftime("%Y-%m-%dT%H:%M:%SZ")));
    }
    let period = match m.retain {
        Some(p) => format!(": finished jobs are kept {}", berth_model::format_duration(p.as_secs())),
        None => String::new(),
    };
    format!("job {} was archived ({what}{period}); its usage is kept in the accounting (berth usage)", job.id)
}
