//! Bodies of the REST API under `/v1` (what the CLI sends and reads).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

use crate::{Binding, JobId, JobSpec, JobState, PendingReason, Topology};

pub use crate::cache_api::*;
pub use crate::error_api::*;
pub use crate::hold_api::*;
pub use crate::tenancy_api::*;

/// `POST /v1/jobs`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SubmitRequest {
    pub spec: JobSpec,
}

/// A job as `berth ps` shows it. A listing may carry only some of its fields
/// (`GET /v1/jobs?fields=id,state`): the others then read as their defaults.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(default)]
pub struct JobView {
    pub id: JobId,
    pub name: Option<String>,
    pub user: String,
    pub state: JobState,
    pub queue: String,
    pub priority: i32,
    /// 1-based position among the queue's pending jobs, in the order the scheduler considers them.
    pub position: Option<u32>,
    /// Why a pending job waits.
    pub pending_reason: Option<PendingReason>,
    /// Nodes the job runs or ran on.
    pub nodes: Vec<String>,
    pub cpu_milli: u64,
    pub mem_bytes: u64,
    pub gpu_milli: u64,
    pub submitted_at: jiff::Timestamp,
    pub started_at: Option<jiff::Timestamp>,
    pub ended_at: Option<jiff::Timestamp>,
    /// Exit code of the main kernel once it ended.
    pub exit_code: Option<i32>,
    /// The signal that ended its main kernel, when one did (then `exit_code` is 128 plus it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_signal: Option<i32>,
    /// Reason of the last transition (`out of memory`, `cancelled by alice`, ...).
    pub reason: Option<String>,
    /// When a pending job is expected to start (its backfill reservation), if known.
    #[serde(default)]
    pub expected_start: Option<jiff::Timestamp>,
    /// Who asked the job to stop (a cancel, a preemption), from TERMINATING on.
    #[serde(default)]
    pub stop: Option<crate::StopCause>,
    /// How the job ended, once it did.
    #[serde(default)]
    pub end_cause: Option<crate::EndCause>,
    /// What it used, as its nodes measured it: so far (with its CPU rate now) while it runs,
    /// in all once it ended; none where nothing was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::JobUsage>,
    /// For a running job, when it will be stopped at the latest and why: its time limit, or
    /// for an interactive session with no client attached, its queue's idle timeout.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<Deadline>,
    /// While PREPARING: which setup step runs, how far it is and since when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub setup: Option<crate::SetupProgress>,
    /// Nodes the job asked for (`nodes` lists those it got, once placed).
    #[serde(default = "one_node")]
    pub nodes_requested: u32,
    /// Its time limit in seconds, as asked for (none: the queue's default applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_secs: Option<u64>,
    /// The project it is accounted to (Slurm's account); none: its user's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Where it runs on its nodes, when it names a directory (none: a fresh one per kernel).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workdir: Option<String>,
    /// A task of a job array: which array, which index (`12_7`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array_task: Option<crate::array::ArrayTask>,
    /// A job array: its indices still to make while unfinished (`[3-100%10]`), all of them
    /// (`0-99%10`) once ended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub array: Option<String>,
    /// How long an unfinished job is expected to run, in seconds, predicted from its user's
    /// earlier runs (same name and size first); none without such history. Backfill plans
    /// with it; the job is stopped only at its time limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_run_secs: Option<u64>,
}

fn one_node() -> u32 {
    1
}

/// When a running job will be stopped, and by which rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Deadline {
    pub at: jiff::Timestamp,
    pub kind: DeadlineKind,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeadlineKind {
    /// Its time limit (for a session, at most its queue's `max_session`).
    TimeLimit,
    /// Its queue's idle timeout, counted from the last client or app traffic.
    Idle,
}

/// One state change, stored before it is acted on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Transition {
    pub at: jiff::Timestamp,
    pub from: Option<JobState>,
    pub to: JobState,
    pub reason: String,
}

/// One kernel of a job: where it runs and what it got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct KernelView {
    pub index: u32,
    /// `main` for index 0, `sub1`, `sub2`, ... for the others.
    pub role: String,
    pub binding: Binding,
    pub exit_code: Option<i32>,
    /// What it used in all, once it ended (where its node measured it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::KernelUsage>,
}

/// What the value of each `--env` variable of another user's job reads as (`JobDetail::spec`):
/// the owner's secrets stay theirs, the names show what the job was given.
pub const HIDDEN_ENV_VALUE: &str = "<hidden>";

