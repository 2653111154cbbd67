//! An unfinished job as the manager keeps it: who owns it, what it asked for, its state, its
//! current attempt and, while pending, what the scheduler said about it. Made by two
//! constructors (a submit, a row read back after a restart); an attempt starts over only
//! through [`Attempt::next`], so a requeue cannot forget a field.

use std::sync::Arc;

use berth_model::api::JobView;
use berth_model::protocol::{KernelKey, KernelOutcome};
use berth_model::{
    Binding, JobId, JobSpec, JobState, JobUsage, PendingKind, PendingReason, StopCause, UnixId, format_bytes,
};
use berth_sched::Millis;
use berth_store::JobRow;
use jiff::Timestamp;

use crate::env_intern::{Env, EnvInterner};

/// How much one GPU counts against one CPU core in fair-share usage.
pub const GPU_WEIGHT: f64 = 10.0;

/// Who a job belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owner {
    pub user_id: i64,
    pub name: String,
    /// The Unix user who submitted it on the manager's host, when its kernel vouched for it
    /// (a submit over the unix socket): agents run the kernels as it by default.
    pub submitter: Option<UnixId>,
}

/// How a kernel ended, as far as the manager has recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KernelEnd {
    pub outcome: Option<KernelOutcome>,
    pub exit: Exit,
}

/// How a kernel's process ended: its exit code (128 plus the signal when one killed it) and
/// that signal, as its agent reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Exit {
    pub code: Option<i32>,
    pub signal: Option<i32>,
}

impl Exit {
    /// An exit with `code` and no signal (what the store keeps of a kernel).
    pub fn code(code: Option<i32>) -> Exit {
        Exit { code, signal: None }
    }
}

/// One run of a job: placed, started, stopped. A requeue begins the next one.
#[derive(Debug, Clone, Default)]
pub struct Attempt {
    /// 0 for the first; kernels and their reports carry it, so a report of an earlier
    /// attempt is never taken for the current one.
    pub number: u32,
    /// Where its kernels run (empty while pending).
    pub bindings: Vec<Binding>,
    /// Per kernel: its end once reported.
    pub ends: Vec<Option<KernelEnd>>,
    /// Kernels placed but not yet reported `Started`: an agent that reconnects without one
    /// of them gets its start again (it may have died before the kernel ran) instead of the
    /// job failing with `kernel lost`. Memory only: after a manager restart a RUNNING job's
    /// kernels count as started.
    pub unstarted: std::collections::BTreeSet<u32>,
    /// Who asked it to stop (kept from TERMINATING on; stored).
    pub stop: Option<StopCause>,
    /// When it was placed (SCHEDULED).
    pub placed_at: Option<Timestamp>,
    /// When its first kernel started (RUNNING).
    pub started_at: Option<Timestamp>,
    /// While it holds resources: its usage is counted up to this time (ms).
    pub accounted_ms: Millis,
    /// It started beyond its quota (borrowing): preempted first. Memory only; a restart
    /// recomputes it from the start order (`QuotaTable::restore_borrowed`).
    pub borrowed: bool,
    /// How its kernels' setup goes (PREPARING), as last reported. Memory only: an agent
    /// reports it again when it registers.
    pub setup: Option<berth_model::SetupProgress>,
}

impl Attempt {
    /// The attempt after this one: nothing placed, nothing ended, nobody asked it to stop.
    pub fn next(&self) -> Attempt {
        Attempt { number: self.number + 1, ..Attempt::default() }
    }
}

/// What the scheduler said about a pending job (reset at each requeue).
#[derive(Debug, Clone, Default)]
pub struct Waiting {
    /// Why it waits (`None`: no pass has looked at it yet).
    pub reason: Option<PendingReason>,
    /// Who holds it out of the scheduler until released (`berth hold`, `scontrol hold`):
    /// it is then among the state's held jobs, whatever else it waits for.
    pub hold: Option<berth_model::Hold>,
    /// Its place in its queue.
    pub position: Option<u32>,
    /// Passes in a row in which it could not start (the skip-after policy's count).
    pub blocked_passes: u32,
    /// When it is expected to start (the scheduler's reservation).
    pub expected_start: Option<Timestamp>,
    /// The pass that last said so (`State::pass_seq`): a job a later pass did not reach has
    /// its place in that pass's untried rest instead (`State::untried_places`).
    pub pass: u64,
    /// Bytes of its datasets each node's cache holds, as last measured (`datasets.rs`);
    /// placement prefers the nodes holding most.
    pub data_on: Vec<(String, u64)>,
    /// Nodes placement takes only when no other can (a serving replica's siblings' nodes).
    pub avoid: Vec<String>,
}

