//! Rows the store returns and the changes it applies. Adapter-independent.

use berth_model::api::NodeState;
use berth_model::api::QueuePolicy;
use berth_model::{
    Binding, EndCause, JobId, JobSpec, JobState, KernelUsage, PendingReason, StopCause, Topology, UnixId,
};
use jiff::Timestamp;

/// A user account.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRow {
    pub id: i64,
    pub name: String,
    /// `admin` or `user`.
    pub role: String,
    pub disabled: bool,
    pub created_at: Timestamp,
}

/// A job as stored, with its owner's name joined in.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    pub id: JobId,
    pub user_id: i64,
    pub user: String,
    pub spec: JobSpec,
    pub queue: String,
    pub priority: i32,
    pub state: JobState,
    /// 0 for the first run; a requeue (back to PENDING) adds one.
    pub attempt: u32,
    pub submitted_at: Timestamp,
    pub started_at: Option<Timestamp>,
    pub ended_at: Option<Timestamp>,
    pub exit_code: Option<i32>,
    /// The signal that ended its main kernel, when one did (set with `exit_code`).
    pub end_signal: Option<i32>,
    /// Who holds it back from the scheduler while pending (`Hold`), if anyone.
    pub hold: Option<berth_model::Hold>,
    /// Reason of the last transition.
    pub reason: Option<String>,
    pub pending_reason: Option<PendingReason>,
    /// Nodes of the latest attempt's kernels (empty before the first placement).
    pub nodes: Vec<String>,
    /// The Unix user who submitted the job, when the manager's host vouched for it.
    pub submitter: Option<UnixId>,
    /// Who asked the current attempt to stop (set with TERMINATING, or with CANCELLED for a
    /// job that never ran), kept after the end; a requeue clears it.
    pub stop: Option<StopCause>,
    /// How the job ended (with its final state).
    pub end_cause: Option<EndCause>,
    /// What its ended kernels used, every attempt together (`None`: nothing measured yet).
    pub used: Option<KernelUsage>,
}

/// A job, its kernels (every attempt) and its state changes, read together.
#[derive(Debug, Clone, PartialEq)]
pub struct JobHistory {
    pub job: JobRow,
    pub kernels: Vec<KernelRow>,
    pub transitions: Vec<berth_model::api::Transition>,
}

/// One kernel of one attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct KernelRow {
    pub job_id: JobId,
    pub attempt: u32,
    pub index: u32,
    pub node: String,
    pub binding: Binding,
    pub exit_code: Option<i32>,
    /// What it used in all, once it ended and where its node measured it.
    pub usage: Option<KernelUsage>,
}

/// A node as last registered.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub name: String,
    pub queue: String,
    pub topology: Topology,
    pub version: String,
    /// [`NodeState::Ready`] or [`NodeState::Lost`]: whether its agent is heard from. A drain
    /// is kept apart, in `drain_reason` (draining and drained follow from it and the jobs).
    pub state: NodeState,
    pub last_heartbeat: Option<Timestamp>,
    /// Where other nodes reach this one.
    pub address: Option<String>,
    /// Set while an admin has the node drained. [`crate::Store::upsert_node`] leaves it alone:
    /// only [`crate::Store::set_node_drain`] changes it.
    pub drain_reason: Option<String>,
}

/// Which jobs [`crate::Store::jobs`] returns.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobFilter {
    /// Only this user's jobs, plus the shared jobs of `projects`.
    pub user_id: Option<i64>,
    /// With `user_id`: also jobs shared with these projects.
    pub projects: Vec<String>,
    /// Only jobs in one of these states; `None` means any state.
    pub states: Option<Vec<JobState>>,
    /// At most this many (the newest).
    pub limit: Option<u32>,
    /// Only jobs of the user with this name.
    pub owner: Option<String>,
    /// Only jobs of this queue.
    pub queue: Option<String>,
    /// Only jobs whose name contains this (as given, case and all).
    pub name_contains: Option<String>,
    /// Only jobs with an id below this (paging from newest to oldest).
    pub before: Option<JobId>,
    /// Only these jobs (`Some(empty)`: none).
    pub ids: Option<Vec<JobId>>,
    /// Only jobs not ended before this time (unfinished ones, or ended at or after it).
    pub since: Option<Timestamp>,
    /// Only jobs submitted before this time.
    pub until: Option<Timestamp>,
    /// Only the tasks of this job array.
    pub array_id: Option<JobId>,
    /// Only the task with this index (of any array; with `array_id`: one task).
    pub array_index: Option<u32>,
}

/// A job to insert with [`crate::Store::insert_jobs`]: what [`crate::Store::insert_job`] takes.
#[derive(Debug, Clone, Copy)]
pub struct NewJob<'a> {
    pub user_id: i64,
    pub spec: &'a JobSpec,
    /// The Unix user the manager's host vouched for, if any.
    pub submitter: Option<UnixId>,
    pub at: Timestamp,
}

/// One change of an [`crate::Store::apply`] batch.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Compare-and-set of a job's state, recorded in its history. Fails the whole batch with
    /// `Conflict` when the job is not in `from`. Side effects on the job row: `reason` becomes
    /// the transition's; RUNNING sets `started_at` once; a terminal state sets `ended_at` and
    /// `exit_code` (when given); PENDING from another state is a requeue: `attempt + 1`, and
    /// `started_at` cleared, and the stop cause cleared; leaving PENDING clears the pending
    /// reason; `end` is stored with a final state.
    Transition {
        job_id: JobId,
        from: JobState,
        to: JobState,
        at: Timestamp,
        reason: String,
        exit_code: Option<i32>,
        /// Stored with a final state, like `exit_code`.
        end_signal: Option<i32>,
        end: Option<EndCause>,
    },
    /// Who asked the job to stop (with its move to TERMINATING or CANCELLED).
    Stop { job_id: JobId, cause: StopCause },
    /// The bindings of an attempt's kernels (index = position), replacing earlier ones.
    SetKernels { job_id: JobId, attempt: u32, bindings: Vec<Binding> },
    /// A kernel's exit code and what it used (added to its job's totals).
    KernelExit { job_id: JobId, attempt: u32, index: u32, exit_code: Option<i32>, usage: Option<KernelUsage> },
    /// Holds a pending job (`Some`) or releases it (`None`); fails with `Conflict` when it is
    /// not PENDING.
    Hold { job_id: JobId, hold: Option<berth_model::Hold> },
    /// Why a pending job waits (`None` clears it).
    PendingReason { job_id: JobId, reason: Option<PendingReason> },
    /// Sets a usage figure (insert or replace), see [`UsageRow`].
    Usage(UsageRow),
}

/// A queue's stored policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueRow {
    pub name: String,
    pub policy: QueuePolicy,
    /// The config file entry (JSON) the row was last seeded from; `None` for a queue created
    /// through the API. Changing a queue through the API keeps it.
    pub seed: Option<String>,
    pub updated_at: Timestamp,
}

/// A fair-share usage figure: `value` (billing-seconds) decayed to `at`.
#[derive(Debug, Clone, PartialEq)]
pub struct UsageRow {
    /// `user`, `project`, or `clock` (bookkeeping rows).
    pub kind: String,
    pub name: String,
    pub value: f64,
    pub at: Timestamp,
}