/// `GET /v1/jobs/{id}`: everything `berth show` prints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobDetail {
    pub job: JobView,
    /// The spec as submitted. For others than the job's owner and admins (project members of
    /// a shared job), `submit_env` is empty and every `env` value is [`HIDDEN_ENV_VALUE`].
    pub spec: JobSpec,
    pub kernels: Vec<KernelView>,
    pub transitions: Vec<Transition>,
    /// The Unix user who submitted the job on the manager's host, when its kernel vouched
    /// for it (a submit over the manager's unix socket).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub submitter: Option<crate::UnixId>,
}

/// `GET /v1/jobs` query.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams, ToSchema)]
pub struct JobListQuery {
    /// Only jobs in this state (e.g. `PENDING`), or in any of several separated by commas
    /// (`PENDING,RUNNING`).
    pub state: Option<String>,
    /// Include finished jobs (default: only jobs not yet finished).
    #[serde(default)]
    pub all: bool,
    /// Most recent N jobs at most.
    #[param(maximum = 2147483647)]
    pub limit: Option<u32>,
    /// Only this user's jobs (by name).
    pub user: Option<String>,
    /// Only jobs of this queue.
    pub queue: Option<String>,
    /// Only jobs whose name contains this.
    pub name: Option<String>,
    /// Only jobs with a smaller id: the next page after the last id shown.
    #[param(minimum = 1, maximum = 9223372036854775807_i64)]
    pub before: Option<i64>,
    /// Only jobs that had not ended before this time (still running, pending, or ended at
    /// or after it): RFC 3339 (`2026-11-20T10:00:00Z`) or Unix seconds. With `until`, the
    /// jobs that overlap a time window, as `sacct -S/-E` selects them.
    pub since: Option<String>,
    /// Only jobs submitted before this time: RFC 3339 or Unix seconds.
    pub until: Option<String>,
    /// Only these jobs: ids separated by commas (`3,7,12`), at most 1000.
    pub ids: Option<String>,
    /// Only the tasks of this job array (made so far).
    #[param(minimum = 1, maximum = 9223372036854775807_i64)]
    pub array: Option<i64>,
    /// Only these fields of each job, separated by commas (`id,state`): a lean listing for
    /// clients that print a few columns of many jobs. `id` always comes; the fields left out
    /// are absent from the answer.
    pub fields: Option<String>,
}

/// The names of [`JobView`]'s fields as they appear in JSON, from its OpenAPI schema (which
/// follows serde's renames), in alphabetical order.
fn job_view_field_names() -> &'static [String] {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| match <JobView as utoipa::PartialSchema>::schema() {
        utoipa::openapi::RefOr::T(utoipa::openapi::Schema::Object(o)) => o.properties.keys().cloned().collect(),
        _ => unreachable!("JobView derives an object schema"),
    })
}

/// The fields of a job listing's `fields=`: each one of [`JobView`]'s, checked, with `id`
/// first and none twice.
pub fn job_view_fields(list: &str) -> Result<Vec<&'static str>, String> {
    let known = job_view_field_names();
    let mut chosen = vec!["id"];
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(f) = known.iter().find(|k| *k == name) else {
            let all: Vec<&str> = known.iter().map(String::as_str).collect();
            return Err(format!("unknown job field `{name}` in `fields`: use some of {}", all.join(", ")));
        };
        if !chosen.contains(&f.as_str()) {
            chosen.push(f.as_str());
        }
    }
    Ok(chosen)
}

/// `view` with only `fields` (names [`job_view_fields`] checked), for serializing: a JSON
/// object with those of the fields the whole view would carry, in the order asked.
pub fn job_view_partial<'a>(view: &'a JobView, fields: &'a [&'static str]) -> JobViewPartial<'a> {
    JobViewPartial { view, fields }
}

/// What [`job_view_partial`] gives.
pub struct JobViewPartial<'a> {
    view: &'a JobView,
    fields: &'a [&'static str],
}

impl Serialize for JobViewPartial<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{Error, SerializeMap};
        let serde_json::Value::Object(mut whole) = serde_json::to_value(self.view).map_err(S::Error::custom)? else {
            return Err(S::Error::custom("a job view serializes to a JSON object"));
        };
        let mut map = serializer.serialize_map(None)?;
        for f in self.fields {
            if let Some(v) = whole.remove(*f) {
                map.serialize_entry(f, &v)?;
            }
        }
        map.end()
    }
}

