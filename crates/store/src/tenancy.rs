//! What tenancy persists (docs/tenancy.md): users' API tokens with their lifetimes, projects and
//! their members, and the audit log. A supertrait of [`crate::Store`], kept apart so each
//! stays readable; every adapter implements both.

use async_trait::async_trait;
use berth_model::{QuotaKind, QuotaLimits};
use jiff::Timestamp;

use crate::{Result, UserRow};

/// An API token as stored: only its sha256 is kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRow {
    pub hash: String,
    pub user_id: i64,
    pub user: String,
    pub label: String,
    pub created_at: Timestamp,
    pub expires_at: Option<Timestamp>,
    pub revoked_at: Option<Timestamp>,
    pub last_used_at: Option<Timestamp>,
    /// The one app the token opens (its path, `/apps/<job>/<app>/`); `None`: an API token.
    pub scope: Option<String>,
}

impl TokenRow {
    /// The public id of a token: the first 12 hex digits of its hash (never the secret).
    pub fn id(&self) -> &str {
        &self.hash[..self.hash.len().min(12)]
    }

    /// Whether the token may be used at `now`.
    pub fn usable(&self, now: Timestamp) -> bool {
        self.revoked_at.is_none() && self.expires_at.is_none_or(|e| now < e)
    }
}

/// A project with its members' names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectRow {
    pub id: i64,
    pub name: String,
    pub created_at: Timestamp,
    pub members: Vec<String>,
}

/// One entry of the audit log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRow {
    pub id: i64,
    pub at: Timestamp,
    /// Who acted (a user name; `-` for an unauthenticated caller).
    pub actor: String,
    /// What, dotted: `user.create`, `token.revoke`, `auth.revoked-token`, ...
    pub action: String,
    pub target: String,
    pub detail: String,
}

#[async_trait]
pub trait Tenancy: Send + Sync {
    // --- users ---------------------------------------------------------------------------
    async fn users(&self) -> Result<Vec<UserRow>>;
    /// `NotFound` for an unknown user.
    async fn set_user_disabled(&self, name: &str, disabled: bool) -> Result<UserRow>;

    // --- tokens --------------------------------------------------------------------------
    /// Stores a token hash for `user_id`; `expires_at` `None` never expires; a `scope` (an
    /// app's path) makes it good for that one app and not for the API.
    async fn add_token(
        &self,
        user_id: i64,
        hash: &str,
        label: &str,
        at: Timestamp,
        expires_at: Option<Timestamp>,
        scope: Option<&str>,
    ) -> Result<()>;
    /// The token with this hash and its user.
    async fn token(&self, hash: &str) -> Result<Option<(TokenRow, UserRow)>>;
    /// Tokens of `user_id` (all users' with `None`), newest first.
    async fn tokens(&self, user_id: Option<i64>) -> Result<Vec<TokenRow>>;
    /// Revokes the one token whose id (hash prefix, at least 8 hex digits) matches, of
    /// `user_id` (any user's with `None`); `NotFound` when none or several match.
    async fn revoke_token(&self, user_id: Option<i64>, id: &str, at: Timestamp) -> Result<TokenRow>;
    /// Records that a token was used (callers rate-limit this).
    async fn touch_token(&self, hash: &str, at: Timestamp) -> Result<()>;

    // --- projects ------------------------------------------------------------------------
    /// `Duplicate` if the name is taken.
    async fn create_project(&self, name: &str, at: Timestamp) -> Result<ProjectRow>;
    async fn projects(&self) -> Result<Vec<ProjectRow>>;
    /// `NotFound` for an unknown project or user; adding a member twice is a no-op.
    async fn add_member(&self, project: &str, user: &str, at: Timestamp) -> Result<()>;
    /// `NotFound` for an unknown project or user, or a user who is not a member.
    async fn remove_member(&self, project: &str, user: &str) -> Result<()>;
    /// Names of the projects `user_id` belongs to.
    async fn memberships(&self, user_id: i64) -> Result<Vec<String>>;

    // --- quotas --------------------------------------------------------------------------
    /// Every quota: (kind, name, limits).
    async fn quotas(&self) -> Result<Vec<(QuotaKind, String, QuotaLimits)>>;
    /// Sets (replaces) or, with `None`, removes a quota; removing a missing one is `NotFound`.
    async fn set_quota(&self, kind: QuotaKind, name: &str, limits: Option<&QuotaLimits>, at: Timestamp) -> Result<()>;

    // --- audit ---------------------------------------------------------------------------
    async fn audit(&self, at: Timestamp, actor: &str, action: &str, target: &str, detail: &str) -> Result<()>;
    /// Entries at or after `since`, newest first, at most `limit`.
    async fn audit_log(&self, since: Option<Timestamp>, limit: u32) -> Result<Vec<AuditRow>>;
}
