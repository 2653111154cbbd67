//! berth's scheduler core: pure, synchronous and deterministic (docs/scheduling.md).
//!
//! The manager keeps one [`NodeLedger`] per node (which CPUs, how much memory per NUMA node and
//! which GPU fractions are free) and calls [`schedule`] with a snapshot of the pending jobs.
//! The pass returns the exact [`Binding`]s to start and, for every job left waiting, its
//! position and a precise [`PendingReason`]. No clock, no I/O, no async: the same input always
//! gives the same output, so the live manager and `berth sim` run the same code.
//!
//! CONTRACT (other crates build against these names; keep them stable):
//! - `NodeLedger::new(name, queue, topology)`, `.allocate(&Binding) -> Result<(), LedgerError>`,
//!   `.release(&Binding)`, `.set_schedulable(bool)`, `.name()`, `.queue()`, `.topology()`,
//!   `.cpus_used() -> u32`, `.mem_used() -> u64`, `.gpu_used_milli(gpu_index) -> u64`,
//!   `.try_bind(&ResourceRequest, NumaPolicy) -> Result<Binding, BindError>`.
//! - `schedule(&PassInput) -> PassOutput`.
//! - `check_feasible(&ResourceRequest, nodes_needed, &[NodeLedger], queue) -> Result<(), Infeasible>`.
//!
//! Also public: [`check_feasible_with`] (the same with the job's NUMA policy), [`LedgerError`],
//! the read-only `NodeLedger::{cpus_total, mem_total, gpus_used_milli, allocations}`, and
//! [`schedule_set`], the same pass over a [`PendingSet`] and a [`RunningSet`] the caller
//! keeps across passes (it reads only the jobs it tries, and backfill walks the kept running
//! jobs' ends; the manager and `berth sim` use it), and [`schedule_set_kinds`], that pass
//! without the reasons' messages, for a caller that reads none (`berth sim`).
//!
//! How the manager uses it:
//! - at start, build one ledger per known node and `allocate` the binding of every kernel that
//!   still holds resources (SCHEDULED..TERMINATING); an error there means the store disagrees
//!   with itself (two kernels on one CPU) and should be logged, not ignored;
//! - after a pass, store its starts and changed reasons, then apply it to memory with
//!   [`apply::apply`] (through [`apply::PassTarget`]: every binding of every start allocated
//!   on the real ledgers, each waiting job's `position`, `reason` and `blocked_passes`), and
//!   carry out the preemptions it returns;
//! - when a kernel ends, `release` its binding (releasing twice is harmless); when a node is
//!   lost or drained, `set_schedulable(false)`; when its agent re-registers, rebuild its
//!   ledger from the topology and re-allocate the kernels it still runs.

pub mod apply;
mod backfill;
mod bind;
pub mod depend;
mod fairness;
mod feasible;
mod gates;
mod kernels;
mod ledger;
mod mounts;
mod node_counts;
mod node_match;
mod order;
#[cfg(test)]
mod order_oracle;
mod orderings;
mod pass;
mod pending_set;
mod place;
mod pool;
pub mod predict;
mod preempt;
mod queue_set;
mod quota;
mod running_set;
mod service;
mod set_order;
mod shortfall;
mod slots;
mod usage;
mod water;
mod words;

pub mod sim;

#[cfg(test)]
mod test_support;

pub use bind::BindError;
pub use feasible::{Infeasible, NodeShapes, check_feasible, check_feasible_kernels, check_feasible_with};
pub use ledger::{LedgerError, NodeLedger};
pub use mounts::{MountError, MountRefusal, check_folders, check_mounts, mount_allowed};
pub use node_match::{NoNodeOffers, nodes_offering};
pub use order::{fair_share_factor, fair_share_factors};
pub use orderings::Ordering;
pub use pass::{schedule, schedule_set, schedule_set_kinds};
pub use pending_set::PendingSet;
pub use predict::{JobKey, PredictionError, Predictor};
pub use quota::{HeldJob, NO_QUOTAS, QuotaUse, Quotas, borrowed_by_start_order, never_fits};
pub use running_set::RunningSet;
pub use set_order::UntriedRest;
pub use usage::{Charged, Figure, Figures, UsageBook, UsageKind};

