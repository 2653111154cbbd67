//! [`crate::Folders`] for both SQL adapters (expanded in `sqlite.rs` and `postgres.rs`, see
//! `sql_rows.rs`): the `folders` and `folder_shares` tables.

/// This module's items, for the adapter module it is expanded in (`super`).
macro_rules! items {
    () => {
        use async_trait::async_trait;
        use jiff::Timestamp;
        use sqlx::Row;

        use super::{Adapter, DbRow, sql};
        use crate::folders::{FolderRow, Folders};
        use crate::rows::{duplicate, from_ts, ts};
        use crate::{Result, StoreError};

        const COLUMNS: &str = "f.id, f.name, f.owner_id, u.name AS owner, f.project, f.quota, f.created_at";

        fn folder_row(r: &DbRow) -> Result<FolderRow> {
            let project: String = r.try_get("project")?;
            let quota: Option<i64> = r.try_get("quota")?;
            Ok(FolderRow {
                id: r.try_get("id")?,
                name: r.try_get("name")?,
                owner_id: r.try_get("owner_id")?,
                owner: r.try_get("owner")?,
                project: (!project.is_empty()).then_some(project),
                quota_bytes: quota
                    .map(|q| u64::try_from(q).map_err(|_| StoreError::Corrupt(format!("folder quota {q}"))))
                    .transpose()?,
                created_at: from_ts(r.try_get("created_at")?)?,
                shares: Vec::new(),
            })
        }

        fn quota_col(q: Option<u64>) -> Result<Option<i64>> {
            q.map(|q| i64::try_from(q).map_err(|_| StoreError::Corrupt(format!("folder quota {q} is too large"))))
                .transpose()
        }

        impl Adapter {
            /// The folders that `WHERE` picks (with its binds), with their shares.
            async fn folders_where(&self, cond: &str, id: Option<i64>) -> Result<Vec<FolderRow>> {
                let q =
                    format!("SELECT {COLUMNS} FROM folders f JOIN users u ON u.id = f.owner_id {cond} ORDER BY f.id");
                let q = sql(&q);
                let mut query = sqlx::query(&q);
                if let Some(id) = id {
                    query = query.bind(id);
                }
                let mut out: Vec<FolderRow> =
                    query.fetch_all(&self.reader).await?.iter().map(folder_row).collect::<Result<_>>()?;
                let sq = match id {
                    Some(_) => {
                        "SELECT folder_id, project, read_only FROM folder_shares WHERE folder_id = ? ORDER BY project"
                    }
                    None => "SELECT folder_id, project, read_only FROM folder_shares ORDER BY folder_id, project",
                };
                let sq = sql(sq);
                let mut squery = sqlx::query(&sq);
                if let Some(id) = id {
                    squery = squery.bind(id);
                }
                for r in squery.fetch_all(&self.reader).await? {
                    let fid: i64 = r.try_get("folder_id")?;
                    if let Ok(i) = out.binary_search_by_key(&fid, |f| f.id) {
                        out[i].shares.push((r.try_get("project")?, r.try_get("read_only")?));
                    }
                }
                Ok(out)
            }
        }

        #[async_trait]
        impl Folders for Adapter {
            async fn create_folder(
                &self,
                name: &str,
                owner_id: i64,
                project: Option<&str>,
                quota_bytes: Option<u64>,
                at: Timestamp,
            ) -> Result<FolderRow> {
                let what = || match project {
                    Some(p) => format!("folder {name} of project {p}"),
                    None => format!("folder {name}"),
                };
                let ids: Vec<i64> = sqlx::query_scalar(&sql(
                    "INSERT INTO folders (name, owner_id, project, quota, created_at) VALUES (?, ?, ?, ?, ?) \
                     RETURNING id",
                ))
                .bind(name)
                .bind(owner_id)
                .bind(project.unwrap_or(""))
                .bind(quota_col(quota_bytes)?)
                .bind(ts(at))
                .fetch_all(&self.writer)
                .await
                .map_err(duplicate(what))?;
                let id = *crate::rows::returned(&ids)?;
                self.folder(id)
                    .await?
                    .ok_or_else(|| StoreError::Corrupt(format!("folder {id} vanished after its insert")))
            }

            async fn folders(&self) -> Result<Vec<FolderRow>> {
                self.folders_where("", None).await
            }

            async fn folder(&self, id: i64) -> Result<Option<FolderRow>> {
                Ok(self.folders_where("WHERE f.id = ?", Some(id)).await?.pop())
            }

            async fn delete_folder(&self, id: i64) -> Result<()> {
                let mut tx = self.writer.begin().await?;
                sqlx::query(&sql("DELETE FROM folder_shares WHERE folder_id = ?")).bind(id).execute(&mut *tx).await?;
                let n = sqlx::query(&sql("DELETE FROM folders WHERE id = ?"))
                    .bind(id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                if n == 0 {
                    return Err(StoreError::NotFound(format!("folder {id}")));
                }
                tx.commit().await?;
                Ok(())
            }

            async fn share_folder(&self, id: i64, project: &str, read_only: bool, at: Timestamp) -> Result<()> {
                sqlx::query(&sql(
                    "INSERT INTO folder_shares (folder_id, project, read_only, shared_at) VALUES (?, ?, ?, ?) \
                     ON CONFLICT (folder_id, project) DO UPDATE SET read_only = excluded.read_only",
                ))
                .bind(id)
                .bind(project)
                .bind(read_only)
                .bind(ts(at))
                .execute(&self.writer)
                .await?;
                Ok(())
            }

            async fn unshare_folder(&self, id: i64, project: &str) -> Result<()> {
                let n = sqlx::query(&sql("DELETE FROM folder_shares WHERE folder_id = ? AND project = ?"))
                    .bind(id)
                    .bind(project)
                    .execute(&self.writer)
                    .await?
                    .rows_affected();
                if n == 0 {
                    return Err(StoreError::NotFound(format!("a share of folder {id} with project {project}")));
                }
                Ok(())
            }

            async fn set_folder_quota(&self, id: i64, quota_bytes: Option<u64>) -> Result<()> {
                let n = sqlx::query(&sql("UPDATE folders SET quota = ? WHERE id = ?"))
                    .bind(quota_col(quota_bytes)?)
                    .bind(id)
                    .execute(&self.writer)
                    .await?
                    .rows_affected();
                if n == 0 {
                    return Err(StoreError::NotFound(format!("folder {id}")));
                }
                Ok(())
            }
        }
    };
}
pub(crate) use items;
