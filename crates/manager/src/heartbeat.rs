//! The heartbeat checker: a node silent past the timeout is `lost`, its connection closed
//! (the agent must reconnect and reconcile) and its jobs LOST or requeued. After a manager
//! restart, nodes whose agent does not come back within the timeout lose their jobs the same way.
//!
//! Silence is measured by [`Heard`](crate::heard::Heard), which the agent's connection keeps outside the state lock:
//! a message counts when it is read off the socket, not when the report loop gets to it, and
//! the time a connection waits for the manager to apply its last report is never the agent's
//! silence. (A busy manager, its report loop behind a long store commit, declared 14 healthy
//! nodes lost in a 50,000-job run on PostgreSQL: issue 42.)

use std::sync::Arc;
use std::time::Duration;

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

/// One round of checks.
pub async fn check(m: &Manager) {
    let mut st = m.jobs.lock().await;
    let now = m.clock.instant();
    let timeout = m.nodes.heartbeat_timeout;
    let mut lost = Vec::new();
    let mut orphaned = Vec::new();
    for (name, n) in st.nodes() {
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
        let n = st.node_mut(&name).expect("listed above");
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
        if let Some(n) = st.node_mut(&name) {
            n.orphan_deadline = None;
        }
        let reason = format!("node {name} lost: its agent did not reconnect after the manager restarted");
        for id in st.jobs_on(&name) {
            m.jobs.lose_job(&mut st, id, &name, LostCause::Node, reason.clone()).await;
        }
    }
}
