//! The levels of `/metrics`, computed at scrape time from the in-memory state: jobs by state
//! and queue, pending jobs by reason kind, nodes by state, each node's capacity and
//! allocation, connected agents.
//!
//! [`Snapshot::take`] runs under the state lock and only counts (one walk of the jobs, one of
//! the nodes); building the families and encoding them happens after the lock is released,
//! so a scrape holds up scheduling passes as little as possible.

use std::collections::HashMap;

use berth_model::api::NodeState;
use berth_model::{JobState, PendingKind};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};

use super::{L1, L2, L3};
use crate::state::State;

/// One node's figures.
#[derive(Debug, Clone)]
struct NodeRow {
    name: String,
    queue: String,
    state: NodeState,
    cpus: u32,
    cpus_allocated: u32,
    mem_bytes: u64,
    mem_allocated: u64,
    /// GPUs, and thousandths of them allocated (GPU shares are fractions).
    gpus: u32,
    gpu_milli_allocated: u64,
}

/// What a scrape reports of the state, counted under its lock.
#[derive(Debug, Default)]
pub struct Snapshot {
    /// Unfinished jobs by (queue, state); finished ones are `berth_jobs_finished_total`.
    jobs: HashMap<(String, JobState), i64>,
    /// Pending jobs by (queue, reason kind); `None`: no pass has looked at it yet.
    pending: HashMap<(String, Option<PendingKind>), i64>,
    nodes: Vec<NodeRow>,
    agents: i64,
    /// Whether this manager leads (1) and its leader epoch.
    leader: i64,
    epoch: i64,
}

impl Snapshot {
    /// Adds whether this manager leads, and with which epoch (`docs/ha.md`).
    pub fn with_leader(mut self, leads: bool, epoch: u64) -> Snapshot {
        self.leader = leads.into();
        self.epoch = i64::try_from(epoch).unwrap_or(i64::MAX);
        self
    }

