//! One-time dashboard login links: `berth ui` asks for one with the user's own credentials
//! (token or unix socket), and opening it in a browser turns it into a session
//! (`web/login.rs`). A link works once, for a short while, and only its hash is kept, so
//! nobody pastes a token into a browser and a link seen later in a shell history is dead.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::token::{hash_token, new_token};

/// How long a link works.
pub const LINK_TTL: Duration = Duration::from_secs(120);

/// Whose link it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkOwner {
    pub user_id: i64,
    pub name: String,
}

/// Links not used yet, by the hash of their code.
#[derive(Default)]
pub struct LoginLinks {
    pending: Mutex<HashMap<String, (LinkOwner, Instant)>>,
}

impl LoginLinks {
    /// A new code for `owner`, valid for [`LINK_TTL`].
    pub fn create(&self, owner: LinkOwner) -> String {
        let code = new_token();
        let now = Instant::now();
        let mut pending = self.pending.lock().expect("login links lock");
        // Links nobody opened are dropped here: the map stays as small as the links in use.
        pending.retain(|_, (_, at)| now.duration_since(*at) < LINK_TTL);
        pending.insert(hash_token(&code), (owner, now));
        code
    }

    /// The owner of `code` if it is valid; it is then used up.
    pub fn redeem(&self, code: &str) -> Option<LinkOwner> {
        let (owner, at) = self.pending.lock().expect("login links lock").remove(&hash_token(code))?;
        (at.elapsed() < LINK_TTL).then_some(owner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_link_works_once_and_only_for_its_owner() {
        let links = LoginLinks::default();
        let ada = LinkOwner { user_id: 1, name: "ada".into() };
        let code = links.create(ada.clone());
        assert_eq!(links.redeem("not-a-code"), None);
        assert_eq!(links.redeem(&code), Some(ada));
        assert_eq!(links.redeem(&code), None, "a second use must fail");
    }
}
