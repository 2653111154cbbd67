//! The node table and its ledgers: a node registers with its ledger, and the services read
//! and change the ledgers only through these methods, so the index a node keeps into
//! [`State::ledgers`] always points at its own.

use std::collections::HashMap;

use berth_model::api::{GpuView, NodeState, NodeView};
use berth_model::{Binding, JobId, Topology};
use berth_sched::NodeLedger;

use super::{Node, State};

impl State {
    /// Puts `node` in the table with `ledger`, in place of any earlier registration of
    /// `name` (its ledger slot is reused: the node keeps its index).
    pub fn register_node(&mut self, name: String, mut node: Node, ledger: NodeLedger) {
        node.ledger = match self.nodes.get(&name).map(|n| n.ledger) {
            Some(i) => {
                self.ledgers[i] = ledger;
                i
            }
            None => {
                self.ledgers.push(ledger);
                self.ledgers.len() - 1
            }
        };
        self.nodes.insert(name, node);
    }

    /// The node table (nodes join it only through [`State::register_node`]).
    pub fn nodes(&self) -> &HashMap<String, Node> {
        &self.nodes
    }

    pub fn node(&self, name: &str) -> Option<&Node> {
        self.nodes.get(name)
    }

    /// Node `name`, to change what its agent reported, its drain or its queue (its ledger
    /// through [`State::ledger_mut`]).
    pub fn node_mut(&mut self, name: &str) -> Option<&mut Node> {
        self.nodes.get_mut(name)
    }

    /// Every node, to change them all (an admin's drain of every node, a broadcast).
    pub fn nodes_mut(&mut self) -> impl Iterator<Item = (&String, &mut Node)> {
        self.nodes.iter_mut()
    }

    /// Every node's ledger (what a pass places jobs on).
    pub fn ledgers(&self) -> &[NodeLedger] {
        &self.ledgers
    }

    /// The ledger of `node`.
    pub fn ledger(&self, node: &str) -> Option<&NodeLedger> {
        self.ledgers.get(self.nodes.get(node)?.ledger)
    }

    pub fn ledger_mut(&mut self, node: &str) -> Option<&mut NodeLedger> {
        let i = self.nodes.get(node)?.ledger;
        self.ledgers.get_mut(i)
    }

    /// Frees the devices of `bindings` on their nodes' ledgers.
    pub fn release(&mut self, bindings: &[Binding]) {
        berth_sched::apply::release(self, bindings);
    }

    /// Takes the devices of `bindings` on their nodes' ledgers (logs clashes: the store wins).
    pub fn allocate(&mut self, job: JobId, bindings: &[Binding]) {
        for c in berth_sched::apply::allocate(self, job, bindings) {
            tracing::warn!(job, node = %c.node, "cannot restore allocation: {}", c.error);
        }
    }

    /// Jobs holding resources with a kernel on `node`.
    pub fn jobs_on(&self, node: &str) -> Vec<JobId> {
        self.jobs
            .values()
            .filter(|j| j.state.holds_resources() && j.attempt.bindings.iter().any(|b| b.node == node))
            .map(|j| j.id)
            .collect()
    }

    /// What `berth nodes` shows for `name`.
    pub fn node_state(&self, name: &str) -> Option<NodeState> {
        let n = self.nodes.get(name)?;
        Some(node_state(n, || !self.jobs_on(name).is_empty()))
    }

    /// Every node with its state, in at most one walk of the jobs (`node_state` walks them
    /// per node, which a scrape of 500 nodes and 50,000 jobs cannot afford), and none when no
    /// node is drained (only a drained node's state depends on its jobs).
    pub fn node_states(&self) -> impl Iterator<Item = (&str, &Node, NodeState)> {
        let busy: std::collections::HashSet<&str> = if self.nodes.values().any(|n| n.drain.is_some()) {
            self.jobs
                .values()
                .filter(|j| j.state.holds_resources())
                .flat_map(|j| j.attempt.bindings.iter().map(|b| b.node.as_str()))
                .collect()
        } else {
            Default::default()
        };
        self.nodes.iter().map(move |(name, n)| (name.as_str(), n, node_state(n, || busy.contains(name.as_str()))))
    }