    /// Counts `st`; every unfinished state of every queue in `queues` is reported, 0
    /// included, so that a query or an alert on a state no job is in reads 0, not nothing.
    pub fn take<'a>(st: &'a State, queues: impl IntoIterator<Item = &'a str>) -> Snapshot {
        let mut s = Snapshot::default();
        // Per queue (a handful), counts by state and by reason kind, indexed by their
        // position: one walk of the jobs without hashing, one String per queue.
        let mut by_queue: Vec<(&str, PerQueue)> = queues.into_iter().map(|q| (q, PerQueue::default())).collect();
        for j in st.live_jobs() {
            let q = match by_queue.iter().position(|(q, _)| *q == j.queue) {
                Some(i) => &mut by_queue[i].1,
                None => {
                    by_queue.push((j.queue.as_str(), PerQueue::default()));
                    &mut by_queue.last_mut().expect("just pushed").1
                }
            };
            q.states[j.state as usize] += 1;
            if j.state == JobState::Pending {
                // `get_mut`: a kind added to the model but not to `KINDS` is not counted
                // rather than a panic (`kind_label`'s match names every kind to add).
                if let Some(n) = q.reasons.get_mut(j.waiting.reason.as_ref().map_or(0, |r| r.kind as usize + 1)) {
                    *n += 1;
                }
            }
        }
        for (queue, q) in by_queue {
            for state in JobState::ALL.into_iter().filter(|s| !s.is_terminal()) {
                s.jobs.insert((queue.to_string(), state), q.states[state as usize]);
            }
            for (i, n) in q.reasons.iter().enumerate().filter(|(_, n)| **n > 0) {
                s.pending.insert((queue.to_string(), i.checked_sub(1).map(|k| KINDS[k])), *n);
            }
        }
        for (name, n, state) in st.node_states() {
            s.agents += i64::from(n.conn.is_some());
            let Some(l) = st.ledger(name) else { continue };
            s.nodes.push(NodeRow {
                name: name.to_string(),
                queue: n.queue.clone(),
                state,
                cpus: l.cpus_total(),
                cpus_allocated: l.cpus_used(),
                mem_bytes: l.mem_total(),
                mem_allocated: l.mem_used(),
                gpus: l.topology().gpus.len() as u32,
                gpu_milli_allocated: l.gpus_used_milli(),
            });
        }
        s
    }

    /// The families of this snapshot, in a registry of their own (made per scrape).
    pub fn registry(&self) -> Registry {
        let mut r = Registry::default();
        let jobs = Family::<L2, Gauge>::default();
        for ((queue, state), n) in &self.jobs {
            jobs.get_or_create(&[("queue", queue.clone()), ("state", state.as_str().to_ascii_lowercase())]).set(*n);
        }
        r.register("berth_jobs", "Unfinished jobs, by queue and state", jobs);
        let pending = Family::<L2, Gauge>::default();
        for ((queue, kind), n) in &self.pending {
            let reason = kind.map_or("queued", kind_label);
            pending.get_or_create(&[("queue", queue.clone()), ("reason", reason.to_string())]).set(*n);
        }
        r.register("berth_jobs_pending", "Pending jobs, by queue and the kind of reason they wait", pending);

        let by_state = Family::<L1, Gauge>::default();
        // Every state is present (0 included), so an alert on `lost` has a series to read.
        for state in [NodeState::Ready, NodeState::Draining, NodeState::Drained, NodeState::Lost] {
            let _ = by_state.get_or_create(&[("state", state.as_str().to_string())]);
        }
        let node_state = Family::<L3, Gauge>::default();
        let cpus = Family::<L2, Gauge>::default();
        let cpus_alloc = Family::<L2, Gauge>::default();
        let mem = Family::<L2, Gauge>::default();
        let mem_alloc = Family::<L2, Gauge>::default();
        let gpus = Family::<L2, Gauge>::default();
        let gpus_alloc = Family::<L2, Gauge<f64, std::sync::atomic::AtomicU64>>::default();
        for n in &self.nodes {
            by_state.get_or_create(&[("state", n.state.as_str().to_string())]).inc();
            let l = [("node", n.name.clone()), ("queue", n.queue.clone())];
            let [node, queue] = l.clone();
            node_state.get_or_create(&[node, queue, ("state", n.state.as_str().to_string())]).set(1);
            cpus.get_or_create(&l).set(i64::from(n.cpus));
            cpus_alloc.get_or_create(&l).set(i64::from(n.cpus_allocated));
            mem.get_or_create(&l).set(n.mem_bytes as i64);
            mem_alloc.get_or_create(&l).set(n.mem_allocated as i64);
            gpus.get_or_create(&l).set(i64::from(n.gpus));
            gpus_alloc.get_or_create(&l).set(n.gpu_milli_allocated as f64 / 1000.0);
        }
        r.register("berth_nodes", "Nodes known to the manager, by state", by_state);
        r.register("berth_node_state", "1 for each node's current state", node_state);
        r.register("berth_node_cpus", "Logical CPUs of each node", cpus);
        r.register("berth_node_cpus_allocated", "Logical CPUs of each node bound to jobs", cpus_alloc);
        r.register_with_unit("berth_node_memory", "Memory of each node", Unit::Bytes, mem);
        r.register_with_unit(
            "berth_node_memory_allocated",
            "Memory of each node bound to jobs",
            Unit::Bytes,
            mem_alloc,
        );
        r.register("berth_node_gpus", "GPUs of each node", gpus);
        r.register("berth_node_gpus_allocated", "GPUs of each node bound to jobs (fractions count)", gpus_alloc);
        let agents = Gauge::<i64>::default();
        agents.set(self.agents);
        r.register("berth_agents_connected", "Agents with an open connection to this manager", agents);
        let (leader, epoch) = (Gauge::<i64>::default(), Gauge::<i64>::default());
        leader.set(self.leader);
        epoch.set(self.epoch);
        r.register("berth_manager_leader", "Whether this manager leads (1) or stands by (0)", leader);
        r.register("berth_manager_epoch", "The leader epoch this manager leads with (0: no lease)", epoch);
        r
    }
}

/// One queue's counts: by `JobState as usize`, and by reason kind (`0`: no reason yet, then
/// `PendingKind as usize + 1`).
#[derive(Default)]
struct PerQueue {
    states: [i64; JobState::ALL.len()],
    reasons: [i64; KINDS.len() + 1],
}

