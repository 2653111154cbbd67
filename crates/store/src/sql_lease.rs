//! [`crate::LeaderLease`] for both SQL adapters (expanded in `sqlite.rs` and `postgres.rs`, see
//! `sql_rows.rs`), and the fence check every job and node write runs inside its transaction. Times
//! are the database's (`NOW_MS`), so a manager whose clock is off cannot take a lease early. A new
//! epoch is the old one plus one, or the database's time in milliseconds if that is more: epochs
//! keep growing even when the store itself goes back in time (a restored backup, a PostgreSQL
//! replica promoted a little behind), so agents that remember a later epoch still accept the next
//! leader.

/// This module's items, for the adapter module it is expanded in (`super`).
macro_rules! items {
    () => {
        use std::sync::atomic::Ordering;
        use std::time::Duration;

        use async_trait::async_trait;
        use sqlx::Row;

        use super::{Adapter, DbConn, FENCE_LOCK, GREATEST, NOW_MS, TAKEOVER_LOCK, sql};
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
                // Holders are `space:pid:id`: without a holder to replace, a name no holder has.
                let replacing = replacing.filter(|r| !r.is_empty()).unwrap_or("(nobody)");
                // A look without locks first: standbys poll, and must not queue behind the leader's
                // writes while it is well.
                let now = self.lease().await?;
                if now.held() && now.holder != replacing {
                    return Ok(None);
                }
                // The takeover's lock waits for every write in flight that checked the old epoch
                // (`check_fence`), so none of them can commit after the new epoch.
                let mut tx = self.lease_pool.begin().await?;
                sqlx::query(&sql(&format!("SELECT epoch FROM leader_lease WHERE id = 1{TAKEOVER_LOCK}")))
                    .fetch_one(&mut *tx)
                    .await?;
                let q = format!(
                    "UPDATE leader_lease SET holder = ?, url = ?, epoch = {GREATEST}(epoch + 1, {NOW_MS}), \
                     expires_ms = {NOW_MS} + ? \
                     WHERE id = 1 AND (expires_ms <= {NOW_MS} OR holder = ?) RETURNING epoch"
                );
                let r = sqlx::query(&sql(&q))
                    .bind(holder)
                    .bind(url)
                    .bind(millis(ttl))
                    .bind(replacing)
                    .fetch_optional(&mut *tx)
                    .await?;
                tx.commit().await?;
                Ok(r.map(|r| r.try_get::<i64, _>("epoch")).transpose()?.map(|e| e as u64))
            }

            async fn lease_renew(&self, holder: &str, epoch: u64, ttl: Duration) -> Result<bool> {
                let q = format!(
                    "UPDATE leader_lease SET expires_ms = {NOW_MS} + ? WHERE id = 1 AND holder = ? AND epoch = ?"
                );
                let done = sqlx::query(&sql(&q))
                    .bind(millis(ttl))
                    .bind(holder)
                    .bind(epoch as i64)
                    .execute(&self.lease_pool)
                    .await?;
                Ok(done.rows_affected() == 1)
            }

            async fn lease_release(&self, holder: &str, epoch: u64) -> Result<()> {
                sqlx::query(&sql("UPDATE leader_lease SET expires_ms = 0 WHERE id = 1 AND holder = ? AND epoch = ?"))
                    .bind(holder)
                    .bind(epoch as i64)
                    .execute(&self.lease_pool)
                    .await?;
                Ok(())
            }

            async fn lease(&self) -> Result<LeaseRow> {
                let q = format!(
                    "SELECT holder, url, epoch, expires_ms - {NOW_MS} AS remaining FROM leader_lease WHERE id = 1"
                );
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
        /// was fenced with (no fence: always passes). On PostgreSQL the row stays key-share-locked
        /// until the transaction ends: a takeover (`FOR UPDATE`) cannot slip in between this check and
        /// the commit, while the leader's renewals (plain UPDATEs of a non-key column, which take no
        /// conflicting lock) never wait behind a long write.
        pub(super) async fn check_fence(a: &Adapter, tx: &mut DbConn) -> Result<()> {
            let mine = a.fence.load(Ordering::SeqCst);
            if mine == 0 {
                return Ok(());
            }
            let q = format!("SELECT epoch FROM leader_lease WHERE id = 1{FENCE_LOCK}");
            let now: i64 = sqlx::query_scalar(&sql(&q)).fetch_one(&mut *tx).await?;
            if now as u64 != mine {
                return Err(StoreError::Fenced { mine, now: now.max(0) as u64 });
            }
            Ok(())
        }
    };
}
pub(crate) use items;
