//! The manager's in-memory view: unfinished jobs, node ledgers and agent connections.
//!
//! The store is the truth; this is a cache of it that makes submit one INSERT and a
//! scheduling pass free of queries. Everything here is changed only after the matching store
//! write succeeded, under the one `tokio::sync::Mutex<State>` of the jobs service (`Jobs::lock`).

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use berth_model::api::{GpuView, JobView, NodeState, NodeView};
use berth_model::protocol::ManagerMessage;
use berth_model::{Binding, JobId, Topology};
use berth_sched::{Charged, Millis, NodeLedger, PendingSet, RunningSet, Untried, UsageBook, UsageKind};
use berth_store::UsageRow;
use jiff::Timestamp;
use tokio::sync::mpsc::UnboundedSender;

use crate::clock::Clock;

mod batch;
#[cfg(test)]
pub mod fixture;
mod job;
mod meters;
pub use batch::Batch;
pub use job::{Job, JobEvent, KernelEnd, Owner, personal_account, row_view, scheduled_reason};
pub use meters::Meters;

/// Kind of the usage row that records when running jobs' usage was last added.
pub const CLOCK: &str = "clock";

/// A live agent connection: messages pushed here are written to its WebSocket.
#[derive(Debug, Clone)]
pub struct Conn {
    pub id: u64,
    pub tx: UnboundedSender<ManagerMessage>,
    /// When its agent was last heard; the node's [`Node::heard`] while it is connected.
    pub heard: std::sync::Arc<crate::heard::Heard>,
}

/// A node the manager knows (registered now or in an earlier run).
#[derive(Debug)]
pub struct Node {
    /// Index of its ledger in [`State::ledgers`].
    pub ledger: usize,
    /// The queue it serves: one that selects it by name or label, else `asked_queue`.
    pub queue: String,
    /// The queue its agent asked for (`berth agent --queue`).
    pub asked_queue: String,
    /// The agent's labels.
    pub labels: std::collections::BTreeMap<String, String>,
    pub version: String,
    /// Registered and heard from within the heartbeat timeout (false: `lost`).
    pub ready: bool,
    /// Where other nodes reach it (`MASTER_ADDR`).
    pub address: Option<String>,
    /// Why an admin drained it; `None` when not drained.
    pub drain: Option<String>,
    pub last_heartbeat: Option<Timestamp>,
    /// When its agent was last heard (its connection writes it, outside this state's lock).
    pub heard: std::sync::Arc<crate::heard::Heard>,
    pub conn: Option<Conn>,
    /// After a manager restart: when the node's jobs count as lost if its agent has not
    /// reconnected by then.
    pub orphan_deadline: Option<Instant>,
    /// The node's Docker as its agent last reported it.
    pub containers: berth_model::protocol::ContainerInfo,
    /// Its GPUs' use at the last heartbeat (NVML on the node; empty without it).
    pub gpus_in_use: Vec<berth_model::protocol::GpuUse>,
    /// Its cache of Python environments, as its agent last reported it (`berth env ls`).
    pub envs: Vec<berth_model::environment::EnvEntry>,
}

/// Fair-share usage per user and project: the scheduler's book (`berth_sched::UsageBook`, the
/// same as `berth sim`'s), in billing-seconds, each figure decayed to its own ms, with the
/// store's rows. Every change is O(1): decay the one figure to now, add, write that row.
#[derive(Debug, Default)]
pub struct Usage(UsageBook);

impl std::ops::Deref for Usage {
    type Target = UsageBook;
    fn deref(&self) -> &UsageBook {
        &self.0
    }
}

impl std::ops::DerefMut for Usage {
    fn deref_mut(&mut self) -> &mut UsageBook {
        &mut self.0
    }
}

impl Usage {
    /// The rows after adding `amount` (billing-seconds) for each (user, project, amount) at
    /// `now`; amounts of the same name add up. Memory is unchanged until [`Usage::set`].
    pub fn charge(&self, items: &[(&str, &str, f64)], now: Millis, half_life_ms: Millis) -> Vec<UsageRow> {
        // Out of range never: `now` is a reading of the manager's clock.
        let at = Timestamp::from_millisecond(now).unwrap_or_default();
        let row = |c: Charged| UsageRow { kind: c.kind.as_str().into(), name: c.name.into(), value: c.figure.0, at };
        self.0.charge(items, now, half_life_ms).into_iter().map(row).collect()
    }