/// Every reason kind, in declaration order (`KINDS[k as usize] == k`, checked by a test).
const KINDS: [PendingKind; 16] = {
    use PendingKind::*;
    [
        Queued,
        Resources,
        Priority,
        NoNodes,
        Queue,
        Backfill,
        Preempting,
        Quota,
        Image,
        Mount,
        Dependency,
        DependencyNeverSatisfied,
        BeginTime,
        ArrayTasks,
        HeldUser,
        HeldAdmin,
    ]
};

/// The label of a reason kind: the API's spelling (`no-nodes`, ...).
fn kind_label(kind: PendingKind) -> &'static str {
    match kind {
        PendingKind::Queued => "queued",
        PendingKind::Resources => "resources",
        PendingKind::Priority => "priority",
        PendingKind::NoNodes => "no-nodes",
        PendingKind::Queue => "queue",
        PendingKind::Backfill => "backfill",
        PendingKind::Preempting => "preempting",
        PendingKind::Quota => "quota",
        PendingKind::Image => "image",
        PendingKind::Mount => "mount",
        PendingKind::Dependency => "dependency",
        PendingKind::DependencyNeverSatisfied => "dependency-never-satisfied",
        PendingKind::BeginTime => "begin-time",
        PendingKind::ArrayTasks => "array-tasks",
        PendingKind::HeldUser => "held-user",
        PendingKind::HeldAdmin => "held-admin",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::fixture::{job, node, one_running_job};
    use berth_model::{PendingReason, Topology};
    use berth_sched::NodeLedger;

    /// n1 runs job 1 (2 of 4 CPUs) and is drained (so draining); n2 is drained and idle;
    /// jobs 2 and 3 wait, one for resources, one not yet looked at.
    #[test]
    fn levels_come_from_the_state() {
        let (mut st, _) = one_running_job();
        st.register_node("n2".into(), node(1), NodeLedger::new("n2", "default", Topology::synthetic(1, 4, 8 << 30, 1)));
        for n in st.nodes_mut().map(|(_, n)| n) {
            n.drain = Some("maintenance".into());
        }
        let mut waiting = job(2, JobState::Pending);
        waiting.waiting.reason = Some(PendingReason::new(PendingKind::Resources, "needs 8 CPUs"));
        st.insert_job(waiting);
        st.insert_job(job(3, JobState::Pending));

        let snap = Snapshot::take(&st, ["default", "gpu"]);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &snap.registry()).unwrap();
        for line in [
            "berth_jobs{queue=\"default\",state=\"running\"} 1",
            "berth_jobs{queue=\"default\",state=\"pending\"} 2",
            "berth_jobs{queue=\"gpu\",state=\"pending\"} 0",
            "berth_jobs_pending{queue=\"default\",reason=\"resources\"} 1",
            "berth_jobs_pending{queue=\"default\",reason=\"queued\"} 1",
            "berth_nodes{state=\"draining\"} 1",
            "berth_nodes{state=\"drained\"} 1",
            "berth_nodes{state=\"lost\"} 0",
            "berth_node_state{node=\"n1\",queue=\"default\",state=\"draining\"} 1",
            "berth_node_cpus_allocated{node=\"n1\",queue=\"default\"} 2",
            "berth_node_cpus{node=\"n2\",queue=\"default\"} 4",
            "berth_node_memory_allocated_bytes{node=\"n1\",queue=\"default\"} 1073741824",
            "berth_node_gpus{node=\"n2\",queue=\"default\"} 1",
            "berth_agents_connected 0",
        ] {
            assert!(text.contains(line), "missing `{line}` in\n{text}");
        }
        assert!(!text.contains("state=\"succeeded\""), "finished states are counters, not levels");
    }

    /// The labels are the API's spelling of each kind, so a dashboard and `berth ps -o json`
    /// agree.
    #[test]
    fn reason_labels_match_the_api() {
        for (i, k) in KINDS.into_iter().enumerate() {
            assert_eq!(serde_json::to_value(k).unwrap(), kind_label(k), "{k:?}");
            assert_eq!(k as usize, i, "KINDS is in declaration order");
        }
        for (i, s) in JobState::ALL.into_iter().enumerate() {
            assert_eq!(s as usize, i, "JobState::ALL is in declaration order");
        }
    }
}
