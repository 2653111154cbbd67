//! The nodes service: node states as admins see them (`ready`, `draining`, `drained`, `lost`:
//! [`State::node_state`]), drain/undrain, the queue each node serves, agents' Docker reports,
//! the heartbeat settings, and the node shapes submit checks against.
//!
//! A node takes new jobs only when it is ready, its agent is connected and no admin drained
//! it; [`State::refresh_schedulable`] is the one place that turns those facts into the
//! scheduler's `schedulable` flag, so every path (register, disconnect, lost, drain) agrees.
//! A drain is stored and survives both agent re-registration and manager restarts.
//!
//! The node table and ledgers live in the jobs service's state (a pass needs them under the
//! same lock as the jobs): methods that change them take that state, or the jobs service to
//! lock it. The shapes are a copy of the ledgers' shapes published from the one place a
//! ledger is built or changes shape, so submit checks feasibility without the state lock.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock, RwLockReadGuard};
use std::time::Duration;

use berth_model::api::{ImagesView, NodeState, NodeView};
use berth_model::environment::{EnvRemoved, NodeEnvs};
use berth_model::protocol::{ContainerInfo, ManagerMessage};
use berth_sched::{NodeLedger, NodeShapes, QueueConfig};
use berth_store::Store;
use tokio::sync::Notify;

use crate::error::ApiError;
use crate::jobs::Jobs;
use crate::state::State;

pub struct Nodes {
    store: Arc<dyn Store>,
    /// An empty ledger per known node (see [`Nodes::publish_shape`]).
    shapes: RwLock<Vec<NodeLedger>>,
    /// The same nodes grouped by queue and shape, for the submit's feasibility check (once
    /// per shape, not per node). Rebuilt with `shapes`, and locked after it.
    by_shape: RwLock<NodeShapes>,
    /// The scheduling loop's wake-up (shared with the jobs service).
    wake: Arc<Notify>,
    /// Without a heartbeat for this long a node is `lost`.
    pub heartbeat_timeout: Duration,
    /// How often agents send one.
    pub heartbeat_interval: Duration,
}

impl Nodes {
    pub fn new(store: Arc<dyn Store>, wake: Arc<Notify>, heartbeat_timeout: Duration) -> Nodes {
        // Heartbeats a few times per timeout, at most once a second.
        let heartbeat_interval = (heartbeat_timeout / 4).clamp(Duration::from_millis(20), Duration::from_secs(1));
        Nodes {
            store,
            shapes: RwLock::new(Vec::new()),
            by_shape: RwLock::new(NodeShapes::default()),
            wake,
            heartbeat_timeout,
            heartbeat_interval,
        }
    }

    /// Publishes the shape of a node's ledger (its queue, topology, labels, allowed mounts and
    /// whether it mounts folders, with nothing allocated) for submit-time feasibility checks,
    /// replacing an older one. One source: called whenever the scheduler's ledger of the node
    /// is built or changes shape.
    pub fn publish_shape(&self, ledger: &NodeLedger) {
        let mut shape = NodeLedger::new(ledger.name(), ledger.queue(), ledger.topology().clone());
        shape.set_allowed_mounts(ledger.allowed_mounts().map(<[String]>::to_vec));
        shape.set_folder_mounts(ledger.folder_mounts());
        shape.set_labels(ledger.labels().clone());
        let mut shapes = self.shapes.write().expect("shapes lock");
        shapes.retain(|l| l.name() != ledger.name());
        shapes.push(shape);
        // Nodes join or change shape rarely; submits check on every call.
        *self.by_shape.write().expect("shapes lock") = NodeShapes::new(&shapes);
    }

