//! The streams service: streams into running kernels (`berth exec`, `attach`, `port-forward`,
//! the app proxy). The manager asks the kernel's node's agent to dial a stream back
//! (`OpenStream` with a fresh id and secret, [`open_stream`]) and waits here until that
//! WebSocket arrives at `/v1/agents/streams/{id}` ([`Streams`]), or gives up. A secret is good
//! for one dial: a stream can be joined once, by the agent that was asked. A forward's stream
//! becomes a byte stream the manager can speak HTTP over ([`tunnel`]). The HTTP side (who
//! may enter, splicing a client's socket) is `api::kernel_stream`'s.

mod open;
mod tunnel;

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::ws::WebSocket;
use tokio::sync::oneshot;

pub use open::{OPEN_TIMEOUT, START_WAIT, StreamError, open_stream};
pub use tunnel::{TunnelError, tunnel};

#[derive(Default)]
pub struct Streams {
    next: AtomicU64,
    pending: Mutex<HashMap<u64, (String, oneshot::Sender<WebSocket>)>>,
}

/// A stream the manager waits for; dropped, it is forgotten (a late dial finds nothing).
pub struct Awaited<'a> {
    streams: &'a Streams,
    pub id: u64,
    pub secret: String,
    pub socket: oneshot::Receiver<WebSocket>,
}

impl Drop for Awaited<'_> {
    fn drop(&mut self) {
        self.streams.pending.lock().expect("streams lock").remove(&self.id);
    }
}

impl Streams {
    /// A new stream to wait for.
    pub fn expect(&self) -> Awaited<'_> {
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let secret = crate::token::new_token();
        let (tx, rx) = oneshot::channel();
        self.pending.lock().expect("streams lock").insert(id, (secret.clone(), tx));
        Awaited { streams: self, id, secret, socket: rx }
    }

    /// Where an agent's dial for stream `id` goes, if it is awaited and `secret` is its own.
    pub fn arrived(&self, id: u64, secret: &str) -> Option<oneshot::Sender<WebSocket>> {
        let mut pending = self.pending.lock().expect("streams lock");
        let (known, _) = pending.get(&id)?;
        if !crate::token::ct_eq(known.as_bytes(), secret.as_bytes()) {
            return None;
        }
        pending.remove(&id).map(|(_, tx)| tx)
    }

    /// Streams awaited now (for tests).
    #[cfg(test)]
    fn waiting(&self) -> usize {
        self.pending.lock().expect("streams lock").len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stream_is_joined_once_with_its_own_secret_and_forgotten_when_given_up() {
        let s = Streams::default();
        let a = s.expect();
        let b = s.expect();
        assert_ne!((a.id, &a.secret), (b.id, &b.secret));
        assert!(s.arrived(a.id, &b.secret).is_none(), "another stream's secret");
        assert!(s.arrived(a.id, &a.secret).is_some());
        assert!(s.arrived(a.id, &a.secret).is_none(), "joined once");
        let id = b.id;
        drop(b);
        assert_eq!(s.waiting(), 0);
        assert!(s.arrived(id, "x").is_none());
        drop(a);
    }
}