    /// Takes rows made by [`Usage::charge`] once they are stored.
    pub fn set(&mut self, rows: &[UsageRow]) {
        for r in rows {
            if let Some(kind) = UsageKind::parse(&r.kind) {
                self.0.set(kind, &r.name, (r.value, r.at.as_millisecond()));
            }
        }
    }
}

/// Everything the manager keeps in memory.
#[derive(Default)]
pub struct State {
    pub jobs: BTreeMap<JobId, Job>,
    pub usage: Usage,
    /// One ledger per node; a slice because `schedule` takes `&[NodeLedger]`.
    pub ledgers: Vec<NodeLedger>,
    pub nodes: HashMap<String, Node>,
    /// Agent reports to apply again: the store refused their change (`deferred.rs`).
    pub deferred: Vec<crate::deferred::Deferred>,
    /// Open while the report loop applies a batch of agent reports (`batch.rs`).
    pub batch: Option<Batch>,
    /// The PENDING jobs as the scheduler sees them, kept across passes so that a pass reads
    /// only the jobs it tries (`berth_sched::schedule_set`); in step with `jobs` through
    /// [`State::sync_sets`].
    pub pending: PendingSet,
    /// The jobs holding resources as the scheduler sees them (their ends are backfill's
    /// timeline), kept across passes the same way.
    pub running: RunningSet,
    /// Passes so far; each pending job records the last one that placed it in the queue.
    pub pass_seq: u64,
    /// The last pass's untried runs that end in a rest of the set (the jobs behind where a
    /// walk stopped): where those jobs stand, worked out only when someone looks.
    pub untried: Vec<Untried>,
    /// [`State::untried_places`] of the last pass, once someone looked (reset by each pass:
    /// jobs submitted since have no place yet and show as queued, cancelled ones are not
    /// looked up).
    untried_places: std::cell::OnceCell<HashMap<JobId, (u32, usize)>>,
    /// What running jobs use now, from the agents' heartbeats.
    pub meters: Meters,
    /// PENDING jobs kept out of `pending` until their begin time and dependency allow them
    /// (`holds.rs`): the scheduler never sees them.
    pub held: std::collections::BTreeSet<JobId>,
    /// How the ended jobs (and array tasks) that held jobs depend on ended (read from the
    /// store once: an ended job no longer changes; `None`: no longer on record).
    pub ended_targets: HashMap<berth_model::JobRef, Option<berth_sched::depend::Target>>,
    /// How far each job array has got (`arrays.rs`), once a pass looked at it.
    pub arrays: HashMap<JobId, crate::array_progress::ArrayProgress>,
    /// Run times of the jobs that ended after running, by user, name and size
    /// (`predictions.rs`): each job's estimate as it enters the pending set.
    pub predictor: berth_sched::Predictor,
    /// The manager's clock (`Manager::clock`).
    clock: Clock,
}

impl State {
    /// An empty state reading the time from `clock`.
    pub fn new(clock: Clock) -> State {
        State { clock, ..State::default() }
    }

    /// Adds a job to memory (a submit, a restart), and to the pending or running set.
    pub fn insert_job(&mut self, job: Job) {
        let id = job.id;
        if job.state == berth_model::JobState::Pending && job.spec.has_start_conditions() {
            self.held.insert(id);
        }
        self.jobs.insert(id, job);
        self.sync_sets(id);
    }

