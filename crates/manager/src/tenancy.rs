//! The tenancy service: who a request is (API tokens, and the caller's Unix user on the local
//! socket), join tokens, the bootstrap of a fresh data dir, and the audit log. It owns the
//! token caches; API handlers and the agent hub reach it as `Manager::tenancy`.

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, RwLock};

use axum::http::request::Parts;
use berth_store::{ProjectRow, Store, StoreError, TokenRow};

use crate::bad_tokens::BadTokenAudit;
use crate::clock::Clock;
use crate::error::ApiError;
use crate::identity::{CachedToken, User};
use crate::login_links::LinkOwner;
use crate::token::{ct_eq, hash_token, new_token};

/// How long a dashboard session lasts (a working day and a half).
pub const SESSION_TTL: std::time::Duration = std::time::Duration::from_secs(12 * 3600);

pub struct Tenancy {
    store: Arc<dyn Store>,
    /// API token hash → user; filled on first use of a token.
    tokens: RwLock<HashMap<String, Arc<CachedToken>>>,
    /// Hashes of valid join tokens (few; compared in constant time).
    join_hashes: RwLock<Vec<String>>,
    /// Uses of revoked and expired tokens: audited at most once per token per minute.
    bad_tokens: Arc<BadTokenAudit>,
    /// The manager's clock: tokens' and sessions' expiry, the rows' times.
    clock: Clock,
}

impl Tenancy {
    pub fn new(store: Arc<dyn Store>, clock: Clock) -> Tenancy {
        let bad_tokens = Arc::new(BadTokenAudit::new(clock.clone()));
        Tenancy { store, tokens: RwLock::default(), join_hashes: RwLock::default(), bad_tokens, clock }
    }

    /// The audit of dead-token uses, for its flush at shutdown.
    pub fn bad_tokens(&self) -> Arc<BadTokenAudit> {
        self.bad_tokens.clone()
    }
}

impl Tenancy {
    /// The user owning an API token (cached after the first lookup). Unknown and revoked
    /// tokens get the same answer; an expired one says so, since only its holder can send it.
    /// A token made for one app (`berth open`'s session cookie) is no API token: refused.
    pub async fn authenticate(&self, token: &str) -> Result<Arc<User>, ApiError> {
        self.authenticate_for(token, None).await
    }

    /// The user owning a session of the app at `scope` (its path): only a token made for that
    /// app (`create_app_session`), never an API token, so the app proxy's cookie and the API
    /// cannot stand in for each other.
    pub async fn authenticate_app(&self, token: &str, scope: &str) -> Result<Arc<User>, ApiError> {
        self.authenticate_for(token, Some(scope)).await
    }

    async fn authenticate_for(&self, token: &str, scope: Option<&str>) -> Result<Arc<User>, ApiError> {
        let invalid = || {
            ApiError::unauthorized("invalid API token: check BERTH_TOKEN or your credentials file")
                .because(berth_model::api::ErrorReason::TokenInvalid)
        };
        let hash = hash_token(token);
        let now = self.clock.now();
        let cached = self.tokens.read().expect("token cache lock").get(&hash).cloned();
        let entry = match cached {
            Some(e) => e,
            None => {
                let Some((t, u)) = self.store.token(&hash).await? else { return Err(invalid()) };
                if t.revoked_at.is_some() {
                    self.audit_bad_token((&u.name, "auth.revoked-token", t.id()), "a revoked token was used").await;
                    return Err(invalid());
                }
                if u.disabled {
                    return Err(ApiError::unauthorized(format!(
                        "user {} is disabled: ask an admin (berth admin user enable)",
                        u.name
                    )));
                }
                let projects = self.store.memberships(u.id).await?;
                let user = User { id: u.id, name: u.name, role: u.role, projects, token_hash: hash.clone() };
                let last = t.last_used_at.map_or(0, |l| l.as_second());
                let e = Arc::new(CachedToken::new(Arc::new(user), t.expires_at, t.scope, last));
                self.tokens.write().expect("token cache lock").insert(hash.clone(), e.clone());
                e
            }
        };
        if entry.scope.as_deref() != scope {
            return Err(invalid());
        }
        if entry.expires_at.is_some_and(|x| now >= x) {
            self.tokens.write().expect("token cache lock").remove(&hash);
            self.audit_bad_token((&entry.user.name, "auth.expired-token", &hash[..12]), "an expired token was used")
                .await;
            return Err(ApiError::unauthorized(
                "API token expired: log in with a new one (berth token create, then berth login)",
            ));
        }
        if entry.claim_touch(now.as_second()) {
            let store = self.store.clone();
            tokio::spawn(async move {
                if let Err(e) = store.touch_token(&hash, now).await {
                    tracing::warn!("cannot record token use: {e}");
                }
            });
        }
        Ok(entry.user.clone())
    }