    /// Every known node's shape, nothing allocated.
    pub fn shapes(&self) -> RwLockReadGuard<'_, Vec<NodeLedger>> {
        self.shapes.read().expect("shapes lock")
    }

    /// The known nodes grouped by queue and shape (see [`berth_sched::NodeShapes`]).
    pub fn by_shape(&self) -> RwLockReadGuard<'_, NodeShapes> {
        self.by_shape.read().expect("shapes lock")
    }

    /// Drains `name`: running jobs go on, no new job starts there. Draining a drained node
    /// only updates the reason.
    pub async fn drain(
        &self,
        jobs: &Jobs,
        name: &str,
        reason: Option<String>,
        by: &str,
    ) -> Result<NodeState, ApiError> {
        let mut st = jobs.lock().await;
        if !st.nodes().contains_key(name) {
            return Err(unknown_node(&st, name));
        }
        let reason = reason.map(|r| r.trim().to_string()).filter(|r| !r.is_empty());
        let reason = reason.unwrap_or_else(|| format!("drained by {by}"));
        if reason.len() > 512 {
            return Err(ApiError::bad_request("drain reason too long: keep it under 512 bytes"));
        }
        self.store.set_node_drain(name, Some(&reason)).await?;
        let n = st.node_mut(name).expect("checked above");
        n.drain = Some(reason.clone());
        st.refresh_schedulable(name);
        tracing::info!(node = name, by, reason, "node drained");
        Ok(st.node_state(name).expect("checked above"))
    }

    /// Undrains `name`: it takes jobs again (once its agent is connected).
    pub async fn undrain(&self, jobs: &Jobs, name: &str, by: &str) -> Result<NodeState, ApiError> {
        let mut st = jobs.lock().await;
        if !st.nodes().contains_key(name) {
            return Err(unknown_node(&st, name));
        }
        self.store.set_node_drain(name, None).await?;
        st.node_mut(name).expect("checked above").drain = None;
        st.refresh_schedulable(name);
        tracing::info!(node = name, by, "node undrained");
        self.wake.notify_one();
        Ok(st.node_state(name).expect("checked above"))
    }

    /// Every node as the API shows it (`GET /v1/nodes`), by name.
    pub async fn views(&self, jobs: &Jobs) -> Vec<NodeView> {
        let st = jobs.lock().await;
        let mut names: Vec<&String> = st.nodes().keys().collect();
        names.sort();
        names.into_iter().filter_map(|n| st.node_view(n)).collect()
    }

    /// Node `name` as the API shows it, if it is known.
    pub async fn view(&self, jobs: &Jobs, name: &str) -> Option<NodeView> {
        jobs.lock().await.node_view(name)
    }

    /// Which node has which container image, and where Docker is down (`GET /v1/images`).
    pub async fn images(&self, jobs: &Jobs) -> ImagesView {
        crate::images::view(&*jobs.lock().await)
    }

    /// Each ready node's cached Python environments (`GET /v1/envs`), by node name.
    pub async fn envs(&self, jobs: &Jobs) -> Vec<NodeEnvs> {
        let st = jobs.lock().await;
        st.nodes()
            .iter()
            .filter(|(_, n)| n.ready && !n.envs.is_empty())
            .map(|(name, n)| NodeEnvs { node: name.clone(), envs: n.envs.clone() })
            .collect()
    }

    /// Removes the cached environment whose key starts with `key` from every ready node
    /// (`DELETE /v1/envs/{key}`): refused while a kernel uses it, or when `key` names none or
    /// several. The nodes it went from.
    pub async fn remove_env(&self, jobs: &Jobs, key: &str) -> Result<EnvRemoved, ApiError> {
        let mut st = jobs.lock().await;
        let mut full: Vec<&str> = st
            .nodes()
            .values()
            .filter(|n| n.ready)
            .flat_map(|n| n.envs.iter().map(|e| e.key.as_str()).filter(|k| k.starts_with(key)))
            .collect();
        full.sort();
        full.dedup();
        let full = match full.as_slice() {
            [] => return Err(ApiError::not_found(format!("no node has environment {key}: see `berth env ls`"))),
            [one] => one.to_string(),
            _ => return Err(ApiError::bad_request(format!("{key} names several environments: give more of the key"))),
        };
        let busy: Vec<String> = st
            .nodes()
            .iter()
            .filter_map(|(name, n)| {
                let e = n.envs.iter().find(|e| e.key == full && e.in_use > 0)?;
                Some(format!("{} kernels on {name}", e.in_use))
            })
            .collect();
        if !busy.is_empty() {
            return Err(ApiError::conflict(format!(
                "environment {} is in use by {}: remove it once those jobs ended",
                full.get(..12).unwrap_or(&full),
                busy.join(", ")
            )));
        }
        let mut nodes = Vec::new();
        for (name, n) in st.nodes_mut().filter(|(_, n)| n.ready) {
            let before = n.envs.len();
            // Gone from listings at once; the agent's next report confirms it.
            n.envs.retain(|e| e.key != full);
            if n.envs.len() != before {
                nodes.push(name.clone());
            }
        }
        for name in &nodes {
            st.send(name, ManagerMessage::RemoveEnv { key: full.clone() });
        }
        Ok(EnvRemoved { key: full, nodes })
    }

    /// Sends `msg` to node `node`'s agent; false when it is not connected.
    pub async fn send(&self, jobs: &Jobs, node: &str, msg: ManagerMessage) -> bool {
        jobs.lock().await.send(node, msg)
    }

    /// Re-applies the queues' node selectors after a queue changed: nodes move to the queue
    /// that now selects them (their running jobs stay; new jobs come from the new queue).
    pub async fn reassign(&self, jobs: &Jobs, queues: &[QueueConfig]) {
        let mut st = jobs.lock().await;
        let moves: Vec<(String, String)> = st
            .nodes()
            .iter()
            .map(|(name, n)| (name.clone(), queue_for(queues, name, &n.labels, &n.asked_queue)))
            .filter(|(name, q)| st.node(name).is_some_and(|n| &n.queue != q))
            .collect();
        for (name, queue) in moves {
            tracing::info!(node = %name, queue, "node moves to the queue that selects it");
            st.node_mut(&name).expect("listed above").queue = queue.clone();
            if let Some(l) = st.ledger_mut(&name) {
                l.set_queue(queue.clone());
                self.publish_shape(l);
            }
        }
        self.wake.notify_one();
    }

    /// An agent reported a change of its Docker: new image sets for the scheduler (called
    /// with the state locked, among the agent's other messages).
    pub fn containers_changed(&self, st: &mut State, node: &str, info: ContainerInfo) {
        let Some(n) = st.node_mut(node) else { return };
        tracing::info!(node, docker_ok = info.docker_ok, images = info.images.len(), "node's docker changed");
        let images = crate::images::ledger_images(&info);
        let mounts = info.allow_mounts.clone();
        let mounts_changed = n.containers.allow_mounts != mounts;
        n.containers = info;
        if let Some(l) = st.ledger_mut(node) {
            l.set_images(images);
            l.set_allowed_mounts(Some(mounts.clone()));
            if mounts_changed {
                self.publish_shape(l);
            }
        }
        self.wake.notify_one();
    }

    /// A connection ended: forget it unless a newer one already replaced it. The node stays
    /// `ready` (but takes no new jobs) until the heartbeat timeout declares it lost.
    pub async fn disconnected(&self, jobs: &Jobs, node: &str, conn_id: u64) {
        let mut st = jobs.lock().await;
        let Some(n) = st.node_mut(node) else { return };
        if n.conn.as_ref().is_some_and(|c| c.id == conn_id) {
            n.conn = None;
            st.refresh_schedulable(node);
            tracing::info!(node, "agent disconnected");
        }
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

fn unknown_node(st: &State, name: &str) -> ApiError {
    let mut names: Vec<&str> = st.nodes().keys().map(String::as_str).collect();
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