use berth_model::{Binding, JobId, NumaPolicy, PendingReason, ResourceRequest};

/// Time in the scheduler: milliseconds since an epoch the caller chooses (the Unix epoch in
/// the manager, the trace's start in `berth sim`). The scheduler never reads a clock.
pub type Millis = i64;

/// How a queue treats a job at its head that cannot start.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HeadOfLine {
    /// Nothing passes a blocked job: strict priority/FIFO order.
    Strict,
    /// A blocked job keeps its place for N passes, then steps aside so later jobs may start.
    /// A job past the wait bound ([`QueueConfig::reserve_after_ms`]) is reserved instead, as
    /// under backfill: stepping aside for good is what starves a wide job on a busy queue.
    SkipAfter(u32),
    /// Backfill: the first [`QueueConfig::reservations`] blocked jobs get a reservation (their
    /// earliest start, from the running jobs' estimates and limits; 1 is EASY); a later job may
    /// start only if it can delay none of them.
    Backfill,
}

/// How nodes are scored when several fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scoring {
    /// Fill the most-used node first (keeps whole nodes and whole GPUs free).
    #[default]
    Binpack,
    /// Use the least-used node first.
    Spread,
}

/// What happens to a preempted job (shared with the store and the API).
pub use berth_model::PreemptAction;

/// A queue's preemption policy (off when `QueueConfig::preemption` is `None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Preemption {
    pub action: PreemptAction,
    /// A job that has run less than this is never a victim.
    pub min_runtime_ms: Millis,
}

/// One queue's policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueConfig {
    pub name: String,
    pub ordering: Ordering,
    pub head_of_line: HeadOfLine,
    pub scoring: Scoring,
    /// Time limit assumed (for backfill reservations) for jobs that set none.
    pub default_time_limit_ms: Millis,
    pub preemption: Option<Preemption>,
    /// Projects whose jobs may use the queue; empty: every project. Checked at submit (the
    /// manager), not in the pass.
    pub projects: Vec<String>,
    /// The longest time limit a job may ask for (jobs without one get the default, capped by
    /// it); `None`: no maximum. Checked at submit.
    pub max_time_limit_ms: Option<Millis>,
    /// Nodes the queue takes by name, whatever queue their agent asked for (the manager
    /// assigns them when they register). Empty: none by name.
    pub node_names: Vec<String>,
    /// Nodes the queue takes by label: every label here must match. Empty: none by label.
    pub node_labels: std::collections::BTreeMap<String, String>,
    /// How many jobs a pass tries after the first one that cannot start (skip-after,
    /// backfill), like Slurm's `bf_max_job_test`: the jobs behind the window wait untried, so
    /// the cost of a pass does not grow with the depth of a blocked queue. At least 1.
    pub backfill_window: u32,
    /// Interactive sessions idle (no client, no app traffic) this long are ended. Applied by
    /// the manager, not in the pass.
    pub idle_timeout_ms: Option<Millis>,
    /// The longest an interactive session may run. Checked at submit.
    pub max_session_ms: Option<Millis>,
    /// How many blocked jobs get a backfill reservation in one pass (1: EASY; more: the
    /// first N blocked jobs each hold nodes, as in conservative backfill). At least 1.
    pub reservations: u32,
    /// The wait bound: a job pending this long goes ahead of every job that has not waited
    /// as long (oldest first, whatever the ordering and priority), and its reservation is
    /// firm: a job may start on its nodes only if its own time limit ends before the reserved
    /// start or it leaves room for the reserved job there (an estimate is not trusted). A job
    /// that waited this long to start is never stopped for less service (`las`, `qssf`).
    /// `None`: no bound.
    pub reserve_after_ms: Option<Millis>,
    /// `las` ordering: the attained service (device-seconds) at which a job moves down a
    /// level; ascending.
    pub las_thresholds: Vec<u64>,
}

