//! [`CacheState`] for SQLite: the `cache_nodes` and `cache_buckets` tables.

use async_trait::async_trait;
use jiff::Timestamp;
use sqlx::Row;

use crate::cache::{CacheBucketRow, CacheNodeRow, CacheState};
use crate::sqlite::{from_ts, ts};
use crate::{Result, SqliteStore, StoreError};

#[async_trait]
impl CacheState for SqliteStore {
    async fn put_cache_node(&self, node: &str, url: &str, at: Timestamp) -> Result<()> {
        sqlx::query(
            "INSERT INTO cache_nodes (node, url, updated_at) VALUES (?, ?, ?) \
             ON CONFLICT (node) DO UPDATE SET url = excluded.url, updated_at = excluded.updated_at",
        )
        .bind(node)
        .bind(url)
        .bind(ts(at))
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    async fn cache_nodes(&self) -> Result<Vec<CacheNodeRow>> {
        let rows =
            sqlx::query("SELECT node, url, updated_at FROM cache_nodes ORDER BY node").fetch_all(&self.reader).await?;
        rows.iter()
            .map(|r| {
                Ok(CacheNodeRow {
                    node: r.try_get("node")?,
                    url: r.try_get("url")?,
                    updated_at: from_ts(r.try_get("updated_at")?)?,
                })
            })
            .collect()
    }

    async fn put_cache_bucket(&self, b: &CacheBucketRow) -> Result<()> {
        let projects = serde_json::to_string(&b.projects).expect("project names serialise");
        sqlx::query(
            "INSERT INTO cache_buckets (name, public, quota, projects, updated_at) VALUES (?, ?, ?, ?, ?) \
             ON CONFLICT (name) DO UPDATE SET public = excluded.public, quota = excluded.quota, \
             projects = excluded.projects, updated_at = excluded.updated_at",
        )
        .bind(&b.name)
        .bind(b.public as i64)
        .bind(b.quota.map(|q| q as i64))
        .bind(projects)
        .bind(ts(b.updated_at))
        .execute(&self.writer)
        .await?;
        Ok(())
    }

    async fn cache_buckets(&self) -> Result<Vec<CacheBucketRow>> {
        let rows = sqlx::query("SELECT name, public, quota, projects, updated_at FROM cache_buckets ORDER BY name")
            .fetch_all(&self.reader)
            .await?;
        rows.iter()
            .map(|r| {
                let projects: String = r.try_get("projects")?;
                Ok(CacheBucketRow {
                    name: r.try_get("name")?,
                    public: r.try_get::<i64, _>("public")? != 0,
                    quota: r.try_get::<Option<i64>, _>("quota")?.map(|q| q as u64),
                    projects: serde_json::from_str(&projects)
                        .map_err(|e| StoreError::Corrupt(format!("cache bucket projects: {e}")))?,
                    updated_at: from_ts(r.try_get("updated_at")?)?,
                })
            })
            .collect()
    }
}