/// The most ids `GET /v1/jobs?ids=` takes at once.
pub const MAX_LISTED_IDS: usize = 1000;

/// `GET /v1/jobs/{id}/logs` query. The answer is the raw bytes from `offset`; the header
/// `berth-next-offset` gives the offset to ask for next and `berth-job-done: true` says that
/// the job has ended, so nothing more will come once the bytes run out.
#[derive(Debug, Clone, Default, Serialize, Deserialize, IntoParams, ToSchema)]
pub struct LogQuery {
    #[serde(default)]
    pub stream: crate::protocol::LogStream,
    #[serde(default)]
    #[param(maximum = 2147483647)]
    pub kernel: u32,
    #[serde(default)]
    #[param(maximum = 9223372036854775807_i64)]
    pub offset: u64,
}

/// A GPU's capacity and use on a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct GpuView {
    pub index: u32,
    pub uuid: String,
    pub model: String,
    pub total_milli: u64,
    /// Thousandths allocated to jobs.
    pub used_milli: u64,
    /// How busy it is now (0 to 1) and its memory in use, whoever uses it (NVML on the node,
    /// at its last heartbeat; none without NVML).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub utilization: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_used_bytes: Option<u64>,
}

/// A node's state as admins see it (like Slurm's `idle/mix/drain/down`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum NodeState {
    /// Connected (or within the heartbeat timeout) and taking jobs.
    Ready,
    /// Drained by an admin: running jobs go on, no new ones start.
    Draining,
    /// Drained and no job left on it: safe to take down.
    Drained,
    /// No heartbeat within the timeout (or not back after a manager restart): its jobs were
    /// requeued or marked LOST.
    Lost,
}

impl NodeState {
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Ready => "ready",
            NodeState::Draining => "draining",
            NodeState::Drained => "drained",
            NodeState::Lost => "lost",
        }
    }

    pub fn parse(s: &str) -> Option<NodeState> {
        [NodeState::Ready, NodeState::Draining, NodeState::Drained, NodeState::Lost]
            .into_iter()
            .find(|n| n.as_str() == s)
    }
}

impl std::fmt::Display for NodeState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `POST /v1/admin/store/purge` (`berth admin store purge`): archive the finished jobs that
/// ended longer ago than `older_than` (retention, as the manager's `--retain` does hourly).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PurgeRequest {
    /// A duration: `180d`, `12h`, `90s`, ... (more than zero).
    pub older_than: String,
}

/// What a purge archived.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PurgeResult {
    /// Jobs moved from the hot tables into the archive.
    pub archived: u64,
    /// The cut: jobs that ended before it were archived.
    pub before: jiff::Timestamp,
    /// Jobs the archive holds now, these included.
    pub archive_total: u64,
}

/// `POST /v1/nodes/{name}/drain`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DrainRequest {
    /// Shown in `berth nodes` (e.g. `disk replacement`).
    #[serde(default)]
    pub reason: Option<String>,
}

/// `GET /v1/nodes/timeline`: how far back.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
pub struct NodeTimelineQuery {
    /// e.g. `12h` (default `1d`).
    #[serde(default)]
    pub since: Option<String>,
}

/// One job's run on one node, for a per-node timeline. The job, its name and its user are
/// given only when the caller may see the job; otherwise the node was busy with someone else's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct NodeSegment {
    pub node: String,
    pub job: Option<JobId>,
    pub name: Option<String>,
    pub user: Option<String>,
    pub state: JobState,
    pub start: jiff::Timestamp,
    /// `None`: still running.
    pub end: Option<jiff::Timestamp>,
}