/// [`QueueConfig::backfill_window`] unless configured (Slurm's `bf_max_job_test` default).
pub const DEFAULT_BACKFILL_WINDOW: u32 = berth_model::api::DEFAULT_BACKFILL_WINDOW;

/// [`QueueConfig::las_thresholds`] unless configured: three levels, split at 1 and 10
/// device-hours of service.
pub const DEFAULT_LAS_THRESHOLDS: [u64; 2] = [3_600, 36_000];

impl QueueConfig {
    /// A queue with the defaults: fifo, strict, binpack, 1 h default limit, no preemption.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            ordering: Ordering::Fifo,
            head_of_line: HeadOfLine::Strict,
            scoring: Scoring::Binpack,
            default_time_limit_ms: 3_600_000,
            preemption: None,
            projects: Vec::new(),
            max_time_limit_ms: None,
            node_names: Vec::new(),
            node_labels: std::collections::BTreeMap::new(),
            backfill_window: DEFAULT_BACKFILL_WINDOW,
            idle_timeout_ms: None,
            max_session_ms: None,
            reservations: 1,
            reserve_after_ms: None,
            las_thresholds: DEFAULT_LAS_THRESHOLDS.to_vec(),
        }
    }

    /// The policy berth recommends, and gives the default queue (docs/scheduling.md, which
    /// measures it against the others on real traces): backfill with the reservations and
    /// wait bound below, ordered by `ORDERING`.
    pub fn recommended(name: impl Into<String>) -> Self {
        Self {
            ordering: RECOMMENDED_ORDERING,
            head_of_line: HeadOfLine::Backfill,
            reservations: RECOMMENDED_RESERVATIONS,
            reserve_after_ms: Some(RECOMMENDED_RESERVE_AFTER_MS),
            ..Self::new(name)
        }
    }
}

/// [`QueueConfig::recommended`]'s ordering.
pub const RECOMMENDED_ORDERING: Ordering = Ordering::Qssf;
/// [`QueueConfig::recommended`]'s reservations per pass.
pub const RECOMMENDED_RESERVATIONS: u32 = 4;
/// [`QueueConfig::recommended`]'s wait bound.
pub const RECOMMENDED_RESERVE_AFTER_MS: Millis = 12 * 3_600_000;

/// A job waiting to be placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingJob {
    pub id: JobId,
    pub priority: i32,
    /// Shared by the jobs of a queue where the caller can (one `Arc` per queue name): the pass
    /// then groups a deep queue's jobs without reading each name.
    pub queue: std::sync::Arc<str>,
    pub request: ResourceRequest,
    pub nodes: u32,
    pub numa: NumaPolicy,
    /// Passes in which this job was blocked while it could hold others back (for `SkipAfter`).
    pub blocked_passes: u32,
    pub user: String,
    /// Project the job is accounted to (fair share); the user's name when it has none.
    pub project: String,
    pub submitted_at: Millis,
    pub time_limit_ms: Option<Millis>,
    /// The expected run time (`predict.rs`, never above the limit): what backfill plans
    /// with and `qssf` orders by. `None`: the limit (or the queue's default) is all there is.
    /// A job is never stopped at it, only at its limit.
    pub estimate_ms: Option<Millis>,
    /// Service received in earlier runs (preempted, requeued), in device-seconds ([`service`]):
    /// the `las` ordering's key. 0 for a job that never ran.
    pub attained: u64,
    /// The container image the job runs (`berth_model::job::image_key` form): only nodes
    /// that have it ([`NodeLedger::has_image`]) are considered.
    pub image: Option<String>,
    /// Kernels on each node (`--kernels`, several containers of one job on one node), each
    /// with the full `request` and its own binding; 1 for most jobs.
    pub kernels: u32,
    /// Host paths the job's containers mount: only nodes that allow all of them
    /// ([`NodeLedger::allows_mounts`]) are considered.
    pub mounts: Vec<String>,
    /// A process job (no image) with data folders (`--folder`): only nodes that can bind them
    /// ([`NodeLedger::mounts_folders`], a root agent) are considered.
    pub folders: bool,
    /// Nodes holding some of the job's data (bytes of its datasets in their caches): among the
    /// nodes that can take the job, those holding more are taken first, whatever the queue's
    /// scoring; the rest follow in score order. Empty for most jobs.
    pub data_on: Vec<(String, u64)>,
    /// Nodes to take only when no other node can (a serving endpoint's replicas spread over
    /// nodes: the nodes its other replicas run on). Empty for most jobs.
    pub avoid: Vec<String>,
    /// Node features the job's nodes must offer (`--constraint`): only nodes whose labels
    /// satisfy it ([`NodeLedger::offers`]) are considered.
    pub constraint: Option<berth_model::Constraint>,
    /// Whole nodes (`--exclusive`): each kernel is bound to all of a node on which nothing
    /// else runs (`node_match.rs`).
    pub exclusive: bool,
}