    /// Sets the scheduler's flag for `name` from its state, connection and drain.
    pub fn refresh_schedulable(&mut self, name: &str) {
        let Some(n) = self.nodes.get(name) else { return };
        let on = n.ready && n.conn.is_some() && n.drain.is_none();
        let idx = n.ledger;
        if let Some(l) = self.ledgers.get_mut(idx) {
            l.set_schedulable(on);
        }
    }

    /// What the kernels running on `name` use now, together.
    fn node_usage(&self, name: &str) -> berth_model::JobUsage {
        let mut kernels = Vec::new();
        for id in self.jobs_on(name) {
            let Some(j) = self.jobs.get(&id) else { continue };
            for (i, b) in j.attempt.bindings.iter().enumerate() {
                if b.node == name
                    && let Some(r) = self.meters.kernel(j.key(i as u32))
                {
                    kernels.push(r);
                }
            }
        }
        let rates: Vec<f64> = kernels.iter().filter_map(|k| k.cpu_percent).collect();
        berth_model::JobUsage {
            total: berth_model::KernelUsage::sum(kernels.iter().map(|k| &k.total)),
            cpu_percent: (!rates.is_empty()).then(|| rates.iter().sum()),
        }
    }

    pub fn node_view(&self, name: &str) -> Option<NodeView> {
        let n = self.nodes.get(name)?;
        let l = self.ledgers.get(n.ledger)?;
        let topo: &Topology = l.topology();
        let busy = self.node_usage(name);
        Some(NodeView {
            name: name.to_string(),
            state: self.node_state(name)?,
            drain_reason: n.drain.clone(),
            address: n.address.clone(),
            connected: n.conn.is_some(),
            queue: n.queue.clone(),
            labels: n.labels.clone(),
            version: n.version.clone(),
            last_heartbeat: n.last_heartbeat,
            cpus_total: topo.cpus.len() as u32,
            cpus_used: l.cpus_used(),
            mem_total: topo.mem_bytes,
            mem_used: l.mem_used(),
            cpus_busy: busy.cpu_percent.map(|p| p / 100.0),
            mem_in_use: busy.total.memory_bytes,
            gpus: topo
                .gpus
                .iter()
                .map(|g| {
                    let in_use = n.gpus_in_use.iter().find(|u| u.uuid == g.uuid);
                    GpuView {
                        index: g.index,
                        uuid: g.uuid.clone(),
                        model: g.model.clone(),
                        total_milli: 1000,
                        used_milli: l.gpu_used_milli(g.index),
                        utilization: in_use.map(|u| u.utilization),
                        memory_used_bytes: in_use.map(|u| u.memory_used_bytes),
                    }
                })
                .collect(),
            running_jobs: self.jobs_on(name).len() as u32,
            topology: topo.clone(),
            containers: n.containers.clone(),
        })
    }
}

/// A node's state given whether jobs hold resources on it (asked only for a drained node).
fn node_state(n: &Node, busy: impl FnOnce() -> bool) -> NodeState {
    match (&n.drain, n.ready) {
        (_, false) => NodeState::Lost,
        (Some(_), true) if !busy() => NodeState::Drained,
        (Some(_), true) => NodeState::Draining,
        (None, true) => NodeState::Ready,
    }
}

#[cfg(test)]
mod tests {
    use berth_model::Topology;
    use berth_sched::NodeLedger;

    use crate::state::fixture::{node, one_running_job};

    /// An agent that registers again (a reconnect, a new topology) gets its old ledger slot
    /// back with the new ledger: other nodes' indices into the ledgers never move.
    #[test]
    fn a_node_registered_again_keeps_its_ledger_slot_and_others_keep_theirs() {
        let (mut st, _) = one_running_job();
        st.register_node("n2".into(), node(7), NodeLedger::new("n2", "default", Topology::synthetic(1, 2, 4 << 30, 0)));
        assert_eq!((st.nodes()["n1"].ledger, st.nodes()["n2"].ledger), (0, 1), "the slot is the table's choice");
        st.register_node("n1".into(), node(5), NodeLedger::new("n1", "default", Topology::synthetic(1, 8, 8 << 30, 0)));
        assert_eq!(st.ledgers().len(), 2);
        assert_eq!(st.node("n1").map(|n| n.ledger), Some(0));
        assert_eq!(st.ledger("n1").map(|l| l.topology().cpus.len()), Some(8));
        assert_eq!(st.ledger("n2").map(|l| l.topology().cpus.len()), Some(2));
    }
}