/// A node as `berth nodes` shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NodeView {
    pub name: String,
    pub state: NodeState,
    /// Why an admin drained the node (while `draining` or `drained`).
    #[serde(default)]
    pub drain_reason: Option<String>,
    /// Where other nodes reach this one (`MASTER_ADDR` of multi-node jobs).
    #[serde(default)]
    pub address: Option<String>,
    /// Whether the agent's connection is up right now (a node whose connection dropped stays
    /// `ready` until the heartbeat timeout, but takes no new jobs).
    #[serde(default)]
    pub connected: bool,
    pub queue: String,
    /// The agent's labels (`berth agent --label k=v`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// The agent's berth version.
    pub version: String,
    pub last_heartbeat: Option<jiff::Timestamp>,
    pub cpus_total: u32,
    pub cpus_used: u32,
    pub mem_total: u64,
    pub mem_used: u64,
    /// What its running jobs use now, as measured (`cpus_used`/`mem_used` are what they were
    /// given): CPUs busy (1.5 = one and a half) and memory in use; none before a sample.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpus_busy: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_in_use: Option<u64>,
    pub gpus: Vec<GpuView>,
    pub running_jobs: u32,
    pub topology: Topology,
    /// The node's Docker: up or not, and its images.
    #[serde(default)]
    pub containers: crate::protocol::ContainerInfo,
}

/// `GET /v1/images`: which node has which container image.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, ToSchema)]
pub struct ImagesView {
    /// Every image some node has, sorted, with the nodes that have it.
    pub images: Vec<ImageView>,
    /// Nodes that pull missing images (`berth agent --pull`): they take jobs of any image.
    #[serde(default)]
    pub pulling_nodes: Vec<String>,
    /// Nodes whose Docker is not usable, with why.
    #[serde(default)]
    pub docker_down: Vec<DockerDown>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ImageView {
    pub image: String,
    pub nodes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DockerDown {
    pub node: String,
    pub error: String,
}

/// `GET /v1/whoami`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WhoAmI {
    pub user: String,
    pub role: String,
    /// Projects the user belongs to.
    #[serde(default)]
    pub projects: Vec<String>,
    /// The berth user's id (a node without an account of the user's name runs their jobs as
    /// uid 200000 + id by default); absent from older managers.
    #[serde(default)]
    pub id: Option<i64>,
}

/// `POST /v1/jobs/{id}/cancel` answer, and `berth cancel` output per job.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CancelResult {
    pub id: JobId,
    pub state: JobState,
}

/// `POST /v1/jobs/{id}/requeue` answer: the job, stopping (TERMINATING) before it is PENDING
/// again as a new attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RequeueResult {
    pub id: JobId,
    pub state: JobState,
}

/// `POST /v1/jobs/{id}/tasks/cancel` body: tasks of job array `id`, in `--array`'s syntax
/// (`7`, `1-5,9`), made or not (Slurm's `scancel 12_7`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CancelTasks {
    pub tasks: String,
}

/// One task of a [`CancelTasks`] answer: its job (made for the cancel if it had none yet)
/// and the state it is in now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TaskCancelled {
    pub index: u32,
    pub id: JobId,
    pub state: JobState,
}

/// `POST /v1/jobs/{id}/signal` body: send a signal to a running job now (`scancel --signal`).
/// An array's id reaches its running tasks (those of `tasks` alone, when given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalRequest {
    /// A name (`USR1`, `SIGUSR1`) or a number from 1 to 64.
    pub signal: String,
    /// Which processes get it: `steps` (the default, as Slurm's), `batch`, `all`.
    #[serde(default)]
    pub target: crate::signal::SignalTarget,
    /// Only these tasks of a job array, in `--array`'s syntax (`7`, `1-5,9`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tasks: Option<String>,
}

/// `POST /v1/jobs/{id}/signal` answer: what the signal was sent to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SignalResult {
    pub id: JobId,
    /// Its name without `SIG` (`USR1`), or its number.
    pub signal: String,
    pub target: crate::signal::SignalTarget,
    /// Each kernel it went to.
    pub kernels: Vec<SignalledKernel>,
}

/// One kernel a signal went to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SignalledKernel {
    /// The job the kernel belongs to (an array task's own id).
    pub job: JobId,
    /// The array task's index, for a task.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub task: Option<u32>,
    pub kernel: u32,
    pub node: String,
    /// What it got there (a holding kernel has no batch shell: `steps`).
    pub target: crate::signal::SignalTarget,
}

/// `POST /v1/admin/join-tokens` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct JoinTokenCreated {
    pub token: String,
}

/// `GET /v1/health`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`, or `degraded` when something works only partly (see `problems`).
    pub status: String,
    pub version: String,
    /// What does not work now and how to fix it; empty when `status` is `ok`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
}

/// The header a standby manager names the leader's URL in, beside its redirect.
pub const LEADER_HEADER: &str = "berth-leader";

