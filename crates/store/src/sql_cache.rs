//! [`crate::CacheState`] for both SQL adapters (expanded in `sqlite.rs` and `postgres.rs`, see
//! `sql_rows.rs`): the `cache_nodes`, `cache_seq`, `cache_buckets` and `cache_bucket_tombstones`
//! tables.

/// This module's items, for the adapter module it is expanded in (`super`).
macro_rules! items {
    () => {
        use async_trait::async_trait;
        use jiff::Timestamp;
        use sqlx::{Row, Transaction};

        use super::{Adapter, Db, DbRow, sql};
        use crate::cache::{CacheBucketRow, CacheNodeRow, CacheState};
        use crate::rows::{from_ts, ts};
        use crate::{Result, StoreError};

        const NODE_COLUMNS: &str = "node, url, reported_weight, weight, removed, seq, updated_at";

        fn node_row(r: &DbRow) -> Result<CacheNodeRow> {
            let weight = |v: i64| u32::try_from(v).map_err(|_| StoreError::Corrupt(format!("cache member weight {v}")));
            Ok(CacheNodeRow {
                node: r.try_get("node")?,
                url: r.try_get("url")?,
                reported_weight: weight(r.try_get("reported_weight")?)?,
                weight: r.try_get::<Option<i64>, _>("weight")?.map(weight).transpose()?,
                removed: r.try_get("removed")?,
                seq: r.try_get::<i64, _>("seq")? as u64,
                updated_at: from_ts(r.try_get("updated_at")?)?,
            })
        }

        async fn node_in(tx: &mut Transaction<'_, Db>, node: &str) -> Result<Option<CacheNodeRow>> {
            let r = sqlx::query(&sql(&format!(
                "SELECT {NODE_COLUMNS} FROM cache_nodes WHERE node = ?"
            )))
            .bind(node)
            .fetch_optional(&mut **tx)
            .await?;
            r.as_ref().map(node_row).transpose()
        }

        /// The next join sequence number (the counter only goes up, inside the caller's transaction).
        async fn next_seq(tx: &mut Transaction<'_, Db>) -> Result<u64> {
            let last: Vec<i64> = sqlx::query_scalar(&sql("UPDATE cache_seq SET last = last + 1 RETURNING last"))
                .fetch_all(&mut **tx)
                .await?;
            Ok(*crate::rows::returned(&last)? as u64)
        }

        #[async_trait]
        impl CacheState for Adapter {
            async fn put_cache_node(&self, node: &str, url: &str, weight: u32, at: Timestamp) -> Result<CacheNodeRow> {
                let mut tx = self.writer.begin().await?;
                let old = node_in(&mut tx, node).await?;
                let seq = match &old {
                    Some(o) if o.url == url => o.seq,
                    _ => next_seq(&mut tx).await?,
                };
                sqlx::query(&sql(
                    "INSERT INTO cache_nodes (node, url, reported_weight, weight, removed, seq, updated_at) \
                     VALUES (?, ?, ?, NULL, FALSE, ?, ?) \
                     ON CONFLICT (node) DO UPDATE SET url = excluded.url, reported_weight = excluded.reported_weight, \
                     seq = excluded.seq, updated_at = excluded.updated_at",
                ))
                .bind(node)
                .bind(url)
                .bind(i64::from(weight))
                .bind(seq as i64)
                .bind(ts(at))
                .execute(&mut *tx)
                .await?;
                let row = node_in(&mut tx, node).await?.expect("the row was just written");
                tx.commit().await?;
                Ok(row)
            }

            async fn cache_nodes(&self) -> Result<Vec<CacheNodeRow>> {
                let rows = sqlx::query(&sql(&format!(
                    "SELECT {NODE_COLUMNS} FROM cache_nodes ORDER BY node"
                )))
                .fetch_all(&self.reader)
                .await?;
                rows.iter().map(node_row).collect()
            }

            async fn set_cache_node_weight(
                &self,
                node: &str,
                weight: Option<u32>,
                at: Timestamp,
            ) -> Result<Option<CacheNodeRow>> {
                let r = sqlx::query(&sql(&format!(
                    "UPDATE cache_nodes SET weight = ?, updated_at = ? WHERE node = ? RETURNING {NODE_COLUMNS}"
                )))
                .bind(weight.map(i64::from))
                .bind(ts(at))
                .bind(node)
                .fetch_all(&self.writer)
                .await?;
                r.first().map(node_row).transpose()
            }

            async fn set_cache_node_removed(
                &self,
                node: &str,
                removed: bool,
                at: Timestamp,
            ) -> Result<Option<CacheNodeRow>> {
                let mut tx = self.writer.begin().await?;
                let Some(old) = node_in(&mut tx, node).await? else {
                    return Ok(None);
                };
                if old.removed == removed {
                    return Ok(Some(old));
                }
                sqlx::query(&sql(
                    "UPDATE cache_nodes SET removed = ?, updated_at = ? WHERE node = ?",
                ))
                .bind(removed)
                .bind(ts(at))
                .bind(node)
                .execute(&mut *tx)
                .await?;
                let row = node_in(&mut tx, node).await?;
                tx.commit().await?;
                Ok(row)
            }

            async fn put_cache_bucket(&self, b: &CacheBucketRow) -> Result<()> {
                let projects = serde_json::to_string(&b.projects).expect("project names serialise");
                let mut tx = self.writer.begin().await?;
                sqlx::query(&sql("DELETE FROM cache_bucket_tombstones WHERE name = ?"))
                    .bind(&b.name)
                    .execute(&mut *tx)
                    .await?;
                sqlx::query(&sql(
                    "INSERT INTO cache_buckets (name, public, quota, projects, origin, placement, updated_at) \
                     VALUES (?, ?, ?, ?, ?, ?, ?) \
                     ON CONFLICT (name) DO UPDATE SET public = excluded.public, quota = excluded.quota, \
                     projects = excluded.projects, origin = excluded.origin, placement = excluded.placement, \
                     updated_at = excluded.updated_at",
                ))
                .bind(&b.name)
                .bind(b.public)
                .bind(b.quota.map(|q| q as i64))
                .bind(projects)
                .bind(b.origin.as_deref())
                .bind(b.placement.as_str())
                .bind(ts(b.updated_at))
                .execute(&mut *tx)
                .await?;
                tx.commit().await?;
                Ok(())
            }

            async fn cache_buckets(&self) -> Result<Vec<CacheBucketRow>> {
                let rows = sqlx::query(&sql(
                    "SELECT name, public, quota, projects, origin, placement, updated_at FROM cache_buckets ORDER BY \
                     name",
                ))
                .fetch_all(&self.reader)
                .await?;
                rows.iter()
                    .map(|r| {
                        let projects: String = r.try_get("projects")?;
                        let placement: String = r.try_get("placement")?;
                        Ok(CacheBucketRow {
                            name: r.try_get("name")?,
                            public: r.try_get("public")?,
                            quota: r.try_get::<Option<i64>, _>("quota")?.map(|q| q as u64),
                            projects: serde_json::from_str(&projects)
                                .map_err(|e| StoreError::Corrupt(format!("cache bucket projects: {e}")))?,
                            origin: r.try_get("origin")?,
                            placement: placement
                                .parse()
                                .map_err(|e| StoreError::Corrupt(format!("cache bucket placement: {e}")))?,
                            updated_at: from_ts(r.try_get("updated_at")?)?,
                        })
                    })
                    .collect()
            }

            async fn delete_cache_bucket(&self, name: &str, at: Timestamp) -> Result<bool> {
                let mut tx = self.writer.begin().await?;
                let r = sqlx::query(&sql("DELETE FROM cache_buckets WHERE name = ?"))
                    .bind(name)
                    .execute(&mut *tx)
                    .await?;
                if r.rows_affected() > 0 {
                    sqlx::query(&sql(
                        "INSERT INTO cache_bucket_tombstones (name, deleted_at) VALUES (?, ?) \
                         ON CONFLICT (name) DO UPDATE SET deleted_at = excluded.deleted_at",
                    ))
                    .bind(name)
                    .bind(ts(at))
                    .execute(&mut *tx)
                    .await?;
                }
                tx.commit().await?;
                Ok(r.rows_affected() > 0)
            }

            async fn deleted_cache_buckets(&self) -> Result<Vec<String>> {
                let rows = sqlx::query(&sql("SELECT name FROM cache_bucket_tombstones ORDER BY name"))
                    .fetch_all(&self.reader)
                    .await?;
                rows.iter().map(|r| Ok(r.try_get("name")?)).collect()
            }
        }
    };
}
pub(crate) use items;
