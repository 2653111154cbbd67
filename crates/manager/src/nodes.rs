//! Node states as admins see them (`ready`, `draining`, `drained`, `lost`: [`State::node_state`])
//! and drain/undrain.
//!
//! A node takes new jobs only when it is ready, its agent is connected and no admin drained
//! it; [`State::refresh_schedulable`] is the one place that turns those facts into the
//! scheduler's `schedulable` flag, so every path (register, disconnect, lost, drain) agrees.
//! A drain is stored and survives both agent re-registration and manager restarts.

use std::collections::BTreeMap;

use berth_model::api::NodeState;
use berth_sched::QueueConfig;

use crate::error::ApiError;
use crate::manager::Manager;
use crate::state::State;

impl Manager {
    /// Drains `name`: running jobs go on, no new job starts there. Draining a drained node
    /// only updates the reason.
    pub async fn drain(&self, name: &str, reason: Option<String>, by: &str) -> Result<NodeState, ApiError> {
        let mut st = self.lock_state().await;
        if !st.nodes.contains_key(name) {
            return Err(unknown_node(&st, name));
        }
        let reason = reason.map(|r| r.trim().to_string()).filter(|r| !r.is_empty());
        let reason = reason.unwrap_or_else(|| format!("drained by {by}"));
        if reason.len() > 512 {
            return Err(ApiError::bad_request("drain reason too long: keep it under 512 bytes"));
        }
        self.store.set_node_drain(name, Some(&reason)).await?;
        let n = st.nodes.get_mut(name).expect("checked above");
        n.drain = Some(reason.clone());
        st.refresh_schedulable(name);
        tracing::info!(node = name, by, reason, "node drained");
        Ok(st.node_state(name).expect("checked above"))
    }

    /// Undrains `name`: it takes jobs again (once its agent is connected).
    pub async fn undrain(&self, name: &str, by: &str) -> Result<NodeState, ApiError> {
        let mut st = self.lock_state().await;
        if !st.nodes.contains_key(name) {
            return Err(unknown_node(&st, name));
        }
        self.store.set_node_drain(name, None).await?;
        st.nodes.get_mut(name).expect("checked above").drain = None;
        st.refresh_schedulable(name);
        tracing::info!(node = name, by, "node undrained");
        self.wake.notify_one();
        Ok(st.node_state(name).expect("checked above"))
    }
}

/// The queue a node serves: the first queue (by name) that selects it by name, or whose
/// labels it all has; otherwise the queue its agent asked for.
pub fn queue_for(queues: &[QueueConfig], node: &str, labels: &BTreeMap<String, String>, asked: &str) -> String {
    let mut sorted: Vec<&QueueConfig> = queues.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    let selects = |q: &QueueConfig| {
        q.node_names.iter().any(|n| n == node)
            || (!q.node_labels.is_empty() && q.node_labels.iter().all(|(k, v)| labels.get(k) == Some(v)))
    };
    sorted.into_iter().find(|q| selects(q)).map_or_else(|| asked.to_string(), |q| q.name.clone())
}

impl Manager {
    /// Re-applies the queues' node selectors after a queue changed: nodes move to the queue
    /// that now selects them (their running jobs stay; new jobs come from the new queue).
    pub async fn reassign_nodes(&self) {
        let queues = self.queues.all();
        let mut st = self.lock_state().await;
        let moves: Vec<(String, String)> = st
            .nodes
            .iter()
            .map(|(name, n)| (name.clone(), queue_for(&queues, name, &n.labels, &n.asked_queue)))
            .filter(|(name, q)| st.nodes.get(name).is_some_and(|n| &n.queue != q))
            .collect();
        for (name, queue) in moves {
            tracing::info!(node = %name, queue, "node moves to the queue that selects it");
            let n = st.nodes.get_mut(&name).expect("listed above");
            n.queue = queue.clone();
            let idx = n.ledger;
            if let Some(l) = st.ledgers.get_mut(idx) {
                l.set_queue(queue.clone());
                self.publish_shape(l);
            }
        }
        self.wake.notify_one();
    }
}

fn unknown_node(st: &State, name: &str) -> ApiError {
    let mut names: Vec<&str> = st.nodes.keys().map(String::as_str).collect();
    names.sort_unstable();
    let known = if names.is_empty() { "none yet".to_string() } else { names.join(", ") };
    ApiError::not_found(format!("no node `{name}`: known nodes are {known} (see `berth nodes`)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_takes_nodes_by_name_or_all_labels_first_by_name() {
        let mut gpu = QueueConfig::new("gpu");
        gpu.node_labels.insert("gpu".into(), "a100".into());
        gpu.node_labels.insert("zone".into(), "b".into());
        let mut big = QueueConfig::new("big");
        big.node_names = vec!["n9".into()];
        let qs = [gpu, big, QueueConfig::new("default")];
        let labels = |pairs: &[(&str, &str)]| pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        assert_eq!(queue_for(&qs, "n1", &labels(&[("gpu", "a100"), ("zone", "b")]), "default"), "gpu");
        assert_eq!(queue_for(&qs, "n1", &labels(&[("gpu", "a100")]), "default"), "default", "every label must match");
        assert_eq!(queue_for(&qs, "n9", &labels(&[("gpu", "a100"), ("zone", "b")]), "default"), "big", "by name order");
        assert_eq!(queue_for(&qs, "n2", &BTreeMap::new(), "cpu"), "cpu", "no selector: the agent's queue");
    }
}