/// `GET /v1/leader` (no token needed, on the leader and on standbys alike): which manager of
/// a highly available control plane leads, so that clients and agents can follow it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LeaderView {
    /// `leader` or `standby`: what the manager that answers is.
    pub role: String,
    /// The answering manager's own URL (`--advertise-url`).
    pub url: String,
    /// The leader's URL; absent while nobody leads (a takeover under way).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leader: Option<String>,
    /// The leader's epoch: it grows at every takeover (0: nobody has led yet).
    pub epoch: u64,
}

/// `POST /v1/ui/login-links`: a one-time link that logs the caller in to the dashboard.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct LoginLink {
    /// Path and query to open on the manager's URL (`/ui/login?code=...`); works once.
    pub path: String,
    /// The whole link on the manager's own URL (`--advertise-url`, else the address its HTTP
    /// listener has): for clients that reach it over its unix socket, which has no URL a
    /// browser could open.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The link stops working after this many seconds.
    pub expires_in_secs: u64,
}

/// `GET /v1/jobs/{id}/apps`: an app the job serves through the app proxy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AppView {
    pub name: String,
    pub kind: crate::app::AppKind,
    /// Its port in the main kernel, when the job chose it (presets get one at start).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// Where it is served: the app proxy's URL and the app's path. Open it with a login link
    /// (`POST /v1/jobs/{id}/apps/{app}/link`, `berth open`).
    pub url: String,
    /// Whether the app gets that path whole (`keep`) or without its `/apps/<job>/<name>`
    /// prefix (`strip`).
    #[serde(default)]
    pub path: crate::app::AppPath,
}

/// `POST /v1/jobs/{id}/apps/{app}/link`: a one-time link that opens the app in a browser.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AppLink {
    /// The full URL; works once, and sets a cookie for this app only.
    pub url: String,
    /// The link stops working after this many seconds.
    pub expires_in_secs: u64,
}

/// `POST /v1/admin/users` (admin only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreateUserRequest {
    pub name: String,
    /// `admin` or `user` (default).
    #[serde(default)]
    pub role: Option<String>,
}

/// Answer to `POST /v1/admin/users`: the new user's first API token, shown once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UserCreated {
    pub user: String,
    pub role: String,
    pub token: String,
}

/// A queue's scheduling policy, with the same keys as a `[[queue]]` entry of the manager's
/// config file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueuePolicy {
    /// `fifo`, `lifo`, `drf`, `fair-share`, `las` or `qssf` (within a priority band).
    pub ordering: String,
    /// `strict`, `skip-after-N` or `backfill`.
    pub head_of_line: String,
    /// How many jobs a pass tries after the first one that cannot start (skip-after and
    /// backfill; Slurm's `bf_max_job_test`); jobs further back wait untried. At least 1.
    #[serde(default = "default_backfill_window")]
    pub backfill_window: u32,
    /// `binpack` or `spread`.
    pub scoring: String,
    /// Time limit assumed for jobs that set none (backfill reservations), in seconds.
    pub default_time_limit_secs: u64,
    /// `off`, `requeue` or `cancel`: what happens to a preemptible job stopped for a
    /// higher-priority one.
    pub preemption: String,
    /// A job that has run less than this (seconds) is never preempted.
    pub preempt_min_runtime_secs: u64,
    /// Projects whose jobs may use the queue; empty: everyone.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub projects: Vec<String>,
    /// The longest time limit a job may ask for, in seconds; jobs without one get
    /// `default_time_limit_secs` as their limit. `None`: no maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_time_limit_secs: Option<u64>,
    /// Nodes the queue takes by name (whatever queue their agent asked for).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<String>,
    /// Nodes the queue takes by label (all must match), e.g. `{"gpu": "a100"}`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_labels: BTreeMap<String, String>,
    /// An interactive session (a job serving apps) with no client attached and no app
    /// traffic for this long (seconds) is ended (`idle`). `None`: never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_secs: Option<u64>,
    /// The longest an interactive session may run (seconds): its time limit when it asks for
    /// none, and the most it may ask for. `None`: as other jobs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_session_secs: Option<u64>,
    /// How many blocked jobs hold a backfill reservation in one pass (1: EASY backfill; more:
    /// each of the first N blocked jobs holds its nodes). At least 1; 1 for queues stored
    /// before it existed.
    #[serde(default = "one_reservation")]
    pub reservations: u32,
    /// The wait bound, in seconds: a job pending this long goes ahead of the jobs that have
    /// not waited as long, and its reservation is firm. `None`: no bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve_after_secs: Option<u64>,
    /// The `las` ordering's levels: the service (device-seconds: one GPU, or one CPU for a
    /// job without GPUs, for one second) at which a job moves down a level, ascending. Empty:
    /// berth's default levels.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub las_thresholds_secs: Vec<u64>,
}

