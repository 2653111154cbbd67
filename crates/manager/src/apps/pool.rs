//! The app proxy's idle connections: hyper's bare HTTP/1.1 client connections
//! (`client::conn::http1`), kept per app (an [`AppKey`]: never shared between two attempts
//! or two replicas).
//!
//! Why not hyper-util's pooled client (issue 42, second pass): its checkout (a key built and
//! hashed per request from a URI we had to format and parse, waiters, a checkout future) and
//! its per-request bookkeeping cost about a third of the proxy's user time at small
//! requests; here a request takes the most recently used ready connection of its app under
//! one short lock, and puts it back when the answer's head is in (it takes the next request
//! once the answer's body is through: [`SendRequest::is_ready`]).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use axum::body::Body;
use hyper::client::conn::http1::SendRequest;

use super::key::AppKey;

/// How long a connection may sit idle before it is closed (hyper-util's pool's default).
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The idle (or still answering) connections of each app.
#[derive(Default)]
pub struct Pool(Mutex<HashMap<AppKey, Vec<Idle>>>);

struct Idle {
    send: SendRequest<Body>,
    since: Instant,
}

impl Pool {
    fn lock(&self) -> MutexGuard<'_, HashMap<AppKey, Vec<Idle>>> {
        // Plain data: a panic elsewhere leaves nothing half-done.
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A connection to `key` that can take a request `now`, if one is idle; closed and
    /// expired ones are dropped on the way. (`now` is the caller's: when its request came.)
    pub fn take(&self, key: &AppKey, now: Instant) -> Option<SendRequest<Body>> {
        let mut map = self.lock();
        let list = map.get_mut(key)?;
        list.retain(|i| !i.send.is_closed() && now.duration_since(i.since) < IDLE_TIMEOUT);
        // The most recently used first: its buffers are warm, and the others may expire.
        let at = list.iter().rposition(|i| i.send.is_ready())?;
        Some(list.remove(at).send)
    }

    /// `send` goes back to `key`'s connections (it takes a request again once its answer is
    /// through); its idle time counts from `since`.
    pub fn put(&self, key: &AppKey, send: SendRequest<Body>, since: Instant) {
        if send.is_closed() {
            return;
        }
        let idle = Idle { send, since };
        let mut map = self.lock();
        match map.get_mut(key) {
            Some(list) => list.push(idle),
            None => {
                // A new app (a new replica, say): the apps whose connections all closed (their
                // replicas gone) go, so the map holds the live ones only.
                map.retain(|_, list| list.iter().any(|i| !i.send.is_closed()));
                map.insert(key.clone(), vec![idle]);
            }
        }
    }
}