/// A job's change of state as live views (the dashboard's event stream) get it, sent once
/// the change is stored. The owner and the spec's project say who may see it.
#[derive(Debug, Clone)]
pub struct JobEvent {
    pub owner_id: i64,
    /// Its project and whether it is shared with it.
    pub spec: Arc<JobSpec>,
    pub view: JobView,
}

/// An unfinished job.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: JobId,
    pub owner: Owner,
    /// The spec without its exported environment (that is `exported`).
    pub spec: Arc<JobSpec>,
    /// The exported environment, shared with other jobs that have the same (`env_intern`).
    pub exported: Arc<Env>,
    pub queue: String,
    pub state: JobState,
    pub submitted_at: Timestamp,
    /// Why it is in its state, for people (`berth ps`); nothing reads it back.
    pub reason: Option<String>,
    pub attempt: Attempt,
    pub waiting: Waiting,
    /// Its expected run time (`predictions.rs`), set when it enters the pending set and kept
    /// while it runs (what backfill plans with); `None`: no history to predict from. Never
    /// what stops it: only its time limit does.
    pub estimate_ms: Option<Millis>,
    /// Service its earlier runs received before a requeue, in device-seconds (the `las`
    /// ordering's key); 0 for a job that never ran to a requeue.
    pub attained: u64,
}

impl Job {
    /// A job just stored by a submit: PENDING, first attempt, nothing placed. `envs` keeps
    /// one copy of each exported environment.
    pub fn submitted(
        id: JobId,
        owner: Owner,
        mut spec: JobSpec,
        queue: String,
        now: Timestamp,
        envs: &EnvInterner,
    ) -> Job {
        let exported = envs.intern(std::mem::take(&mut spec.submit_env));
        let hold = spec.hold.then_some(berth_model::Hold::User);
        Job {
            id,
            owner,
            spec: Arc::new(spec),
            exported,
            queue,
            state: JobState::Pending,
            submitted_at: now,
            reason: Some("submitted".into()),
            attempt: Attempt::default(),
            waiting: Waiting { hold, ..Waiting::default() },
            estimate_ms: None,
            attained: 0,
        }
    }

    /// A job read back from the store (after a restart): its kernels' bindings and ends are
    /// the caller's to add for a job that holds resources.
    pub fn from_row(mut r: JobRow, envs: &EnvInterner) -> Job {
        let exported = envs.intern(std::mem::take(&mut r.spec.submit_env));
        Job {
            id: r.id,
            owner: Owner { user_id: r.user_id, name: r.user, submitter: r.submitter },
            spec: Arc::new(r.spec),
            exported,
            queue: r.queue,
            state: r.state,
            submitted_at: r.submitted_at,
            reason: r.reason,
            attempt: Attempt { number: r.attempt, stop: r.stop, started_at: r.started_at, ..Attempt::default() },
            waiting: Waiting { reason: r.pending_reason, hold: r.hold, ..Waiting::default() },
            estimate_ms: None,
            attained: 0,
        }
    }

    /// A pass placed this pending job, and its move to SCHEDULED is stored: the attempt takes
    /// the bindings (kernels not started yet, nothing ended), and what the job waited for is
    /// over. `borrowed`: it starts beyond its quota. `now`: when, in ms.
    pub fn place(&mut self, bindings: Vec<Binding>, borrowed: bool, now: Millis) {
        let kernels = bindings.len();
        self.state = JobState::Scheduled;
        self.reason = Some(scheduled_reason(&bindings, &self.waiting.data_on));
        self.waiting = Waiting::default();
        self.attempt = Attempt {
            number: self.attempt.number,
            ends: vec![None; kernels],
            unstarted: (0..kernels as u32).collect(),
            placed_at: Timestamp::from_millisecond(now).ok(),
            accounted_ms: now,
            borrowed,
            bindings,
            ..Attempt::default()
        };
    }

