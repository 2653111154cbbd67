//! The dashboard's session: a cookie that holds an API token minted for the browser at login
//! (`web/login.rs`), so a session is checked, expired and revoked exactly like any token, and
//! the CSRF token derived from it that every change made with the cookie must carry.
//!
//! Why a token: a session then survives a manager restart, shows in `berth token list`, and
//! stops working at once when it is revoked or its user disabled. Why a derived CSRF token:
//! the page cannot read the `HttpOnly` cookie, a third site cannot read the page's answers,
//! and nothing more needs storing. The cookie is also `SameSite=Strict`.

use sha2::{Digest, Sha256};

/// The cookie's name.
pub const COOKIE: &str = "berth_session";

/// The header that carries the CSRF token on changes.
pub const CSRF_HEADER: &str = "x-berth-csrf";

/// The query parameter that carries it on a WebSocket handshake (whose headers a page's
/// script cannot set).
pub const CSRF_PARAM: &str = "csrf";

/// The CSRF token of a session token.
pub fn csrf_token(session_token: &str) -> String {
    let mut h = Sha256::new();
    h.update(b"berth csrf v1\0");
    h.update(session_token.as_bytes());
    hex::encode(h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csrf_tokens_differ_per_session_and_from_the_session_token() {
        let a = csrf_token("a");
        assert_eq!(a, csrf_token("a"));
        assert_ne!(a, csrf_token("b"));
        assert_ne!(a, crate::token::hash_token("a"), "the csrf token must not be the token's stored hash");
    }
}
