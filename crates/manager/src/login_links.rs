//! One-time login links: `berth ui` (the dashboard) and `berth open` (an app behind the app
//! proxy) ask for one with the user's own credentials (token or unix socket), and opening it
//! in a browser turns it into a session (`web/login.rs`, `apps/`). A link is for one scope
//! (the dashboard, or one app's path) and is refused anywhere else. A link works once, for a short while, and only its hash is kept, so
//! nobody pastes a token into a browser and a link seen later in a shell history is dead.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::clock::Clock;
use crate::token::{hash_token, new_token};

/// How long a link works.
pub const LINK_TTL: Duration = Duration::from_secs(120);

/// What the dashboard's links are for (an app's are for its path, `/apps/<job>/<app>/`).
pub const DASHBOARD: &str = "ui";

/// Whose link it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkOwner {
    pub user_id: i64,
    pub name: String,
}

/// Links not used yet, by the hash of their code.
#[derive(Default)]
pub struct LoginLinks {
    pending: Mutex<HashMap<String, (LinkOwner, String, Instant)>>,
    /// The manager's clock (links' expiry).
    clock: Clock,
}

impl LoginLinks {
    /// No links yet, expiring by `clock`.
    pub fn new(clock: Clock) -> LoginLinks {
        LoginLinks { pending: Mutex::default(), clock }
    }

    /// A new code for `owner` in `scope`, valid for [`LINK_TTL`].
    pub fn create(&self, owner: LinkOwner, scope: &str) -> String {
        let code = new_token();
        let now = self.clock.instant();
        let mut pending = self.pending.lock().expect("login links lock");
        // Links nobody opened are dropped here: the map stays as small as the links in use.
        pending.retain(|_, (_, _, at)| now.duration_since(*at) < LINK_TTL);
        pending.insert(hash_token(&code), (owner, scope.to_string(), now));
        code
    }

    /// The owner of `code` if it is valid in `scope`; it is then used up (tried in another
    /// scope, too: a link is shown to one place only).
    pub fn redeem(&self, code: &str, scope: &str) -> Option<LinkOwner> {
        let (owner, its_scope, at) = self.pending.lock().expect("login links lock").remove(&hash_token(code))?;
        (self.clock.instant().saturating_duration_since(at) < LINK_TTL && its_scope == scope).then_some(owner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_works_once_and_only_for_its_owner() {
        let links = LoginLinks::default();
        let ada = LinkOwner { user_id: 1, name: "ada".into() };
        let code = links.create(ada.clone(), DASHBOARD);
        assert_eq!(links.redeem("not-a-code", DASHBOARD), None);
        assert_eq!(links.redeem(&code, DASHBOARD), Some(ada.clone()));
        assert_eq!(links.redeem(&code, DASHBOARD), None, "a second use must fail");
        let code = links.create(ada, "/apps/7/web/");
        assert_eq!(links.redeem(&code, "/apps/8/web/"), None, "another app's link");
        assert_eq!(links.redeem(&code, "/apps/7/web/"), None, "and it is used up");
    }
}