/// A job that holds resources (its bindings are allocated on the ledgers passed in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningJob {
    pub id: JobId,
    pub queue: String,
    pub priority: i32,
    pub user: String,
    pub project: String,
    pub bindings: Vec<Binding>,
    /// When it was submitted: past the queue's wait bound (`reserve_after`), a job is no
    /// longer stopped for a job that only needs less service (`las`, `qssf`).
    pub submitted_at: Millis,
    pub started_at: Millis,
    pub time_limit_ms: Option<Millis>,
    /// The expected run time ([`PendingJob::estimate_ms`]): backfill plans with
    /// `started_at + estimate`, the limit still being what stops the job.
    pub estimate_ms: Option<Millis>,
    /// Service received before this run, in device-seconds ([`service`]); the run adds
    /// `size × elapsed` (`las` preemption).
    pub attained: u64,
    /// Whether the job may be stopped for a higher-priority one.
    pub preemptible: bool,
    /// Started beyond its user's or project's quota (borrowing idle capacity): a job within
    /// its own quota, of another project, may stop it whatever the priorities.
    pub borrowed: bool,
}

/// Input of fair-share ordering: each user's decayed past usage (resource-milliseconds, any
/// consistent unit) and each project's weight; see [`decay_usage`].
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FairShare {
    pub usage_by_user: std::collections::BTreeMap<String, f64>,
    pub usage_by_project: std::collections::BTreeMap<String, f64>,
    /// Weight per project (missing: 1.0).
    pub project_weights: std::collections::BTreeMap<String, f64>,
}

/// Fair-share input with no history, for callers that do not use fair share.
pub static NO_FAIR_SHARE: FairShare = FairShare {
    usage_by_user: std::collections::BTreeMap::new(),
    usage_by_project: std::collections::BTreeMap::new(),
    project_weights: std::collections::BTreeMap::new(),
};

/// Input of one scheduling pass.
#[derive(Debug, Clone, Copy)]
pub struct PassInput<'a> {
    pub queues: &'a [QueueConfig],
    pub nodes: &'a [NodeLedger],
    pub pending: &'a [PendingJob],
    pub running: &'a [RunningJob],
    pub fair_share: &'a FairShare,
    /// Per-user and per-project limits with current use ([`NO_QUOTAS`] for none).
    pub quotas: &'a Quotas,
    pub now: Millis,
}

/// A job to start now, with one binding per kernel (index 0 is `main`); the kernels of one
/// node follow each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Start {
    pub job: JobId,
    pub bindings: Vec<Binding>,
}

