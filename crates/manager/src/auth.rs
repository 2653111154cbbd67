//! API tokens, join tokens and the bootstrap of a fresh data directory.
//!
//! Tokens are 32 random bytes in hex, shown once; only their sha256 is stored. An API token
//! is looked up by its hash (knowing a hash does not help forge the token, so a map lookup on
//! it leaks nothing useful); join tokens are few and compared in constant time.

use std::path::Path;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use rand::RngCore;
use sha2::{Digest, Sha256};

use crate::error::ApiError;
use crate::identity::{CachedToken, User};
use crate::manager::Manager;

/// A new random token (64 hex characters).
pub fn new_token() -> String {
    let mut b = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut b);
    hex::encode(b)
}

pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Equality whose time does not depend on where the inputs differ (`subtle`).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    subtle::ConstantTimeEq::ct_eq(a, b).into()
}

/// The bearer token of a request, if any.
pub fn bearer(parts: &Parts) -> Option<&str> {
    bearer_of(&parts.headers)
}

/// The bearer token in `headers`, if any.
pub fn bearer_of(headers: &axum::http::HeaderMap) -> Option<&str> {
    let v = headers.get(axum::http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim()).filter(|t| !t.is_empty())
}

impl Manager {
    /// The user owning an API token (cached after the first lookup). Unknown and revoked
    /// tokens get the same answer; an expired one says so, since only its holder can send it.
    pub async fn authenticate(&self, token: &str) -> Result<Arc<User>, ApiError> {
        let invalid = || ApiError::unauthorized("invalid API token: check BERTH_TOKEN or your credentials file");
        let hash = hash_token(token);
        let now = jiff::Timestamp::now();
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
                let e = Arc::new(CachedToken::new(Arc::new(user), t.expires_at, last));
                self.tokens.write().expect("token cache lock").insert(hash.clone(), e.clone());
                e
            }
        };
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

    /// Appends to the audit log; a failure is logged, never fails the request (the action
    /// itself is already stored).
    pub async fn audit(&self, actor: &str, action: &str, target: &str, detail: &str) {
        if let Err(e) = self.store.audit(jiff::Timestamp::now(), actor, action, target, detail).await {
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
        self.store.add_join_token(&hash, jiff::Timestamp::now()).await?;
        self.join_hashes.write().expect("join token lock").push(hash);
        Ok(token)
    }
}

impl Manager {
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
                let u = self.store.create_user(&name, "user", jiff::Timestamp::now()).await?;
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

/// Creates the admin and its first token on the first start of a data dir.
pub async fn bootstrap(m: &Manager, admin: &str) -> anyhow::Result<Option<crate::Bootstrap>> {
    if m.store.meta_get("bootstrapped").await?.is_some() {
        return Ok(None);
    }
    let now = jiff::Timestamp::now();
    // A start that died half-way may have created the user already: give it a fresh token.
    let user = match m.store.user_by_name(admin).await? {
        Some(u) => u,
        None => m.store.create_user(admin, "admin", now).await?,
    };
    let token = new_token();
    m.store.add_api_token(user.id, &hash_token(&token), "bootstrap", now).await?;
    m.store.meta_set("bootstrapped", "1").await?;
    Ok(Some(crate::Bootstrap { user: admin.to_string(), token }))
}

/// Makes sure the local agent's join token exists: kept in plain text (mode 0600) in
/// `<data_dir>/join-token` because the store only has its hash.
pub async fn local_join_token(m: &Manager, data_dir: &Path) -> anyhow::Result<String> {
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
    m.store.add_join_token(&hash_token(&token), jiff::Timestamp::now()).await?;
    *m.join_hashes.write().expect("join token lock") = m.store.join_token_hashes().await?;
    Ok(token)
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

/// Extractor: the user behind the request's `Authorization: Bearer` token, or without one,
/// over the manager's unix socket, the caller's local Unix user (401 otherwise).
pub struct Auth(pub Arc<User>);

impl FromRequestParts<Arc<Manager>> for Auth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, m: &Arc<Manager>) -> Result<Self, ApiError> {
        if bearer(parts).is_none() && crate::local::peer(parts).is_some() {
            return Ok(Auth(m.authenticate_local(parts).await?));
        }
        let token = bearer(parts).ok_or_else(|| {
            ApiError::unauthorized("missing API token: send `Authorization: Bearer <token>` (set BERTH_TOKEN)")
        })?;
        Ok(Auth(m.authenticate(token).await?))
    }
}

/// Extractor: an authenticated admin (403 for other users).
pub struct Admin(pub Arc<User>);

impl FromRequestParts<Arc<Manager>> for Admin {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, m: &Arc<Manager>) -> Result<Self, ApiError> {
        let Auth(u) = Auth::from_request_parts(parts, m).await?;
        if !u.is_admin() {
            return Err(ApiError::forbidden(format!("only admins may do this; {} is a {}", u.name, u.role)));
        }
        Ok(Admin(u))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_hex_and_hash_is_stable() {
        let a = new_token();
        assert_eq!(a.len(), 64);
        assert_ne!(a, new_token());
        assert_eq!(hash_token("x"), hash_token("x"));
        assert_ne!(hash_token("x"), hash_token("y"));
    }

    #[test]
    fn constant_time_eq() {
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"ab"));
    }
}