/// [`QueuePolicy::backfill_window`] when not set (also for queues stored before it existed).
pub const DEFAULT_BACKFILL_WINDOW: u32 = 500;

fn default_backfill_window() -> u32 {
    DEFAULT_BACKFILL_WINDOW
}

fn one_reservation() -> u32 {
    1
}

/// A queue as `GET /v1/queues` and `berth queues` show it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueueView {
    pub name: String,
    pub policy: QueuePolicy,
    /// Nodes that serve the queue (connected or not).
    pub nodes: u32,
    pub pending: u32,
    /// Jobs holding resources (scheduled, running or stopping).
    pub running: u32,
}

/// `PUT /v1/queues/{name}` (admin only): creates the queue or changes the keys given; keys
/// left out keep their value (a new queue starts from berth's recommended policy, like the
/// default queue: qssf, backfill with several reservations and a wait bound, binpack, 1h,
/// preemption off, 10m; `GET /v1/queues` shows the exact values).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QueueUpdate {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ordering: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head_of_line: Option<String>,
    /// At least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backfill_window: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scoring: Option<String>,
    /// A duration: `90s`, `30m`, `2h`, `1d`, `HH:MM:SS` or seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_time_limit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<String>,
    /// A duration, like `default_time_limit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preempt_min_runtime: Option<String>,
    /// Projects allowed to use the queue (replaces the list; empty: everyone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub projects: Option<Vec<String>>,
    /// A duration, or `none` for no maximum.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_time_limit: Option<String>,
    /// Node names the queue takes (replaces the list; empty: none by name).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<Vec<String>>,
    /// Labels selecting the queue's nodes (replaces them; empty: none by label).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_labels: Option<BTreeMap<String, String>>,
    /// A duration, or `none`: how long an interactive session may stay idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<String>,
    /// A duration, or `none`: the longest an interactive session may run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_session: Option<String>,
    /// Backfill reservations per pass, at least 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reservations: Option<u32>,
    /// A duration, or `off`: the wait bound after which a job goes first with a firm
    /// reservation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve_after: Option<String>,
    /// Durations of device time (`1h`: one GPU for an hour), ascending: the `las` levels.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub las_thresholds: Option<Vec<String>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lean_listing_carries_the_fields_asked_for_and_reads_back_with_defaults() {
        let fields = job_view_fields("state, name,state,,").unwrap();
        assert_eq!(fields, ["id", "state", "name"], "id first, each once, blanks ignored");
        let err = job_view_fields("state,bogus").unwrap_err();
        assert!(err.starts_with("unknown job field `bogus` in `fields`: use some of "), "{err}");
        assert!(err.contains(", id, ") && err.contains(", state, "), "{err}");

        let full = JobView {
            id: 7,
            name: Some("train".into()),
            user: "alice".into(),
            state: JobState::Running,
            queue: "gpu".into(),
            nodes: vec!["n1".into()],
            nodes_requested: 2,
            ..Default::default()
        };
        let json = serde_json::to_value(job_view_partial(&full, &fields)).unwrap();
        assert_eq!(json, serde_json::json!({"id": 7, "name": "train", "state": "RUNNING"}));
        let back: JobView = serde_json::from_value(json).unwrap();
        assert_eq!((back.id, back.state, back.name.as_deref()), (7, JobState::Running, Some("train")));
        assert_eq!((back.user.as_str(), back.nodes.len(), back.nodes_requested), ("", 0, 1), "the rest: defaults");
        // Every field a view serializes is one `fields=` knows (the names come from the schema).
        let serde_json::Value::Object(keys) = serde_json::to_value(&full).unwrap() else { unreachable!() };
        for k in keys.keys() {
            assert!(job_view_fields(k).is_ok(), "`{k}` is serialized but not known to fields=");
        }
        // A whole view still reads back as itself.
        let whole: JobView = serde_json::from_value(serde_json::to_value(&full).unwrap()).unwrap();
        assert_eq!(whole, full);
    }
}
