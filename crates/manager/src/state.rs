//! The manager's in-memory view: unfinished jobs, node ledgers and agent connections.
//!
//! The store is the truth; this is a cache of it that makes submit one INSERT and a
//! scheduling pass free of queries. Everything here is changed only after the matching store
//! write succeeded, under the one `tokio::sync::Mutex<State>` of the jobs service (`Jobs::lock`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use berth_model::api::{GpuView, JobView, NodeState, NodeView};
use berth_model::protocol::{KernelKey, KernelOutcome, ManagerMessage};
use berth_model::{Binding, JobId, JobSpec, JobState, PendingKind, PendingReason, StopCause, Topology, UnixId};
use berth_sched::{Charged, Millis, NodeLedger, UsageBook, UsageKind};
use berth_store::{JobRow, UsageRow};
use jiff::Timestamp;
use tokio::sync::mpsc::UnboundedSender;

mod batch;
pub use batch::Batch;

/// Who a job belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub user_id: i64,
    pub name: String,
    /// The Unix user who submitted it, when the manager's host vouched for it.
    pub submitter: Option<UnixId>,
}

/// How a kernel ended, as far as the manager has recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelEnd {
    pub outcome: Option<KernelOutcome>,
    pub exit_code: Option<i32>,
}

/// An unfinished job.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: JobId,
    pub user_id: i64,
    pub user: String,
    /// The Unix user who submitted the job on the manager's host, when its kernel vouched
    /// for it (a submit over the unix socket): agents run the kernels as it by default.
    pub submitter: Option<UnixId>,
    /// The spec without its exported environment (that is `exported`).
    pub spec: Arc<JobSpec>,
    /// The exported environment, shared with other jobs that have the same (`env_intern`).
    pub exported: Arc<crate::env_intern::Env>,
    pub queue: String,
    pub state: JobState,
    pub attempt: u32,
    pub submitted_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub reason: Option<String>,
    pub pending_reason: Option<PendingReason>,
    pub position: Option<u32>,
    pub blocked_passes: u32,
    /// Bindings of the current attempt (empty while pending).
    pub bindings: Vec<Binding>,
    /// Per kernel of the current attempt: its end once reported.
    pub ends: Vec<Option<KernelEnd>>,
    /// Kernels of the current attempt placed but not yet reported `Started`: an agent that
    /// reconnects without one of them gets its start again (it may have died before the
    /// kernel ran) instead of the job failing with `kernel lost`. Memory only: after a
    /// manager restart a RUNNING job's kernels count as started.
    pub unstarted: std::collections::BTreeSet<u32>,
    /// Who asked the current attempt to stop (kept from TERMINATING on; stored).
    pub stop: Option<StopCause>,
    /// When the current attempt was placed (SCHEDULED).
    pub placed_at: Option<Timestamp>,
    /// While the job holds resources: its usage is counted up to this time (ms).
    pub accounted_ms: Millis,
    /// When a pending job is expected to start (the scheduler's reservation).
    pub expected_start: Option<Timestamp>,
    /// The current attempt started beyond its quota (borrowing): preempted first. Kept in
    /// memory only; a restart recomputes it from the start order (`QuotaTable::restore_borrowed`).
    pub borrowed: bool,
}

/// How much one GPU counts against one CPU core in fair-share usage.
pub const GPU_WEIGHT: f64 = 10.0;

/// Kind of the usage row that records when running jobs' usage was last added.
pub const CLOCK: &str = "clock";

impl Job {
    /// A job just stored by a submit: PENDING, first attempt, nothing placed. `envs` keeps
    /// one copy of each exported environment.
    pub fn submitted(
        id: JobId,
        owner: Owner,
        mut spec: JobSpec,
        queue: String,
        now: Timestamp,
        envs: &crate::env_intern::EnvInterner,
    ) -> Job {
        let exported = envs.intern(std::mem::take(&mut spec.submit_env));
        Job {
            exported,
            id,
            user_id: owner.user_id,
            user: owner.name,
            submitter: owner.submitter,
            spec: Arc::new(spec),
            queue,
            state: JobState::Pending,
            attempt: 0,
            submitted_at: now,
            started_at: None,
            reason: Some("submitted".into()),
            pending_reason: None,
            position: None,
            blocked_passes: 0,
            bindings: Vec::new(),
            ends: Vec::new(),
            unstarted: Default::default(),
            stop: None,
            placed_at: None,
            accounted_ms: 0,
            expected_start: None,
            borrowed: false,
        }
    }

    pub fn from_row(mut r: JobRow, envs: &crate::env_intern::EnvInterner) -> Job {
        let exported = envs.intern(std::mem::take(&mut r.spec.submit_env));
        Job {
            exported,
            id: r.id,
            user_id: r.user_id,
            user: r.user,
            submitter: r.submitter,
            queue: r.queue,
            state: r.state,
            attempt: r.attempt,
            submitted_at: r.submitted_at,
            started_at: r.started_at,
            pending_reason: r.pending_reason,
            position: None,
            blocked_passes: 0,
            bindings: Vec::new(),
            ends: Vec::new(),
            unstarted: Default::default(),
            stop: r.stop,
            reason: r.reason,
            spec: Arc::new(r.spec),
            placed_at: None,
            accounted_ms: 0,
            expected_start: None,
            borrowed: false,
        }
    }

    /// Fair-share usage per second while the job holds resources, in billing units: one CPU
    /// core counts 1, one GPU [`GPU_WEIGHT`], per kernel (what it asked for, not what it used).
    pub fn usage_rate(&self) -> f64 {
        let r = &self.spec.resources;
        self.spec.kernel_count() as f64 * (r.cpu_milli as f64 / 1000.0 + GPU_WEIGHT * r.gpu_milli as f64 / 1000.0)
    }

