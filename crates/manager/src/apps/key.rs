//! Which app of which job attempt a connection goes to: the app proxy's pool key (one pool per
//! app, never shared between two attempts, even when a port number is used again) and the
//! serving router's name for a replica.

use std::borrow::Cow;

use berth_model::JobId;

/// Which app of which attempt a pooled connection goes to (an attempt's kernel is a new
/// process, with a new port and token).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AppKey {
    pub job: JobId,
    pub attempt: u32,
    /// Borrowed for a serving replica (its app is always `REPLICA_APP`): the router makes
    /// one key per request, and a `String` here was an allocation each (issue 42).
    pub app: Cow<'static, str>,
}

impl AppKey {
    /// The app's host name where a request has none (HTTP/2's): `<job>.<attempt>.<app>.berth`.
    pub(super) fn authority(&self) -> String {
        format!("{}.{}.{}.berth", self.job, self.attempt, self.app)
    }

    #[cfg(test)]
    fn from_authority(host: &str) -> Option<AppKey> {
        let mut parts = host.splitn(4, '.');
        let job = parts.next()?.parse().ok()?;
        let attempt = parts.next()?.parse().ok()?;
        let app = Cow::Owned(parts.next()?.to_string());
        (parts.next() == Some("berth")).then_some(AppKey { job, attempt, app })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pool_hosts_name_the_app() {
        let k = AppKey { job: 7, attempt: 2, app: "my-app".into() };
        assert_eq!(AppKey::from_authority(&k.authority()), Some(k));
        assert_eq!(AppKey::from_authority("7.2.web.example"), None);
    }

    #[test]
    fn a_borrowed_app_name_is_the_same_pool_key_as_an_owned_one() {
        use std::collections::HashMap;
        let borrowed = AppKey { job: 7, attempt: 1, app: Cow::Borrowed("serve") };
        let owned = AppKey { job: 7, attempt: 1, app: Cow::Owned("serve".to_string()) };
        let map = HashMap::from([(owned, "pooled")]);
        assert_eq!(map.get(&borrowed), Some(&"pooled"));
    }
}
