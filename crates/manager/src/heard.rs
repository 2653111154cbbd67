//! When each node's agent was last heard: written by the agent's connection as it reads a
//! message, outside the state lock, and read by the heartbeat checker (`heartbeat.rs`). A
//! report waiting for the report loop is never the agent's silence (issue 42).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// When a node's agent was last heard, written by its connection without the state lock.
#[derive(Debug)]
pub struct Heard(Mutex<Hearing>);

#[derive(Debug, Clone, Copy)]
struct Hearing {
    /// The last message read, or when the manager last started listening again.
    last: Instant,
    /// A report is with the report loop: the connection reads nothing until it is applied.
    waiting: bool,
}

impl Heard {
    /// Heard at `now` (a registration).
    pub fn new(now: Instant) -> Arc<Heard> {
        Arc::new(Heard(Mutex::new(Hearing { last: now, waiting: false })))
    }

    fn with<T>(&self, f: impl FnOnce(&mut Hearing) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
    }

    /// A message was read from the agent at `now`, and is handed to the report loop.
    pub fn handed(&self, now: Instant) {
        self.with(|h| *h = Hearing { last: h.last.max(now), waiting: true });
    }

    /// The report loop applied it (or the connection ended): the manager listens again from
    /// `now`, so the agent's silence counts from here.
    pub fn applied(&self, now: Instant) {
        self.with(|h| *h = Hearing { last: h.last.max(now), waiting: false });
    }

    /// How long the manager has been listening to the agent without hearing from it.
    pub fn silent_for(&self, now: Instant) -> Duration {
        self.with(|h| if h.waiting { Duration::ZERO } else { now.saturating_duration_since(h.last) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_is_never_silent_while_its_report_waits_for_the_manager() {
        let t0 = Instant::now();
        let timeout = Duration::from_secs(30);
        let h = Heard::new(t0);
        h.handed(t0 + Duration::from_secs(1));
        // the report loop is stuck behind the store for far longer than the timeout
        assert_eq!(h.silent_for(t0 + 10 * timeout), Duration::ZERO, "the manager is the slow one, not the agent");
        // applied: silence counts from when the manager listened again, not from the message
        let back = t0 + 10 * timeout;
        h.applied(back);
        assert_eq!(h.silent_for(back + Duration::from_secs(5)), Duration::from_secs(5));
        assert!(h.silent_for(back + timeout + Duration::from_secs(1)) > timeout, "a dead agent is still found");
        // a late `applied` never moves the clock back
        h.applied(t0);
        assert_eq!(h.silent_for(back + Duration::from_secs(5)), Duration::from_secs(5));
    }
}