    /// The job's project (`--project`), if it has one.
    pub fn project(&self) -> Option<&str> {
        self.spec.project.as_deref()
    }

    /// The account fair share and the scheduler's per-project books charge the job to: its
    /// project, else its user's own account, spelt [`personal_account`] so that it can never
    /// be taken for a project (user `vision`'s jobs once counted as project `vision`'s).
    pub fn account(&self) -> std::borrow::Cow<'_, str> {
        match self.project() {
            Some(p) => p.into(),
            None => personal_account(&self.user).into(),
        }
    }

    /// The whole spec, exported environment included (for the agent).
    pub fn full_spec(&self) -> JobSpec {
        let mut spec = (*self.spec).clone();
        spec.submit_env = (*self.exported).clone();
        spec
    }

    pub fn key(&self, index: u32) -> KernelKey {
        KernelKey { job_id: self.id, attempt: self.attempt, index }
    }

    /// Whether kernel `index` of this attempt runs on `node`.
    pub fn on_node(&self, index: u32, node: &str) -> bool {
        self.bindings.get(index as usize).is_some_and(|b| b.node == node)
    }

    pub fn view(&self) -> JobView {
        let mut nodes: Vec<String> = self.bindings.iter().map(|b| b.node.clone()).collect();
        nodes.dedup();
        JobView {
            id: self.id,
            name: self.spec.name.clone(),
            user: self.user.clone(),
            state: self.state,
            queue: self.queue.clone(),
            priority: self.spec.priority,
            position: if self.state == JobState::Pending { self.position } else { None },
            pending_reason: if self.state == JobState::Pending {
                Some(self.pending_reason.clone().unwrap_or_else(queued))
            } else {
                None
            },
            nodes,
            cpu_milli: self.spec.resources.cpu_milli,
            mem_bytes: self.spec.resources.mem_bytes,
            gpu_milli: self.spec.resources.gpu_milli,
            submitted_at: self.submitted_at,
            started_at: self.started_at,
            ended_at: None,
            exit_code: None,
            reason: self.reason.clone(),
            expected_start: if self.state == JobState::Pending { self.expected_start } else { None },
            stop: self.stop.clone(),
            end_cause: None,
        }
    }
}

/// The reason of a job no pass has looked at yet.
pub fn queued() -> PendingReason {
    PendingReason::new(PendingKind::Queued, "queued: waiting for the next scheduling pass")
}

/// A job as stored (finished, or not in memory), for lists and details.
pub fn row_view(r: &JobRow, nodes: Vec<String>) -> JobView {
    JobView {
        id: r.id,
        name: r.spec.name.clone(),
        user: r.user.clone(),
        state: r.state,
        queue: r.queue.clone(),
        priority: r.priority,
        position: None,
        pending_reason: if r.state == JobState::Pending { r.pending_reason.clone() } else { None },
        nodes,
        cpu_milli: r.spec.resources.cpu_milli,
        mem_bytes: r.spec.resources.mem_bytes,
        gpu_milli: r.spec.resources.gpu_milli,
        submitted_at: r.submitted_at,
        started_at: r.started_at,
        ended_at: r.ended_at,
        exit_code: r.exit_code,
        reason: r.reason.clone(),
        expected_start: None,
        stop: r.stop.clone(),
        end_cause: r.end_cause,
    }
}

/// A live agent connection: messages pushed here are written to its WebSocket.
#[derive(Debug, Clone)]
pub struct Conn {
    pub id: u64,
    pub tx: UnboundedSender<ManagerMessage>,
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
    pub last_seen: Instant,
    pub conn: Option<Conn>,
    /// After a manager restart: when the node's jobs count as lost if its agent has not
    /// reconnected by then.
    pub orphan_deadline: Option<Instant>,
    /// The node's Docker as its agent last reported it.
    pub containers: berth_model::protocol::ContainerInfo,
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
        let at = Timestamp::from_millisecond(now).unwrap_or_else(|_| Timestamp::now());
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
}

/// The account of `user`'s jobs without a project: `user:NAME`, a name no project can have
/// (project names are letters, digits, `-`, `_` and `.`).
pub fn personal_account(user: &str) -> String {
    format!("user:{user}")
}

impl State {
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
            .filter(|j| j.state.holds_resources() && j.bindings.iter().any(|b| b.node == node))
            .map(|j| j.id)
            .collect()
    }

    /// What `berth nodes` shows for `name`.
    pub fn node_state(&self, name: &str) -> Option<NodeState> {
        let n = self.nodes.get(name)?;
        Some(match (&n.drain, n.ready) {
            (_, false) => NodeState::Lost,
            (Some(_), true) if self.jobs_on(name).is_empty() => NodeState::Drained,
            (Some(_), true) => NodeState::Draining,
            (None, true) => NodeState::Ready,
        })
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

    pub fn node_view(&self, name: &str) -> Option<NodeView> {
        let n = self.nodes.get(name)?;
        let l = self.ledgers.get(n.ledger)?;
        let topo: &Topology = l.topology();
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
            gpus: topo
                .gpus
                .iter()
                .map(|g| GpuView {
                    index: g.index,
                    uuid: g.uuid.clone(),
                    model: g.model.clone(),
                    total_milli: 1000,
                    used_milli: l.gpu_used_milli(g.index),
                })
                .collect(),
            running_jobs: self.jobs_on(name).len() as u32,
            topology: topo.clone(),
            containers: n.containers.clone(),
        })
    }
}