    /// Drops cached tokens matching `pred`: their next use reloads (or refuses) them.
    pub fn forget_tokens(&self, pred: impl Fn(&CachedToken) -> bool) {
        self.tokens.write().expect("token cache lock").retain(|_, e| !pred(e));
    }

    /// Disables (or enables) user `name` on behalf of `admin`: their tokens stop (or start)
    /// working at once. Audited.
    pub async fn set_user_disabled(&self, admin: &str, name: &str, disabled: bool) -> Result<(), ApiError> {
        if disabled && name == admin {
            return Err(ApiError::bad_request("you cannot disable yourself: ask another admin"));
        }
        let u = self
            .store
            .set_user_disabled(name, disabled)
            .await
            .map_err(|e| not_found_as(e, format!("no user `{name}`")))?;
        self.forget_tokens(|t| t.user.id == u.id);
        self.audit(admin, if disabled { "user.disable" } else { "user.enable" }, name, "").await;
        Ok(())
    }

    /// Creates project `name` (already validated) on behalf of `admin`. Audited.
    pub async fn create_project(&self, admin: &str, name: &str) -> Result<ProjectRow, ApiError> {
        let p = match self.store.create_project(name, self.clock.now()).await {
            Ok(p) => p,
            Err(StoreError::Duplicate(_)) => return Err(ApiError::conflict(format!("project {name} already exists"))),
            Err(e) => return Err(e.into()),
        };
        self.audit(admin, "project.create", name, "").await;
        Ok(p)
    }

    /// Adds `user` to `project` (or removes them) on behalf of `admin`: what they may see
    /// changes at their next request. Audited.
    pub async fn set_member(&self, admin: &str, project: &str, user: &str, member: bool) -> Result<(), ApiError> {
        // The user is named in the body, not the path: one that does not exist is bad input
        // (422), while the project in the path answers 404.
        if member && self.store.user_by_name(user).await?.is_none() {
            return Err(ApiError::unprocessable(format!(
                "no user `{user}`: create it first (berth admin user create {user})"
            )));
        }
        let stored = if member {
            self.store.add_member(project, user, self.clock.now()).await
        } else {
            self.store.remove_member(project, user).await
        };
        stored.map_err(|e| match e {
            StoreError::NotFound(what) => ApiError::not_found(format!("no {what}")),
            e => e.into(),
        })?;
        self.forget_tokens(|t| t.user.name == user);
        let action = if member { "project.add-member" } else { "project.remove-member" };
        self.audit(admin, action, project, user).await;
        Ok(())
    }

    /// A new API token for `user`: its id and the secret (shown once; only its hash is kept).
    /// Audited.
    pub async fn create_token(
        &self,
        user: &User,
        label: &str,
        expires_at: Option<jiff::Timestamp>,
    ) -> Result<(String, String), ApiError> {
        self.mint(user.id, &user.name, label, expires_at, None, "token.create").await
    }

    /// A dashboard session for the owner of a login link: a token that lives in the browser's
    /// cookie (`session_cookie.rs`) and expires after [`SESSION_TTL`]. Audited.
    pub async fn create_session(&self, owner: &LinkOwner) -> Result<String, ApiError> {
        let expires = self.clock.now() + jiff::SignedDuration::from_secs(SESSION_TTL.as_secs() as i64);
        let (_, token) =
            self.mint(owner.user_id, &owner.name, "web session", Some(expires), None, "session.create").await?;
        Ok(token)
    }