/// A job that stays pending.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub job: JobId,
    /// 1-based position in its queue's order.
    pub position: u32,
    pub reason: PendingReason,
    /// New value of `PendingJob::blocked_passes`.
    pub blocked_passes: u32,
    /// When the job is expected to start (the backfill reservation), if known.
    pub expected_start: Option<Millis>,
}

/// Jobs of one queue that the pass did not try, in queue order: the `k`-th waits at position
/// `first_position + k` with `reason`. Their `blocked_passes` do not change and they have no
/// expected start. One entry stands for every job behind a blocked head (strict, skip-after),
/// beyond the backfill window, or in a queue with no ready node, so that such jobs cost the
/// pass an id each and no text ([`schedule`]), or nothing at all ([`schedule_set`]: `rest`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untried {
    pub first_position: u32,
    pub reason: PendingReason,
    pub jobs: Vec<JobId>,
    /// Only from [`schedule_set`]: the jobs after `jobs`, as a cursor over the caller's
    /// [`PendingSet`] ([`PendingSet::rest_ids`], [`PendingSet::untried_jobs`]).
    pub rest: Option<UntriedRest>,
}

/// A running job to stop so that `for_job` can start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preempt {
    pub victim: JobId,
    pub for_job: JobId,
    pub action: PreemptAction,
}

/// Output of one pass.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassOutput {
    pub starts: Vec<Start>,
    /// The starts (job ids) that borrow beyond a quota.
    pub borrowed: Vec<JobId>,
    /// Jobs the pass tried and that wait, each with its own reason.
    pub waiting: Vec<Waiting>,
    /// Jobs the pass did not try, by runs of positions (every pending job is in `starts`,
    /// `waiting` or here).
    pub untried: Vec<Untried>,
    pub preemptions: Vec<Preempt>,
}

impl PassOutput {
    /// Every job listed in [`PassOutput::untried`], with its position and reason (every
    /// untried job for [`schedule`]; [`PendingSet::untried_jobs`] also expands the rests of
    /// [`schedule_set`]).
    pub fn untried_jobs(&self) -> impl Iterator<Item = (JobId, u32, &PendingReason)> {
        self.untried
            .iter()
            .flat_map(|h| h.jobs.iter().enumerate().map(move |(k, &id)| (id, h.first_position + k as u32, &h.reason)))
    }
}

/// A job's size in thousandths of a device: GPUs when it has any, else CPUs, times its nodes
/// and kernels (the unit of [`PendingJob::attained`] and of `qssf`'s expected service).
pub fn size_milli(request: &ResourceRequest, nodes: u32, kernels: u32) -> u64 {
    let per = if request.gpu_milli > 0 { request.gpu_milli } else { request.cpu_milli };
    per * nodes.max(1) as u64 * kernels.max(1) as u64
}

/// Service in device-seconds of a job of `size_milli` ([`size_milli`]) that ran `ms`.
pub fn service(size_milli: u64, ms: Millis) -> u64 {
    (size_milli as u128 * ms.max(0) as u128 / 1_000_000).min(u64::MAX as u128) as u64
}

/// Decays a usage figure by `elapsed_ms` with the given half-life (Slurm's
/// `PriorityDecayHalfLife`): `usage × 2^(−elapsed/half_life)`.
pub fn decay_usage(usage: f64, elapsed_ms: Millis, half_life_ms: Millis) -> f64 {
    match decay_factor(elapsed_ms, half_life_ms) {
        Some(f) => usage * f,
        None => usage,
    }
}

/// The factor [`decay_usage`] multiplies by; `None` when nothing decays (no half-life, no
/// time elapsed). Computed once, it decays many figures exactly as `decay_usage` would.
pub(crate) fn decay_factor(elapsed_ms: Millis, half_life_ms: Millis) -> Option<f64> {
    (half_life_ms > 0 && elapsed_ms > 0).then(|| (-(elapsed_ms as f64) / half_life_ms as f64).exp2())
}
