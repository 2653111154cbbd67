//! [`crate::Endpoints`] for both SQL adapters (expanded in `sqlite.rs` and `postgres.rs`, see
//! `sql_rows.rs`): the `endpoints` and `endpoint_tokens` tables. Specs are JSON text, like a job's;
//! the revision (u64) and the replica count (u32) are BIGINT, refused as `Corrupt` when they do not
//! fit either way.

/// This module's items, for the adapter module it is expanded in (`super`).
macro_rules! items {
    () => {
        use async_trait::async_trait;
        use berth_model::UnixId;
        use berth_model::endpoint::{EndpointSpec, Rollout};
        use jiff::Timestamp;
        use sqlx::Row;

        use super::{Adapter, DbRow, sql};
        use crate::endpoints::{EndpointRow, EndpointTokenRow, Endpoints};
        use crate::rows::{duplicate, from_ts, is_unique_violation, json, returned, submitter, to_json, ts};
        use crate::{Result, StoreError};

        const COLUMNS: &str = "e.id, e.name, e.owner_id, u.name AS owner, e.submitter_uid, e.submitter_gid, e.spec, \
             e.revision, e.previous, e.desired, e.rollout, e.message, e.created_at, e.updated_at";
        const TOKEN_COLUMNS: &str = "id, endpoint_id, label, hash, created_at";

        fn endpoint_row(r: &DbRow) -> Result<EndpointRow> {
            let name: String = r.try_get("name")?;
            let revision: i64 = r.try_get("revision")?;
            let desired: i64 = r.try_get("desired")?;
            let rollout: String = r.try_get("rollout")?;
            let previous: Option<String> = r.try_get("previous")?;
            Ok(EndpointRow {
                id: r.try_get("id")?,
                owner_id: r.try_get("owner_id")?,
                owner: r.try_get("owner")?,
                submitter: submitter(
                    "endpoint",
                    r.try_get("submitter_uid")?,
                    r.try_get("submitter_gid")?,
                )?,
                spec: json("endpoint spec", &r.try_get::<String, _>("spec")?)?,
                revision: u64::try_from(revision)
                    .map_err(|_| StoreError::Corrupt(format!("endpoint {name} revision {revision}")))?,
                previous: previous.map(|p| json("endpoint previous spec", &p)).transpose()?,
                desired: u32::try_from(desired)
                    .map_err(|_| StoreError::Corrupt(format!("endpoint {name} desired replicas {desired}")))?,
                rollout: Rollout::parse(&rollout)
                    .ok_or_else(|| StoreError::Corrupt(format!("endpoint {name} rollout `{rollout}`")))?,
                message: r.try_get("message")?,
                created_at: from_ts(r.try_get("created_at")?)?,
                updated_at: from_ts(r.try_get("updated_at")?)?,
                name,
            })
        }

        fn token_row(r: &DbRow) -> Result<EndpointTokenRow> {
            Ok(EndpointTokenRow {
                id: r.try_get("id")?,
                endpoint_id: r.try_get("endpoint_id")?,
                label: r.try_get("label")?,
                hash: r.try_get("hash")?,
                created_at: from_ts(r.try_get("created_at")?)?,
            })
        }

        fn revision_col(revision: u64) -> Result<i64> {
            i64::try_from(revision)
                .map_err(|_| StoreError::Corrupt(format!("endpoint revision {revision} is too large")))
        }

        impl Adapter {
            /// The endpoints that `cond` picks (with `name` bound to its `?`), by id.
            async fn endpoints_where(&self, cond: &str, name: Option<&str>) -> Result<Vec<EndpointRow>> {
                let q =
                    format!("SELECT {COLUMNS} FROM endpoints e JOIN users u ON u.id = e.owner_id {cond} ORDER BY e.id");
                let q = sql(&q);
                let mut query = sqlx::query(&q);
                if let Some(name) = name {
                    query = query.bind(name);
                }
                query
                    .fetch_all(&self.reader)
                    .await?
                    .iter()
                    .map(endpoint_row)
                    .collect()
            }

            /// The tokens that `cond` picks (with `endpoint_id` bound to its `?`), by id.
            async fn endpoint_tokens_where(
                &self,
                cond: &str,
                endpoint_id: Option<i64>,
            ) -> Result<Vec<EndpointTokenRow>> {
                let q = format!("SELECT {TOKEN_COLUMNS} FROM endpoint_tokens {cond} ORDER BY id");
                let q = sql(&q);
                let mut query = sqlx::query(&q);
                if let Some(id) = endpoint_id {
                    query = query.bind(id);
                }
                query
                    .fetch_all(&self.reader)
                    .await?
                    .iter()
                    .map(token_row)
                    .collect()
            }
        }

        #[async_trait]
        impl Endpoints for Adapter {
            async fn create_endpoint(
                &self,
                name: &str,
                owner_id: i64,
                submitter: Option<UnixId>,
                spec: &EndpointSpec,
                desired: u32,
                at: Timestamp,
            ) -> Result<EndpointRow> {
                let ids: Vec<i64> = sqlx::query_scalar(&sql(
                    "INSERT INTO endpoints (name, owner_id, submitter_uid, submitter_gid, spec, revision, previous, \
                     desired, \
                     rollout, message, created_at, updated_at) VALUES (?, ?, ?, ?, ?, 1, NULL, ?, ?, NULL, ?, ?) \
                     RETURNING id",
                ))
                .bind(name)
                .bind(owner_id)
                .bind(submitter.map(|s| i64::from(s.uid)))
                .bind(submitter.map(|s| i64::from(s.gid)))
                .bind(to_json(spec))
                .bind(i64::from(desired))
                .bind(Rollout::Done.as_str())
                .bind(ts(at))
                .bind(ts(at))
                .fetch_all(&self.writer)
                .await
                .map_err(duplicate(|| format!("endpoint {name}")))?;
                let id = *returned(&ids)?;
                self.endpoint(name)
                    .await?
                    .filter(|e| e.id == id)
                    .ok_or_else(|| StoreError::Corrupt(format!("endpoint {id} vanished after its insert")))
            }

            async fn endpoints(&self) -> Result<Vec<EndpointRow>> {
                self.endpoints_where("", None).await
            }

            async fn endpoint(&self, name: &str) -> Result<Option<EndpointRow>> {
                Ok(self.endpoints_where("WHERE e.name = ?", Some(name)).await?.pop())
            }

            async fn update_endpoint(&self, row: &EndpointRow) -> Result<()> {
                let n = sqlx::query(&sql(
                    "UPDATE endpoints SET spec = ?, revision = ?, previous = ?, desired = ?, rollout = ?, message = ?, \
                     updated_at = ? WHERE id = ?",
                ))
                .bind(to_json(&row.spec))
                .bind(revision_col(row.revision)?)
                .bind(row.previous.as_ref().map(to_json))
                .bind(i64::from(row.desired))
                .bind(row.rollout.as_str())
                .bind(row.message.as_deref())
                .bind(ts(row.updated_at))
                .bind(row.id)
                .execute(&self.writer)
                .await?
                .rows_affected();
                if n == 0 {
                    return Err(StoreError::NotFound(format!("endpoint {}", row.name)));
                }
                Ok(())
            }

            async fn delete_endpoint(&self, id: i64) -> Result<bool> {
                let mut tx = self.writer.begin().await?;
                sqlx::query(&sql("DELETE FROM endpoint_tokens WHERE endpoint_id = ?"))
                    .bind(id)
                    .execute(&mut *tx)
                    .await?;
                let n = sqlx::query(&sql("DELETE FROM endpoints WHERE id = ?"))
                    .bind(id)
                    .execute(&mut *tx)
                    .await?
                    .rows_affected();
                tx.commit().await?;
                Ok(n > 0)
            }

            async fn create_endpoint_token(
                &self,
                endpoint_id: i64,
                label: &str,
                hash: &str,
                at: Timestamp,
            ) -> Result<EndpointTokenRow> {
                let rows = sqlx::query(&sql(&format!(
                    "INSERT INTO endpoint_tokens (endpoint_id, label, hash, created_at) VALUES (?, ?, ?, ?) \
                     RETURNING {TOKEN_COLUMNS}"
                )))
                .bind(endpoint_id)
                .bind(label)
                .bind(hash)
                .bind(ts(at))
                .fetch_all(&self.writer)
                .await
                .map_err(|e| match &e {
                    _ if is_unique_violation(&e) => StoreError::Duplicate("an endpoint token with this hash".into()),
                    sqlx::Error::Database(d) if d.is_foreign_key_violation() => {
                        StoreError::NotFound(format!("endpoint {endpoint_id}"))
                    }
                    _ => e.into(),
                })?;
                token_row(returned(&rows)?)
            }

            async fn endpoint_tokens(&self, endpoint_id: i64) -> Result<Vec<EndpointTokenRow>> {
                self.endpoint_tokens_where("WHERE endpoint_id = ?", Some(endpoint_id))
                    .await
            }

            async fn all_endpoint_tokens(&self) -> Result<Vec<EndpointTokenRow>> {
                self.endpoint_tokens_where("", None).await
            }

            async fn delete_endpoint_token(&self, endpoint_id: i64, id: i64) -> Result<bool> {
                let n = sqlx::query(&sql(
                    "DELETE FROM endpoint_tokens WHERE endpoint_id = ? AND id = ?",
                ))
                .bind(endpoint_id)
                .bind(id)
                .execute(&self.writer)
                .await?
                .rows_affected();
                Ok(n > 0)
            }
        }
    };
}
pub(crate) use items;