    /// A session for one app behind the app proxy (`scope`, its path), started from a login
    /// link (`berth open`): a token in a cookie only that path gets, which the proxy never
    /// passes on. Audited.
    pub async fn create_app_session(&self, owner: &LinkOwner, scope: &str) -> Result<String, ApiError> {
        let expires = self.clock.now() + jiff::SignedDuration::from_secs(SESSION_TTL.as_secs() as i64);
        let label = format!("app session {scope}");
        let (_, token) =
            self.mint(owner.user_id, &owner.name, &label, Some(expires), Some(scope), "app-session.create").await?;
        Ok(token)
    }

    async fn mint(
        &self,
        user_id: i64,
        name: &str,
        label: &str,
        expires_at: Option<jiff::Timestamp>,
        scope: Option<&str>,
        action: &str,
    ) -> Result<(String, String), ApiError> {
        let token = new_token();
        let hash = hash_token(&token);
        self.store.add_token(user_id, &hash, label, self.clock.now(), expires_at, scope).await?;
        let id = hash[..12].to_string();
        self.audit(name, action, &id, label).await;
        Ok((id, token))
    }

    /// Revokes token `id` of `user` (an admin: anyone's); it stops working at once. Audited.
    pub async fn revoke_token(&self, user: &User, id: &str) -> Result<TokenRow, ApiError> {
        let owner = if user.is_admin() { None } else { Some(user.id) };
        let t = self.store.revoke_token(owner, id, self.clock.now()).await.map_err(|e| {
            not_found_as(e, format!("no token `{id}`: use an id from `berth token list` (at least 8 hex digits)"))
        })?;
        self.forget_tokens(|c| c.user.token_hash == t.hash);
        self.audit(&user.name, "token.revoke", t.id(), &format!("token of {}", t.user)).await;
        Ok(t)
    }

    /// Appends to the audit log; a failure is logged, never fails the request (the action
    /// itself is already stored).
    pub async fn audit(&self, actor: &str, action: &str, target: &str, detail: &str) {
        if let Err(e) = self.store.audit(self.clock.now(), actor, action, target, detail).await {
            tracing::error!(actor, action, target, "cannot write the audit log: {e}");
        }
    }

