//! [`LeaderLease`] for both SQL adapters (included by `sqlite.rs` and `postgres.rs` like
//! `sql_store.rs`), and the fence check every job and node write runs inside its transaction.
//! Times are the database's (`NOW_MS`), so a manager whose clock is off cannot take a lease
//! early.

use std::sync::atomic::Ordering;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::Row;

use super::{Adapter, DbConn, FOR_SHARE, NOW_MS, sql};
use crate::lease::{LeaderLease, LeaseRow};
use crate::{Result, StoreError};

fn millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX / 4)
}

#[async_trait]
impl LeaderLease for Adapter {
    async fn lease_acquire(
        &self,
        holder: &str,
        url: &str,
        ttl: Duration,
        replacing: Option<&str>,
    ) -> Result<Option<u64>> {
        let q = format!(
            "UPDATE leader_lease SET holder = ?, url = ?, epoch = epoch + 1, expires_ms = {NOW_MS} + ? \
             WHERE id = 1 AND (expires_ms <= {NOW_MS} OR holder = ?) RETURNING epoch"
        );
        // Holders are `space:pid:id`: without a holder to replace, a name no holder has.
        let replacing = replacing.filter(|r| !r.is_empty()).unwrap_or("(nobody)");
        let r = sqlx::query(&sql(&q))
            .bind(holder)
            .bind(url)
            .bind(millis(ttl))
            .bind(replacing)
            .fetch_optional(&self.writer)
            .await?;
        Ok(r.map(|r| r.try_get::<i64, _>("epoch")).transpose()?.map(|e| e as u64))
    }

    async fn lease_renew(&self, holder: &str, epoch: u64, ttl: Duration) -> Result<bool> {
        let q = format!("UPDATE leader_lease SET expires_ms = {NOW_MS} + ? WHERE id = 1 AND holder = ? AND epoch = ?");
        let done =
            sqlx::query(&sql(&q)).bind(millis(ttl)).bind(holder).bind(epoch as i64).execute(&self.writer).await?;
        Ok(done.rows_affected() == 1)
    }

    async fn lease_release(&self, holder: &str, epoch: u64) -> Result<()> {
        sqlx::query(&sql("UPDATE leader_lease SET expires_ms = 0 WHERE id = 1 AND holder = ? AND epoch = ?"))
            .bind(holder)
            .bind(epoch as i64)
            .execute(&self.writer)
            .await?;
        Ok(())
    }

    async fn lease(&self) -> Result<LeaseRow> {
        let q = format!("SELECT holder, url, epoch, expires_ms - {NOW_MS} AS remaining FROM leader_lease WHERE id = 1");
        let r = sqlx::query(&sql(&q)).fetch_one(&self.reader).await?;
        let remaining: i64 = r.try_get("remaining")?;
        Ok(LeaseRow {
            holder: r.try_get("holder")?,
            url: r.try_get("url")?,
            epoch: r.try_get::<i64, _>("epoch")?.max(0) as u64,
            remaining: Duration::from_millis(remaining.max(0) as u64),
        })
    }

    fn fence(&self, epoch: u64) {
        self.fence.store(epoch, Ordering::SeqCst);
    }
}

/// Inside a write transaction: refuses it unless the lease still has the epoch this store
/// was fenced with (no fence: always passes). On PostgreSQL the row stays share-locked until
/// the transaction ends, so a takeover cannot slip in between this check and the commit.
pub(super) async fn check_fence(a: &Adapter, tx: &mut DbConn) -> Result<()> {
    let mine = a.fence.load(Ordering::SeqCst);
    if mine == 0 {
        return Ok(());
    }
    let q = format!("SELECT epoch FROM leader_lease WHERE id = 1{FOR_SHARE}");
    let now: i64 = sqlx::query_scalar(&sql(&q)).fetch_one(&mut *tx).await?;
    if now as u64 != mine {
        return Err(StoreError::Fenced { mine, now: now.max(0) as u64 });
    }
    Ok(())
}