    /// Begins the next attempt (a requeue) at `now_ms`: pending again, nothing placed or said,
    /// and the run that ends here added to the service the job received. Its estimate is made
    /// again when it re-enters the pending set.
    pub fn requeue(&mut self, now_ms: Millis) {
        if let Some(started) = self.attempt.started_at {
            let size = crate::predictions::size(&self.spec);
            self.attained = self.attained.saturating_add(berth_sched::service(size, now_ms - started.as_millisecond()));
        }
        self.attempt = self.attempt.next();
        self.waiting = Waiting::default();
        self.estimate_ms = None;
    }

    /// Its time limit in ms, as asked for.
    pub fn time_limit_ms(&self) -> Option<Millis> {
        self.spec.time_limit_secs.map(|s| s as i64 * 1000)
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
            None => personal_account(&self.owner.name).into(),
        }
    }

    /// The whole spec, exported environment included (for the agent).
    pub fn full_spec(&self) -> JobSpec {
        let mut spec = (*self.spec).clone();
        spec.submit_env = (*self.exported).clone();
        spec
    }

    pub fn key(&self, index: u32) -> KernelKey {
        KernelKey { job_id: self.id, attempt: self.attempt.number, index }
    }

    /// Whether kernel `index` of this attempt runs on `node`.
    pub fn on_node(&self, index: u32, node: &str) -> bool {
        self.attempt.bindings.get(index as usize).is_some_and(|b| b.node == node)
    }

    /// The job as the scheduler sees it while it waits (kept in `State::pending`).
    pub fn pending_job(&self) -> berth_sched::PendingJob {
        berth_sched::PendingJob {
            id: self.id,
            priority: self.spec.priority,
            queue: self.queue.as_str().into(),
            request: self.spec.resources,
            nodes: self.spec.nodes,
            numa: self.spec.numa,
            blocked_passes: self.waiting.blocked_passes,
            user: self.owner.name.clone(),
            project: self.account().into_owned(),
            submitted_at: self.submitted_at.as_millisecond(),
            time_limit_ms: self.time_limit_ms(),
            estimate_ms: self.estimate_ms,
            attained: self.attained,
            image: self.spec.image.as_deref().map(berth_model::job::image_key),
            kernels: self.spec.kernels,
            mounts: self.spec.mounts.iter().map(|m| m.source.clone()).collect(),
            data_on: self.waiting.data_on.clone(),
            avoid: self.waiting.avoid.clone(),
            constraint: self.spec.constraint.clone(),
            exclusive: self.spec.exclusive,
            folders: self.spec.image.is_none() && !self.spec.folders.is_empty(),
        }
    }

    /// The job as the scheduler sees it while it holds resources (kept in `State::running`);
    /// `now_ms` stands for its start when it has neither started nor been placed. A job
    /// already stopping is never a victim again.
    pub fn running_job(&self, now_ms: Millis) -> berth_sched::RunningJob {
        let stopping = self.state == JobState::Terminating || self.attempt.stop.is_some();
        berth_sched::RunningJob {
            id: self.id,
            queue: self.queue.clone(),
            priority: self.spec.priority,
            user: self.owner.name.clone(),
            project: self.account().into_owned(),
            bindings: self.attempt.bindings.clone(),
            submitted_at: self.submitted_at.as_millisecond(),
            started_at: self.attempt.started_at.or(self.attempt.placed_at).map_or(now_ms, |t| t.as_millisecond()),
            time_limit_ms: self.time_limit_ms(),
            estimate_ms: self.estimate_ms,
            attained: self.attained,
            preemptible: self.spec.preemptible && !stopping,
            borrowed: self.attempt.borrowed && !stopping,
        }
    }

    /// The job as it is now, for live views.
    pub fn event(&self) -> JobEvent {
        JobEvent { owner_id: self.owner.user_id, spec: self.spec.clone(), view: self.view() }
    }

    pub fn view(&self) -> JobView {
        let mut nodes: Vec<String> = self.attempt.bindings.iter().map(|b| b.node.clone()).collect();
        nodes.dedup();
        JobView {
            id: self.id,
            name: self.spec.name.clone(),
            user: self.owner.name.clone(),
            state: self.state,
            queue: self.queue.clone(),
            priority: self.spec.priority,
            position: if self.state == JobState::Pending { self.waiting.position } else { None },
            pending_reason: if self.state == JobState::Pending {
                // A hold shows at once, before the next pass records it as the reason.
                Some(self.waiting.hold.map(|h| h.reason()).or(self.waiting.reason.clone()).unwrap_or_else(queued))
            } else {
                None
            },
            nodes,
            cpu_milli: self.spec.resources.cpu_milli,
            mem_bytes: self.spec.resources.mem_bytes,
            gpu_milli: self.spec.resources.gpu_milli,
            submitted_at: self.submitted_at,
            started_at: self.attempt.started_at,
            ended_at: None,
            exit_code: None,
            end_signal: None,
            reason: self.reason.clone(),
            expected_start: if self.state == JobState::Pending { self.waiting.expected_start } else { None },
            stop: self.attempt.stop.clone(),
            end_cause: None,
            usage: None,
            deadline: self.time_limit_deadline(),
            setup: if self.state == JobState::Preparing { self.attempt.setup.clone() } else { None },
            nodes_requested: self.spec.nodes,
            time_limit_secs: self.spec.time_limit_secs,
            project: self.spec.project.clone(),
            workdir: self.spec.workdir.clone(),
            array_task: self.spec.array_task,
            array: self.spec.array.as_ref().map(|a| a.to_string()),
            expected_run_secs: self.expected_run_secs(),
        }
    }

    /// Its expected run time in whole seconds (rounded up), as views show it.
    pub fn expected_run_secs(&self) -> Option<u64> {
        self.estimate_ms.map(|ms| (ms.max(0) as u64).div_ceil(1000))
    }

    /// When a running job reaches its time limit.
    pub fn time_limit_deadline(&self) -> Option<berth_model::api::Deadline> {
        if self.state != JobState::Running {
            return None;
        }
        let limit = jiff::SignedDuration::from_secs(self.spec.time_limit_secs? as i64);
        let at = self.attempt.started_at?.checked_add(limit).ok()?;
        Some(berth_model::api::Deadline { at, kind: berth_model::api::DeadlineKind::TimeLimit })
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
        end_signal: r.end_signal,
        reason: r.reason.clone(),
        expected_start: None,
        stop: r.stop.clone(),
        end_cause: r.end_cause,
        usage: r.used.map(|total| JobUsage { total, cpu_percent: None }),
        deadline: None,
        setup: None,
        nodes_requested: r.spec.nodes,
        time_limit_secs: r.spec.time_limit_secs,
        project: r.spec.project.clone(),
        workdir: r.spec.workdir.clone(),
        array_task: r.spec.array_task,
        array: r.spec.array.as_ref().map(|a| a.to_string()),
        expected_run_secs: None,
    }
}