    /// Audits a use of a revoked or expired token, at most one row per token per minute
    /// (`bad_tokens.rs`): a loop with a dead token must not flood the log.
    async fn audit_bad_token(&self, who: (&str, &'static str, &str), what: &'static str) {
        self.bad_tokens.audit_use(&self.store, who, what).await;
    }

    pub fn join_token_valid(&self, token: &str) -> bool {
        let h = hash_token(token);
        let hashes = self.join_hashes.read().expect("join token lock");
        // Compare against all of them so the time does not tell which one matched.
        hashes.iter().fold(false, |ok, k| ct_eq(k.as_bytes(), h.as_bytes()) | ok)
    }

    /// Creates a join token, stores its hash and returns the plain token.
    pub async fn create_join_token(&self) -> Result<String, ApiError> {
        let token = new_token();
        let hash = hash_token(&token);
        self.store.add_join_token(&hash, self.clock.now()).await?;
        self.join_hashes.write().expect("join token lock").push(hash);
        Ok(token)
    }
    /// The berth user of a socket request without a token: the admin for the manager's own
    /// Unix user and root, else the user named like the caller's Unix account (created on its
    /// first request). Cached like a token, so disabling the user or changing its projects
    /// holds from the next request.
    pub async fn authenticate_local(&self, parts: &Parts) -> Result<Arc<User>, ApiError> {
        let Some(peer) = crate::local::submitter(parts) else {
            return Err(ApiError::unauthorized("cannot read the caller's identity on the unix socket: use a token"));
        };
        let key = format!("local:uid:{}", peer.uid);
        if let Some(e) = self.tokens.read().expect("token cache lock").get(&key) {
            return Ok(e.user.clone());
        }
        let own = nix::unistd::geteuid().as_raw();
        let admin = parts.extensions.get::<crate::local::LocalAdmin>();
        let name = match admin {
            Some(crate::local::LocalAdmin(a)) if peer.uid == own || peer.uid == 0 => a.to_string(),
            _ => unix_name(peer.uid)?,
        };
        let row = match self.store.user_by_name(&name).await? {
            Some(u) => u,
            None => {
                let u = self.store.create_user(&name, "user", self.clock.now()).await?;
                self.audit(&name, "user.create", &name, &format!("first request from local uid {}", peer.uid)).await;
                tracing::info!(user = %name, uid = peer.uid, "created berth user for a local Unix account");
                u
            }
        };
        if row.disabled {
            return Err(ApiError::unauthorized(format!(
                "user {} is disabled: ask an admin (berth admin user enable)",
                row.name
            )));
        }
        let projects = self.store.memberships(row.id).await?;
        let user = Arc::new(User { id: row.id, name: row.name, role: row.role, projects, token_hash: key.clone() });
        let entry = Arc::new(CachedToken::local(user.clone()));
        self.tokens.write().expect("token cache lock").insert(key, entry);
        Ok(user)
    }

    /// Creates the admin and its first token on the first start of a data dir.
    pub async fn bootstrap(&self, admin: &str) -> anyhow::Result<Option<crate::Bootstrap>> {
        if self.store.meta_get("bootstrapped").await?.is_some() {
            return Ok(None);
        }
        let now = self.clock.now();
        // A start that died half-way may have created the user already: give it a fresh token.
        let user = match self.store.user_by_name(admin).await? {
            Some(u) => u,
            None => self.store.create_user(admin, "admin", now).await?,
        };
        let token = new_token();
        self.store.add_api_token(user.id, &hash_token(&token), "bootstrap", now).await?;
        self.store.meta_set("bootstrapped", "1").await?;
        Ok(Some(crate::Bootstrap { user: admin.to_string(), token }))
    }

    /// Makes sure the local agent's join token exists: kept in plain text (mode 0600) in
    /// `<data_dir>/join-token` because the store only has its hash.
    pub async fn local_join_token(&self, data_dir: &Path) -> anyhow::Result<String> {
        let path = data_dir.join("join-token");
        let token = match std::fs::read_to_string(&path) {
            Ok(t) if !t.trim().is_empty() => t.trim().to_string(),
            Ok(_) => anyhow::bail!("{} is empty: delete it to make a new join token", path.display()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let t = new_token();
                write_private(&path, &t)?;
                t
            }
            Err(e) => return Err(anyhow::anyhow!("cannot read {}: {e}", path.display())),
        };
        self.store.add_join_token(&hash_token(&token), self.clock.now()).await?;
        *self.join_hashes.write().expect("join token lock") = self.store.join_token_hashes().await?;
        Ok(token)
    }
}

/// The account name of `uid` on the manager's host, as a berth user name.
fn unix_name(uid: u32) -> Result<String, ApiError> {
    let user = nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)).ok().flatten().ok_or_else(|| {
        ApiError::unauthorized(format!("uid {uid} has no account name on the manager's host: use a token"))
    })?;
    if !berth_model::valid_name(&user.name) {
        return Err(ApiError::unauthorized(format!(
            "the Unix account name `{}` is not a valid berth user name: use a token",
            user.name
        )));
    }
    Ok(user.name)
}

fn write_private(path: &Path, content: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut opts, 0o600);
    let mut f = opts.open(path).map_err(|e| anyhow::anyhow!("cannot create {}: {e}", path.display()))?;
    f.write_all(content.as_bytes())?;
    Ok(())
}

fn not_found_as(e: StoreError, message: String) -> ApiError {
    match e {
        StoreError::NotFound(_) => ApiError::not_found(message),
        e => e.into(),
    }
}
