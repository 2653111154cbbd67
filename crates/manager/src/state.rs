//! The manager's in-memory view: unfinished jobs, node ledgers and agent connections.
//!
//! The store is the truth; this is a cache of it that makes submit one INSERT and a
//! scheduling pass free of queries. Everything here is changed only after the matching store
//! write succeeded, under the one `tokio::sync::Mutex<State>` of the jobs service (`Jobs::lock`).

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use berth_model::JobId;
use berth_model::api::JobView;
use berth_model::protocol::ManagerMessage;
use berth_sched::{NodeLedger, PendingSet, RunningSet, Untried};
use jiff::Timestamp;
use tokio::sync::mpsc::UnboundedSender;

use crate::clock::Clock;

mod batch;
#[cfg(test)]
pub mod fixture;
mod job;
mod job_table;
mod meters;
mod node_table;
mod pass_target;
mod usage;
pub use batch::Batch;
pub use job::{Exit, Job, JobEvent, KernelEnd, Owner, personal_account, row_view, scheduled_reason};
pub use meters::Meters;
pub use usage::Usage;

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
    /// Index of its ledger in [`State::ledgers`]: [`State::register_node`] sets it, whatever
    /// the caller put.
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

/// Everything the manager keeps in memory.
#[derive(Default)]
pub struct State {
    /// The jobs in memory (`job_table`): in by [`State::insert_job`], out by a move.
    jobs: BTreeMap<JobId, Job>,
    usage: Usage,
    /// One ledger per node; a slice because `schedule` takes `&[NodeLedger]`.
    ledgers: Vec<NodeLedger>,
    nodes: HashMap<String, Node>,
    /// Agent reports to apply again: the store refused their change (`deferred.rs`).
    deferred: Vec<crate::deferred::Deferred>,
    /// Open while the report loop applies a batch of agent reports (`batch.rs`).
    batch: Option<Batch>,
    /// The PENDING jobs as the scheduler sees them, kept across passes so that a pass reads
    /// only the jobs it tries (`berth_sched::schedule_set`); in step with `jobs` through
    /// [`State::sync_sets`].
    pending: PendingSet,
    /// The jobs holding resources as the scheduler sees them (their ends are backfill's
    /// timeline), kept across passes the same way.
    running: RunningSet,
    /// Passes so far; each pending job records the last one that placed it in the queue.
    pass_seq: u64,
    /// The last pass's untried runs that end in a rest of the set (the jobs behind where a
    /// walk stopped): where those jobs stand, worked out only when someone looks.
    untried: Vec<Untried>,
    /// [`State::untried_places`] of the last pass, once someone looked (reset by each pass:
    /// jobs submitted since have no place yet and show as queued, cancelled ones are not
    /// looked up).
    untried_places: std::cell::OnceCell<HashMap<JobId, (u32, usize)>>,
    /// What running jobs use now, from the agents' heartbeats.
    meters: Meters,
    /// PENDING jobs kept out of `pending` until their begin time and dependency allow them
    /// (`holds.rs`): the scheduler never sees them.
    held: std::collections::BTreeSet<JobId>,
    /// How the ended jobs (and array tasks) that held jobs depend on ended (read from the
    /// store once: an ended job no longer changes; `None`: no longer on record).
    ended_targets: HashMap<berth_model::JobRef, Option<berth_sched::depend::Target>>,
    /// How far each job array has got (`arrays.rs`), once a pass looked at it.
    arrays: HashMap<JobId, crate::array_progress::ArrayProgress>,
    /// Run times of the jobs that ended after running, by user, name and size
    /// (`predictions.rs`): each job's estimate as it enters the pending set.
    predictor: berth_sched::Predictor,
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
        if job.state == berth_model::JobState::Pending
            && (job.spec.has_start_conditions() || job.waiting.hold.is_some())
        {
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
        // An array no pass has looked at yet (just submitted, held, or after a restart) is
        // reckoned from its tasks in memory: `squeue` showed a held array as nothing at all.
        if let Some(a) = &job.spec.array
            && !job.state.is_terminal()
        {
            match self.arrays.get(&job.id) {
                Some(p) if !p.all_made(a) => v.array = Some(a.remaining(|i| p.made.contains(&i))),
                Some(_) => {}
                None => {
                    let made: Vec<u32> =
                        self.tasks_of(job.id).filter_map(|t| t.spec.array_task.map(|t| t.index)).collect();
                    if (made.len() as u64) < a.count() {
                        v.array = Some(a.remaining(|i| made.contains(&i)));
                    }
                }
            }
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

    /// The PENDING jobs the scheduler sees (held ones are not among them).
    pub fn pending(&self) -> &PendingSet {
        &self.pending
    }

    /// The jobs holding resources as the scheduler sees them.
    pub fn running(&self) -> &RunningSet {
        &self.running
    }

    /// Which caches hold pending job `id`'s datasets (cache-aware placement); false when
    /// it is not pending or nothing changed.
    pub fn set_data_on(&mut self, id: JobId, data_on: Vec<(String, u64)>) -> bool {
        if !self.pending.set_data_on(id, data_on.clone()) {
            return false;
        }
        if let Some(j) = self.jobs.get_mut(&id) {
            j.waiting.data_on = data_on;
        }
        true
    }

    /// The jobs held back by a begin time, a dependency or a hold (`holds.rs`).
    pub fn held(&self) -> Vec<JobId> {
        self.held.iter().copied().collect()
    }

    pub fn is_held(&self, id: JobId) -> bool {
        self.held.contains(&id)
    }

    /// Pending job `id` was held (`Waiting::hold`): it leaves the pending set until a pass
    /// finds it free again (`holds.rs`).
    pub fn hold_back(&mut self, id: JobId) {
        if self.jobs.get(&id).is_some_and(|j| j.state == berth_model::JobState::Pending) {
            self.held.insert(id);
            self.sync_sets(id);
        }
    }

    /// Job `id`'s begin time came or its dependency is met: it joins the pending set.
    pub fn lift_hold(&mut self, id: JobId) {
        if self.held.remove(&id) {
            self.sync_sets(id);
        }
    }

    /// How the ended job or task `r` that held jobs depend on ended: `None` if not known
    /// yet, `Some(None)` if it is no longer on record.
    pub fn ended_target(&self, r: &berth_model::JobRef) -> Option<Option<berth_sched::depend::Target>> {
        self.ended_targets.get(r).copied()
    }

    /// Remembers how `r` ended (read from the store once: an ended job no longer changes).
    pub fn learn_ended(&mut self, r: berth_model::JobRef, target: Option<berth_sched::depend::Target>) {
        self.ended_targets.insert(r, target);
    }

    /// No job is held: what the ended targets were is no longer needed.
    pub fn forget_ended_targets(&mut self) {
        self.ended_targets.clear();
    }

    /// Keeps an agent report the store refused, to apply again (`deferred.rs`).
    pub fn defer(&mut self, report: crate::deferred::Deferred) {
        self.deferred.push(report);
    }

    /// The deferred reports, to apply again now (those that fail again are deferred anew).
    pub fn take_deferred(&mut self) -> Vec<crate::deferred::Deferred> {
        std::mem::take(&mut self.deferred)
    }

    /// The open batch of agent reports, if any (`batch.rs`).
    pub fn batch_mut(&mut self) -> Option<&mut Batch> {
        self.batch.as_mut()
    }

    /// Closes the open batch for its commit; [`State::reopen_batch`] gives it back to undo.
    pub fn close_batch(&mut self) -> Option<Batch> {
        self.batch.take()
    }

    /// Gives back a batch the store refused, for [`State::undo_batch`].
    pub fn reopen_batch(&mut self, batch: Batch) {
        debug_assert!(self.batch.is_none(), "batches do not nest");
        self.batch = Some(batch);
    }

    /// Debug builds (the tests): the kept running set is what the jobs say now, apart from
    /// the start that a job with none was given when it joined.
    #[cfg(debug_assertions)]
    pub fn check_running(&self, now_ms: berth_sched::Millis) {
        let holding: Vec<berth_sched::RunningJob> = self
            .jobs
            .values()
            .filter(|j| j.state.holds_resources())
            .map(|j| j.running_job(self.running.get(j.id).map_or(now_ms, |r| r.started_at)))
            .collect();
        assert_eq!(holding.len(), self.running.len(), "running set out of step");
        for r in &holding {
            assert_eq!(Some(r), self.running.get(r.id), "running set out of step for job {}", r.id);
        }
    }

    /// What running jobs use now, from the agents' heartbeats.
    pub fn meters(&self) -> &Meters {
        &self.meters
    }

    /// The meters, for an agent's samples and kernels' ends.
    pub fn meters_mut(&mut self) -> &mut Meters {
        &mut self.meters
    }

    /// How far job array `id` has got, once a pass looked at it (`arrays.rs`).
    pub fn array(&self, id: JobId) -> Option<&crate::array_progress::ArrayProgress> {
        self.arrays.get(&id)
    }

    pub fn array_mut(&mut self, id: JobId) -> Option<&mut crate::array_progress::ArrayProgress> {
        self.arrays.get_mut(&id)
    }

    /// Keeps array `id`'s progress, read from its tasks' rows (a pass looked at it).
    pub fn track_array(&mut self, id: JobId, progress: crate::array_progress::ArrayProgress) {
        self.arrays.insert(id, progress);
    }

    /// Array `id` ended: its progress is no longer needed.
    pub fn forget_array(&mut self, id: JobId) {
        self.arrays.remove(&id);
    }
}