/// Why a placed job is SCHEDULED: where it runs and, for a job with datasets (`data_on`, the
/// bytes of them each node's cache held when it was placed), what its nodes hold of them.
pub fn scheduled_reason(bindings: &[Binding], data_on: &[(String, u64)]) -> String {
    let mut nodes: Vec<&str> = bindings.iter().map(|b| b.node.as_str()).collect();
    nodes.dedup();
    let base = format!("scheduled on {}", nodes.join(", "));
    if data_on.is_empty() {
        return base;
    }
    let held = |n: &str| data_on.iter().find(|(x, _)| x == n).map_or(0, |(_, b)| *b);
    let least = nodes.iter().map(|n| held(n)).min().unwrap_or(0);
    let other =
        data_on.iter().filter(|(n, _)| !nodes.contains(&n.as_str())).max_by_key(|(n, b)| (*b, std::cmp::Reverse(n)));
    let its =
        if nodes.len() == 1 { "its cache holds".to_string() } else { "each of their caches holds at least".into() };
    match other {
        _ if least == 0 && other.is_none_or(|(_, b)| *b == 0) => {
            format!("{base}: no node's cache holds the job's datasets yet (they are prefetched before it runs)")
        }
        Some((n, b)) if *b > least => format!(
            "{base}: {its} {} of the job's datasets; {n} holds more ({}) but cannot take the job now",
            format_bytes(least),
            format_bytes(*b)
        ),
        _ => format!("{base}: {its} {} of the job's datasets, as much as any node", format_bytes(least)),
    }
}

