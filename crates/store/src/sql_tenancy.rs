//! [`crate::Tenancy`] for both SQL adapters (expanded in `sqlite.rs` and `postgres.rs`, see
//! `sql_rows.rs`): tokens, projects, members, quotas and the audit log.

/// This module's items, for the adapter module it is expanded in (`super`).
macro_rules! items {
    () => {
        use async_trait::async_trait;
        use berth_model::{QuotaKind, QuotaLimits};
        use jiff::Timestamp;
        use sqlx::Row;

        use super::shared_rows::user_row;
        use super::{Adapter, DbRow, sql};
        use crate::rows::{duplicate, from_ts, opt_ts, ts};
        use crate::tenancy::{AuditRow, ProjectRow, Tenancy, TokenRow};
        use crate::{Result, StoreError, UserRow};

        const TOKEN_COLUMNS: &str = "t.hash, t.user_id, u.name AS user_name, t.label, t.created_at, t.expires_at, \
             t.revoked_at, t.last_used_at, t.scope";

        fn token_row(r: &DbRow) -> Result<TokenRow> {
            Ok(TokenRow {
                hash: r.try_get("hash")?,
                user_id: r.try_get("user_id")?,
                user: r.try_get("user_name")?,
                label: r.try_get("label")?,
                created_at: from_ts(r.try_get("created_at")?)?,
                expires_at: opt_ts(r.try_get("expires_at")?)?,
                revoked_at: opt_ts(r.try_get("revoked_at")?)?,
                last_used_at: opt_ts(r.try_get("last_used_at")?)?,
                scope: r.try_get("scope")?,
            })
        }

        impl Adapter {
            async fn project_id(&self, name: &str) -> Result<i64> {
                sqlx::query_scalar(&sql("SELECT id FROM projects WHERE name = ?"))
                    .bind(name)
                    .fetch_optional(&self.reader)
                    .await?
                    .ok_or_else(|| StoreError::NotFound(format!("project {name}")))
            }

            async fn user_id(&self, name: &str) -> Result<i64> {
                sqlx::query_scalar(&sql("SELECT id FROM users WHERE name = ?"))
                    .bind(name)
                    .fetch_optional(&self.reader)
                    .await?
                    .ok_or_else(|| StoreError::NotFound(format!("user {name}")))
            }
        }

        #[async_trait]
        impl Tenancy for Adapter {
            async fn users(&self) -> Result<Vec<UserRow>> {
                let rows = sqlx::query(&sql("SELECT * FROM users ORDER BY name")).fetch_all(&self.reader).await?;
                rows.iter().map(user_row).collect()
            }

            async fn set_user_disabled(&self, name: &str, disabled: bool) -> Result<UserRow> {
                let r = sqlx::query(&sql("UPDATE users SET disabled = ? WHERE name = ? RETURNING *"))
                    .bind(disabled)
                    .bind(name)
                    .fetch_all(&self.writer)
                    .await?;
                r.first().map(user_row).transpose()?.ok_or_else(|| StoreError::NotFound(format!("user {name}")))
            }

            async fn add_token(
                &self,
                user_id: i64,
                hash: &str,
                label: &str,
                at: Timestamp,
                expires_at: Option<Timestamp>,
                scope: Option<&str>,
            ) -> Result<()> {
                sqlx::query(&sql(
                    "INSERT INTO api_tokens (hash, user_id, label, created_at, expires_at, scope) VALUES (?, ?, ?, \
                     ?, ?, ?)",
                ))
                .bind(hash)
                .bind(user_id)
                .bind(label)
                .bind(ts(at))
                .bind(expires_at.map(ts))
                .bind(scope)
                .execute(&self.writer)
                .await
                .map_err(duplicate(|| "api token".into()))?;
                Ok(())
            }

            async fn token(&self, hash: &str) -> Result<Option<(TokenRow, UserRow)>> {
                let q = format!(
                    "SELECT {TOKEN_COLUMNS}, u.id, u.name, u.role, u.disabled, u.created_at AS user_created_at \
                     FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.hash = ?"
                );
                let q = sql(&q);
                let Some(r) = sqlx::query(&q).bind(hash).fetch_optional(&self.reader).await? else {
                    return Ok(None);
                };
                let user = UserRow {
                    id: r.try_get("id")?,
                    name: r.try_get("name")?,
                    role: r.try_get("role")?,
                    disabled: r.try_get("disabled")?,
                    created_at: from_ts(r.try_get("user_created_at")?)?,
                };
                Ok(Some((token_row(&r)?, user)))
            }

            async fn tokens(&self, user_id: Option<i64>) -> Result<Vec<TokenRow>> {
                let mut text = format!("SELECT {TOKEN_COLUMNS} FROM api_tokens t JOIN users u ON u.id = t.user_id");
                if user_id.is_some() {
                    text.push_str(" WHERE t.user_id = ?");
                }
                text.push_str(" ORDER BY t.created_at DESC, t.hash");
                let text = sql(&text);
                let mut q = sqlx::query(&text);
                if let Some(u) = user_id {
                    q = q.bind(u);
                }
                q.fetch_all(&self.reader).await?.iter().map(token_row).collect()
            }

            async fn revoke_token(&self, user_id: Option<i64>, id: &str, at: Timestamp) -> Result<TokenRow> {
                let not_found = || StoreError::NotFound(format!("token {id}"));
                if id.len() < 8 || !id.chars().all(|c| c.is_ascii_hexdigit()) {
                    return Err(not_found());
                }
                let matches: Vec<TokenRow> = self
                    .tokens(user_id)
                    .await?
                    .into_iter()
                    .filter(|t| t.hash.starts_with(&id.to_ascii_lowercase()))
                    .collect();
                let [t] = matches.as_slice() else {
                    return Err(not_found());
                };
                sqlx::query(&sql("UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, ?) WHERE hash = ?"))
                    .bind(ts(at))
                    .bind(&t.hash)
                    .execute(&self.writer)
                    .await?;
                let mut t = t.clone();
                t.revoked_at.get_or_insert(at);
                Ok(t)
            }

            async fn touch_token(&self, hash: &str, at: Timestamp) -> Result<()> {
                sqlx::query(&sql("UPDATE api_tokens SET last_used_at = ? WHERE hash = ?"))
                    .bind(ts(at))
                    .bind(hash)
                    .execute(&self.writer)
                    .await?;
                Ok(())
            }

            async fn create_project(&self, name: &str, at: Timestamp) -> Result<ProjectRow> {
                let ids: Vec<i64> =
                    sqlx::query_scalar(&sql("INSERT INTO projects (name, created_at) VALUES (?, ?) RETURNING id"))
                        .bind(name)
                        .bind(ts(at))
                        .fetch_all(&self.writer)
                        .await
                        .map_err(duplicate(|| format!("project {name}")))?;
                let id = *crate::rows::returned(&ids)?;
                Ok(ProjectRow { id, name: name.to_string(), created_at: at, members: Vec::new() })
            }

            async fn projects(&self) -> Result<Vec<ProjectRow>> {
                let rows = sqlx::query(&sql("SELECT p.id, p.name, p.created_at, u.name AS member FROM projects p \
                     LEFT JOIN project_members m ON m.project_id = p.id LEFT JOIN users u ON u.id = m.user_id \
                     ORDER BY p.name, u.name"))
                .fetch_all(&self.reader)
                .await?;
                let mut out: Vec<ProjectRow> = Vec::new();
                for r in &rows {
                    let id: i64 = r.try_get("id")?;
                    if out.last().is_none_or(|p| p.id != id) {
                        out.push(ProjectRow {
                            id,
                            name: r.try_get("name")?,
                            created_at: from_ts(r.try_get("created_at")?)?,
                            members: Vec::new(),
                        });
                    }
                    if let Some(m) = r.try_get::<Option<String>, _>("member")? {
                        out.last_mut().expect("pushed above").members.push(m);
                    }
                }
                Ok(out)
            }

            async fn add_member(&self, project: &str, user: &str, at: Timestamp) -> Result<()> {
                let (p, u) = (self.project_id(project).await?, self.user_id(user).await?);
                sqlx::query(&sql("INSERT INTO project_members (project_id, user_id, added_at) VALUES (?, ?, ?) \
                     ON CONFLICT (project_id, user_id) DO NOTHING"))
                .bind(p)
                .bind(u)
                .bind(ts(at))
                .execute(&self.writer)
                .await?;
                Ok(())
            }

            async fn remove_member(&self, project: &str, user: &str) -> Result<()> {
                let (p, u) = (self.project_id(project).await?, self.user_id(user).await?);
                let done = sqlx::query(&sql("DELETE FROM project_members WHERE project_id = ? AND user_id = ?"))
                    .bind(p)
                    .bind(u)
                    .execute(&self.writer)
                    .await?;
                if done.rows_affected() == 0 {
                    return Err(StoreError::NotFound(format!("{user} in project {project}")));
                }
                Ok(())
            }

            async fn memberships(&self, user_id: i64) -> Result<Vec<String>> {
                Ok(sqlx::query_scalar(&sql(
                    "SELECT p.name FROM project_members m JOIN projects p ON p.id = m.project_id \
                     WHERE m.user_id = ? ORDER BY p.name",
                ))
                .bind(user_id)
                .fetch_all(&self.reader)
                .await?)
            }

            async fn quotas(&self) -> Result<Vec<(QuotaKind, String, QuotaLimits)>> {
                let rows = sqlx::query(&sql("SELECT kind, name, limits FROM quotas ORDER BY kind, name"))
                    .fetch_all(&self.reader)
                    .await?;
                rows.iter()
                    .map(|r| {
                        let kind: String = r.try_get("kind")?;
                        let kind = kind.parse::<QuotaKind>().map_err(StoreError::Corrupt)?;
                        let limits: String = r.try_get("limits")?;
                        let limits =
                            serde_json::from_str(&limits).map_err(|e| StoreError::Corrupt(format!("quota: {e}")))?;
                        Ok((kind, r.try_get("name")?, limits))
                    })
                    .collect()
            }

            async fn set_quota(
                &self,
                kind: QuotaKind,
                name: &str,
                limits: Option<&QuotaLimits>,
                at: Timestamp,
            ) -> Result<()> {
                match limits {
                    Some(l) => {
                        let json = serde_json::to_string(l).expect("quota limits serialise");
                        sqlx::query(&sql("INSERT INTO quotas (kind, name, limits, updated_at) VALUES (?, ?, ?, ?) \
                             ON CONFLICT (kind, name) DO UPDATE SET limits = excluded.limits, updated_at = \
                             excluded.updated_at"))
                        .bind(kind.as_str())
                        .bind(name)
                        .bind(json)
                        .bind(ts(at))
                        .execute(&self.writer)
                        .await?;
                    }
                    None => {
                        let done = sqlx::query(&sql("DELETE FROM quotas WHERE kind = ? AND name = ?"))
                            .bind(kind.as_str())
                            .bind(name)
                            .execute(&self.writer)
                            .await?;
                        if done.rows_affected() == 0 {
                            return Err(StoreError::NotFound(format!("quota of {} {name}", kind.as_str())));
                        }
                    }
                }
                Ok(())
            }

            async fn audit(&self, at: Timestamp, actor: &str, action: &str, target: &str, detail: &str) -> Result<()> {
                sqlx::query(&sql("INSERT INTO audit (at, actor, action, target, detail) VALUES (?, ?, ?, ?, ?)"))
                    .bind(ts(at))
                    .bind(actor)
                    .bind(action)
                    .bind(target)
                    .bind(detail)
                    .execute(&self.writer)
                    .await?;
                Ok(())
            }

            async fn audit_log(&self, since: Option<Timestamp>, limit: u32) -> Result<Vec<AuditRow>> {
                let rows = sqlx::query(&sql("SELECT * FROM audit WHERE at >= ? ORDER BY id DESC LIMIT ?"))
                    .bind(since.map_or(i64::MIN, ts))
                    .bind(limit as i64)
                    .fetch_all(&self.reader)
                    .await?;
                rows.iter()
                    .map(|r| {
                        Ok(AuditRow {
                            id: r.try_get("id")?,
                            at: from_ts(r.try_get("at")?)?,
                            actor: r.try_get("actor")?,
                            action: r.try_get("action")?,
                            target: r.try_get("target")?,
                            detail: r.try_get("detail")?,
                        })
                    })
                    .collect()
            }
        }
    };
}
pub(crate) use items;
