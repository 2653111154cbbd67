//! Who a request acts as: the authenticated [`User`], and the [`CachedToken`] entries the
//! manager keeps per API token (and per local Unix user on its socket), so that only the
//! first use of a token reads the store. Looking tokens up, and the extractors that do it
//! for the handlers, are in `auth.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

/// An authenticated user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub id: i64,
    pub name: String,
    pub role: String,
    /// Projects the user belongs to (as of the token's first use since the last change).
    pub projects: Vec<String>,
    /// Hash of the token the request came with.
    pub token_hash: String,
}

impl User {
    pub fn is_admin(&self) -> bool {
        self.role == "admin"
    }

    pub fn member_of(&self, project: &str) -> bool {
        self.projects.iter().any(|p| p == project)
    }

    /// Whether this user may see a job of `owner`: admins, the owner, and members of the
    /// job's project when it is shared with them.
    pub fn can_see(&self, owner: i64, spec: &berth_model::JobSpec) -> bool {
        self.is_admin()
            || owner == self.id
            || (spec.shared && spec.project.as_deref().is_some_and(|p| self.member_of(p)))
    }
}

/// A token the manager has seen: its user and lifetime. Revoking a token, disabling a user
/// or changing their projects drops the entries concerned (`Tenancy::forget_tokens`), so
/// the change holds from the next request on.
#[derive(Debug)]
pub struct CachedToken {
    pub user: Arc<User>,
    pub expires_at: Option<jiff::Timestamp>,
    /// The one app the token opens (`berth open`'s sessions); `None`: an API token.
    pub scope: Option<String>,
    /// When `last_used_at` was last written (unix seconds): at most once a minute.
    touched: AtomicI64,
}

/// How often a token's `last_used_at` is written.
const TOUCH_EVERY_SECS: i64 = 60;

impl CachedToken {
    /// The entry of an API token whose `last_used_at` was last written at `last_used` (unix
    /// seconds; 0: never).
    pub fn new(
        user: Arc<User>,
        expires_at: Option<jiff::Timestamp>,
        scope: Option<String>,
        last_used: i64,
    ) -> CachedToken {
        CachedToken { user, expires_at, scope, touched: last_used.into() }
    }

    /// The entry of a local Unix user on the manager's socket (`local.rs`): no expiry, and
    /// nothing to write back as last used.
    pub fn local(user: Arc<User>) -> CachedToken {
        CachedToken { user, expires_at: None, scope: None, touched: i64::MAX.into() }
    }

    /// Whether a use at `now` (unix seconds) is to be written as the token's `last_used_at`:
    /// at most once per minute, and only for the one caller that gets `true`.
    pub fn claim_touch(&self, now: i64) -> bool {
        let last = self.touched.load(Ordering::Relaxed);
        now - last >= TOUCH_EVERY_SECS
            && self.touched.compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed).is_ok()
    }
}