/// The account of `user`'s jobs without a project: `user:NAME`, a name no project can have
/// (project names are letters, digits, `-`, `_` and `.`).
pub fn personal_account(user: &str) -> String {
    format!("user:{user}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::{NumaPolicy, ResourceRequest};

    fn job() -> Job {
        let owner = Owner { user_id: 1, name: "ada".into(), submitter: None };
        let mut spec = JobSpec::command(["true"]);
        spec.resources = ResourceRequest { cpu_milli: 1000, mem_bytes: 1 << 30, gpu_milli: 0 };
        spec.numa = NumaPolicy::PreferLocal;
        Job::submitted(7, owner, spec, "default".into(), Timestamp::UNIX_EPOCH, &EnvInterner::default())
    }

    fn binding(node: &str) -> Binding {
        Binding { node: node.into(), ..Binding::default() }
    }

    #[test]
    fn placing_takes_the_bindings_and_ends_the_wait() {
        let mut j = job();
        j.waiting = Waiting {
            position: Some(3),
            blocked_passes: 2,
            expected_start: Some(Timestamp::UNIX_EPOCH),
            ..Waiting::default()
        };
        j.place(vec![binding("n1"), binding("n2")], true, 5_000);
        assert_eq!(j.state, JobState::Scheduled);
        assert_eq!(j.reason.as_deref(), Some("scheduled on n1, n2"));
        assert_eq!(j.waiting.position, None);
        assert_eq!(j.waiting.expected_start, None);
        assert_eq!(j.attempt.ends, vec![None, None]);
        assert_eq!(j.attempt.unstarted.len(), 2);
        assert_eq!(j.attempt.accounted_ms, 5_000);
        assert!(j.attempt.borrowed);
        assert_eq!(j.attempt.number, 0);
    }

    #[test]
    fn a_requeue_starts_the_next_attempt_with_nothing_of_the_last() {
        let mut j = job();
        j.place(vec![binding("n1")], true, 5_000);
        j.attempt.started_at = Some(Timestamp::UNIX_EPOCH);
        j.attempt.stop = Some(StopCause::Cancelled { by: "root".into() });
        j.attempt.ends[0] = Some(KernelEnd { outcome: None, exit: Exit::code(Some(1)) });
        j.waiting.blocked_passes = 4;
        j.requeue(3_605_000);
        assert_eq!(j.attained, 3_605, "one CPU for 3,605 s");
        assert_eq!(j.attempt.number, 1);
        assert!(j.attempt.bindings.is_empty() && j.attempt.ends.is_empty() && j.attempt.unstarted.is_empty());
        assert!(j.attempt.stop.is_none() && j.attempt.started_at.is_none() && j.attempt.placed_at.is_none());
        assert!(!j.attempt.borrowed);
        assert_eq!(j.waiting.blocked_passes, 0);
        assert_eq!(j.key(0), KernelKey { job_id: 7, attempt: 1, index: 0 });
    }

    #[test]
    fn the_scheduled_reason_says_what_the_node_holds_of_the_datasets() {
        let on = |v: &[(&str, u64)]| v.iter().map(|(n, b)| (n.to_string(), *b)).collect::<Vec<_>>();
        let n2 = [binding("n2")];
        assert_eq!(scheduled_reason(&n2, &[]), "scheduled on n2");
        assert_eq!(
            scheduled_reason(&n2, &on(&[("n1", 0), ("n2", 3 << 30)])),
            "scheduled on n2: its cache holds 3GiB of the job's datasets, as much as any node"
        );
        assert_eq!(
            scheduled_reason(&n2, &on(&[("n1", 5 << 30), ("n2", 1 << 30)])),
            "scheduled on n2: its cache holds 1GiB of the job's datasets; n1 holds more (5GiB) but cannot take the job now"
        );
        assert_eq!(
            scheduled_reason(&n2, &on(&[("n1", 0), ("n2", 0)])),
            "scheduled on n2: no node's cache holds the job's datasets yet (they are prefetched before it runs)"
        );
    }
}