    /// Makes the scheduler's sets agree with job `id` after any change to it: in the pending
    /// set exactly while it is PENDING, in the running set (as it is now: start, limit,
    /// bindings, flags) while it holds resources.
    pub fn sync_sets(&mut self, id: JobId) {
        match self.jobs.get(&id) {
            Some(j) if j.state == berth_model::JobState::Pending && self.held.contains(&id) => {
                self.pending.remove(id);
                self.running.remove(id);
            }
            Some(j) if j.state == berth_model::JobState::Pending => {
                if self.pending.get(id).is_none() {
                    // Entering the set (a submit, a requeue, a restart, a hold's end): its
                    // expected run time from the history so far.
                    let key = crate::predictions::key(&j.owner.name, &j.spec);
                    let estimate = self.predictor.predict(&key, j.time_limit_ms());
                    let j = self.jobs.get_mut(&id).expect("matched above");
                    j.estimate_ms = estimate;
                    self.pending.insert(j.pending_job());
                }
                self.running.remove(id);
            }
            Some(j) if j.state.holds_resources() => {
                self.held.remove(&id);
                self.pending.remove(id);
                // Submitted before any run of its kind had ended, a job may start with history
                // to predict from by now: backfill then plans its end with that, not with the
                // queue's default limit (issue 41: a 5 s job held the next one for "59m").
                if j.estimate_ms.is_none() {
                    let key = crate::predictions::key(&j.owner.name, &j.spec);
                    if let Some(e) = self.predictor.predict(&key, j.time_limit_ms()) {
                        self.jobs.get_mut(&id).expect("matched above").estimate_ms = Some(e);
                    }
                }
                let j = &self.jobs[&id];
                // A job without a start or placement time (restored SCHEDULED) counts from
                // now, once: its end stays put from pass to pass.
                let now = self.clock.now_ms();
                let r = self.running.get(id).map(|r| r.started_at).unwrap_or(now);
                let job = j.running_job(r);
                if self.running.get(id) != Some(&job) {
                    self.running.insert(job);
                }
            }
            _ => {
                self.held.remove(&id);
                self.pending.remove(id);
                self.running.remove(id);
            }
        }
    }

    /// A pass begins: what the last one left untried is forgotten.
    pub fn new_pass(&mut self) {
        self.pass_seq += 1;
        self.untried.clear();
        self.untried_places = Default::default();
    }

    /// Where each job of the last pass's untried rests stands: its position and the index of
    /// its run in `untried`. Read from the set once per pass, when someone looks (`berth ps`,
    /// `berth show`, the dashboard), never by the pass itself.
    pub fn untried_places(&self) -> &HashMap<JobId, (u32, usize)> {
        self.untried_places.get_or_init(|| {
            let mut places = HashMap::new();
            for (r, run) in self.untried.iter().enumerate() {
                let Some(rest) = &run.rest else { continue };
                let first = run.first_position + run.jobs.len() as u32;
                for (k, id) in self.pending.rest_ids(rest).into_iter().enumerate() {
                    places.insert(id, (first + k as u32, r));
                }
            }
            places
        })
    }

    /// The view of `job`, with its place in the queue when the last pass left it in an
    /// untried rest, and what it uses while it runs.
    pub fn job_view(&self, job: &Job) -> JobView {
        let mut v = job.view();
        // The indices still to make (`[3-100%10]`); once all are made, its tasks stand for it.
        if let (Some(a), Some(p)) = (&job.spec.array, self.arrays.get(&job.id))
            && !p.all_made(a)
        {
            v.array = Some(a.remaining(|i| p.made.contains(&i)));
        }
        if job.state.holds_resources() {
            v.usage = self.meters.job(job.id, job.attempt.number);
        }
        if job.state == berth_model::JobState::Pending
            && job.waiting.pass < self.pass_seq
            && let Some(&(position, run)) = self.untried_places().get(&job.id)
        {
            v.position = Some(position);
            v.pending_reason = Some(self.untried[run].reason.clone());
            v.expected_start = None;
        }
        v
    }

    /// Sends commands collected before a state change, now that it is stored.
    pub fn send_all(&self, msgs: Vec<(String, ManagerMessage)>) {
        for (node, msg) in msgs {
            self.send(&node, msg);
        }
    }

    /// Sends `msg` to the agent of `node`; false if it is not connected. While a batch is
    /// open the command is held until the batch is stored.
    pub fn send(&self, node: &str, msg: ManagerMessage) -> bool {
        if let Some(b) = &self.batch {
            b.hold(node, msg);
            return true;
        }
        match self.nodes.get(node).and_then(|n| n.conn.as_ref()) {
            Some(c) => c.tx.send(msg).is_ok(),
            None => false,
        }
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
