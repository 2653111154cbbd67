//! The heartbeat checker: a node silent past the timeout is `lost`, its connection closed
//! (the agent must reconnect and reconcile) and its jobs LOST or requeued. After a manager
//! restart, nodes whose agent does not come back within the timeout lose their jobs the same way.
//!
//! Silence is measured by [`Heard`], which the agent's connection keeps outside the state lock:
//! a message counts when it is read off the socket, not when the report loop gets to it, and
//! the time a connection waits for the manager to apply its last report is never the agent's
//! silence. (A busy manager, its report loop behind a long store commit, declared 14 healthy
//! nodes lost in a 50,000-job run on PostgreSQL: issue 42.)

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::deferred::LostCause;

use crate::manager::Manager;

pub async fn run(m: Arc<Manager>) {
    // Often enough that a node is declared lost within a few percent of the timeout (the
    // failover figure); a check only walks the nodes.
    let tick = (m.nodes.heartbeat_timeout / 20).clamp(Duration::from_millis(10), Duration::from_millis(250));
    let mut shutdown = m.shutdown.clone();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = shutdown.changed() => break,
        }
        check(&m).await;
    }
}

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

/// One round of checks.
pub async fn check(m: &Manager) {
    let mut st = m.jobs.lock().await;
    let now = Instant::now();
    let timeout = m.nodes.heartbeat_timeout;
    let mut lost = Vec::new();
    let mut orphaned = Vec::new();
    for (name, n) in &st.nodes {
        if n.ready && n.heard.silent_for(now) > timeout {
            lost.push(name.clone());
        } else if !n.ready && n.orphan_deadline.is_some_and(|d| now > d) {
            orphaned.push(name.clone());
        }
    }
    if !lost.is_empty() || !orphaned.is_empty() {
        // their cache nodes are down now; the pusher runs once this lock is released
        m.cache_members.changed.notify_one();
    }
    for name in lost {
        if let Err(e) = m.store.set_node_state(&name, berth_model::api::NodeState::Lost, None).await {
            tracing::error!(node = name, "cannot record lost node: {e}");
            continue;
        }
        let n = st.nodes.get_mut(&name).expect("listed above");
        n.ready = false;
        n.conn = None;
        st.refresh_schedulable(&name);
        tracing::warn!(node = name, "node lost: no heartbeat for {}s", timeout.as_secs_f64());
        let reason = format!("node {name} lost: no heartbeat for {}s", timeout.as_secs_f64());
        for id in st.jobs_on(&name) {
            m.jobs.lose_job(&mut st, id, &name, LostCause::Node, reason.clone()).await;
        }
    }
    for name in orphaned {
        if let Some(n) = st.nodes.get_mut(&name) {
            n.orphan_deadline = None;
        }
        let reason = format!("node {name} lost: its agent did not reconnect after the manager restarted");
        for id in st.jobs_on(&name) {
            m.jobs.lose_job(&mut st, id, &name, LostCause::Node, reason.clone()).await;
        }
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
