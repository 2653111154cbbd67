//! Job state changes shared by the API, the agent hub and the heartbeat checker.
//!
//! Each function runs with the state lock held, writes the change to the store first, and
//! only then updates memory and sends commands, so a crash never leaves an action the store
//! does not know about. A failed compare-and-set means someone else already moved the job:
//! the event is stale and is dropped (this is what makes duplicate agent reports harmless).
//! A report whose change the store refused for a reason that may pass is kept instead
//! (`deferred.rs`) and applied again by [`Jobs::retry_deferred`] on every tick of the
//! scheduling loop.

use std::sync::Arc;

use berth_model::protocol::{KernelKey, KernelOutcome, ManagerMessage};
use berth_model::{Binding, EndCause, JobId, JobState, PreemptAction, SetupProgress, StopCause};
use berth_store::{Change, StoreError};
use jiff::Timestamp;

use crate::deferred::{Deferred, LostCause, worth_retrying};
use crate::jobs::Jobs;
use crate::metrics::{Commit, JobEvent as MetricEvent};
use crate::state::{Exit, KernelEnd, State, scheduled_reason};

/// How long an agent lets a kernel stop before it kills it.
pub const STOP_GRACE_MS: u64 = 10_000;

/// Where a cancel left the job.
pub enum Cancelled {
    /// It was pending: CANCELLED now.
    Now,
    /// It ran: TERMINATING until its kernels stopped (also when it already was).
    Stopping,
}

impl Cancelled {
    /// The job's state after the cancel.
    pub fn state(&self) -> JobState {
        match self {
            Cancelled::Now => JobState::Cancelled,
            Cancelled::Stopping => JobState::Terminating,
        }
    }
}

/// One move of a job to another state, with what the store keeps typed beside its reason.
#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    pub to: JobState,
    /// For people (`berth ps`, the history); nothing reads it back.
    pub reason: String,
    pub exit_code: Option<i32>,
    /// The signal that ended its main kernel, when one did (with a final state).
    pub end_signal: Option<i32>,
    /// How the job ended: set with every final state.
    pub end: Option<EndCause>,
    /// Who asked the job to stop: set with TERMINATING (and CANCELLED from PENDING).
    pub stop: Option<StopCause>,
}

impl Move {
    /// A move that is neither an end nor a stop request (SCHEDULED, RUNNING, a requeue).
    pub fn to(to: JobState, reason: impl Into<String>) -> Move {
        Move { to, reason: reason.into(), exit_code: None, end_signal: None, end: None, stop: None }
    }

    /// An end in a final state.
    pub fn end(to: JobState, end: EndCause, reason: impl Into<String>) -> Move {
        Move { end: Some(end), ..Move::to(to, reason) }
    }

    /// With its main kernel's exit code and the signal that ended it.
    pub fn with_exit(self, exit: Exit) -> Move {
        Move { exit_code: exit.code, end_signal: exit.signal, ..self }
    }

    /// A pass placed the job on `bindings` (stored with the pass's batch, `scheduler.rs`);
    /// `data_on`: where its datasets are cached ([`scheduled_reason`]).
    pub fn scheduled(bindings: &[Binding], data_on: &[(String, u64)]) -> Move {
        Move::to(JobState::Scheduled, scheduled_reason(bindings, data_on))
    }

    /// The store changes that record this move of `job_id` from `from` at `at`: the
    /// compare-and-set transition with its typed end, and the stop cause if there is one.
    pub fn record(&self, job_id: JobId, from: JobState, at: Timestamp) -> impl Iterator<Item = Change> {
        let Move { to, reason, exit_code, end_signal, end, stop } = self.clone();
        let transition = Change::Transition { job_id, from, to, at, reason, exit_code, end_signal, end };
        std::iter::once(transition).chain(stop.map(|cause| Change::Stop { job_id, cause }))
    }

    /// A stop request: the job is TERMINATING until its kernels stopped.
    pub fn stop(cause: StopCause, reason: impl Into<String>) -> Move {
        Move { stop: Some(cause), ..Move::to(JobState::Terminating, reason) }
    }

    /// A pending job cancelled before it ran.
    pub fn cancel_pending(by: &str) -> Move {
        Move {
            stop: Some(StopCause::Cancelled { by: by.to_string() }),
            ..Move::end(JobState::Cancelled, EndCause::Cancelled, format!("cancelled by {by}"))
        }
    }

    /// Where a stopping job goes once its kernels stopped, and why: per its stop cause.
    pub fn stopped(stop: Option<&StopCause>, message: &str) -> Move {
        match stop {
            Some(StopCause::Preempted { by_job, action: PreemptAction::Requeue }) => {
                Move::to(JobState::Pending, format!("requeued: preempted by job {by_job}"))
            }
            Some(StopCause::Preempted { by_job, action: PreemptAction::Cancel }) => {
                Move::end(JobState::Cancelled, EndCause::Preempted, format!("cancelled: preempted by job {by_job}"))
            }
            Some(StopCause::Cancelled { by }) if message.is_empty() => {
                Move::end(JobState::Cancelled, EndCause::Cancelled, format!("cancelled by {by}"))
            }
            Some(StopCause::Cancelled { by }) => {
                Move::end(JobState::Cancelled, EndCause::Cancelled, format!("cancelled by {by} ({message})"))
            }
            Some(StopCause::Requeued { by }) => Move::to(JobState::Pending, format!("requeued by {by}")),
            Some(StopCause::ScaledDown { endpoint, wants }) => Move::end(
                JobState::Cancelled,
                EndCause::ScaledDown,
                format!("scaled down (endpoint {endpoint} wants {})", berth_model::replica::replicas(*wants)),
            ),
            Some(StopCause::Idle { idle_secs }) => Move::end(
                JobState::Timeout,
                EndCause::Idle,
                format!(
                    "idle: no client attached and no app traffic for {} (the queue's idle_timeout)",
                    berth_model::format_duration(*idle_secs)
                ),
            ),
            None => {
                Move::end(JobState::Cancelled, EndCause::StoppedByAgent, non_empty(message, "stopped by the agent"))
            }
        }
    }
}

impl Jobs {
    /// Cancels job `id` (which must be in `st`) on behalf of `by`: a pending job ends at once;
    /// a running one is asked to stop, and ends when its kernels have stopped.
    pub async fn cancel(&self, st: &mut State, id: JobId, by: &str) -> Result<Cancelled, StoreError> {
        let state = st.job(id).map(|j| j.state).ok_or_else(|| StoreError::NotFound(format!("job {id}")))?;
        // A job array: its unfinished tasks first, then the array (and with it the tasks
        // still to make).
        if st.job(id).is_some_and(|j| j.spec.array.is_some()) {
            let tasks: Vec<JobId> = st.tasks_of(id).map(|j| j.id).collect();
            for t in tasks {
                Box::pin(self.cancel(st, t, by)).await?;
            }
            st.forget_array(id);
        }
        match state {
            JobState::Pending => {
                self.transition(st, id, Move::cancel_pending(by), vec![]).await?;
                Ok(Cancelled::Now)
            }
            JobState::Terminating => Ok(Cancelled::Stopping),
            _ => {
                let cause = StopCause::Cancelled { by: by.to_string() };
                self.stop_running(st, id, cause, format!("cancel requested by {by}")).await?;
                Ok(Cancelled::Stopping)
            }
        }
    }

    /// Asks a job that holds resources to stop for `cause`: TERMINATING until its kernels
    /// stopped (then where [`Move::stopped`] says).
    pub async fn stop_running(
        &self,
        st: &mut State,
        id: JobId,
        cause: StopCause,
        reason: String,
    ) -> Result<(), StoreError> {
        let stops = self.stop_commands(st, id, &reason);
        self.transition(st, id, Move::stop(cause, reason), vec![]).await?;
        st.send_all(stops);
        Ok(())
    }

    /// Writes `job_id`'s move (plus `extra` changes) and mirrors it in memory. Ends, requeues,
    /// stop causes and ledger bookkeeping are handled here; sending commands is the caller's.
    pub async fn transition(
        &self,
        st: &mut State,
        job_id: JobId,
        mv: Move,
        mut extra: Vec<Change>,
    ) -> Result<(), StoreError> {
        let Some(job) = st.job(job_id) else {
            return Err(StoreError::NotFound(format!("job {job_id}")));
        };
        let from = job.state;
        let now = self.clock.now();
        let recorded: Vec<Change> = mv.record(job_id, from, now).collect();
        let Move { to, reason, stop, end, exit_code, end_signal } = mv;
        // A job that gives its resources back is charged for them (fair share), in the same
        // batch as its state change: O(1), one row per user and project.
        let usage = if from.holds_resources() && (to.is_terminal() || to == JobState::Pending) {
            let now_ms = now.as_millisecond();
            let amount = job.usage_rate() * (now_ms - job.attempt.accounted_ms).max(0) as f64 / 1000.0;
            st.usage().charge(&[(&job.owner.name, &job.account(), amount)], now_ms, self.half_life_ms)
        } else {
            Vec::new()
        };
        extra.extend(usage.iter().cloned().map(Change::Usage));
        extra.extend(recorded);
        st.touch(job_id);
        st.touch_usage(&usage);
        self.write(st, extra).await?;
        st.set_usage(&usage);
        if to.is_terminal() || to == JobState::Pending {
            st.meters_mut().forget_job(job_id);
        }
        let job = st.job_mut(job_id).expect("checked above");
        job.state = to;
        job.reason = Some(reason);
        if stop.is_some() {
            job.attempt.stop = stop;
        }
        let mut metric = None;
        if to == JobState::Running && job.attempt.started_at.is_none() {
            job.attempt.started_at = Some(now);
            let since_submit = now.duration_since(job.submitted_at).unsigned_abs();
            metric = Some(MetricEvent::Started { queue: job.queue.clone(), since_submit });
        }
        if to.is_terminal() {
            metric = Some(MetricEvent::Finished { queue: job.queue.clone(), state: to });
        }
        let event = self.watched().then(|| {
            let mut e = job.event();
            if to.is_terminal() {
                e.view.ended_at = Some(now);
                e.view.exit_code = exit_code;
                e.view.end_signal = end_signal;
                e.view.end_cause = end;
            }
            Arc::new(e)
        });
        if let Some(ev) = metric {
            // Inside a batch the event waits for its commit (`Batch::note`).
            match st.batch_mut() {
                Some(b) => b.note(ev),
                None => self.metrics.job_event(ev),
            }
        }
        let job = st.job_mut(job_id).expect("checked above");
        // A run that ended by itself or at its limit teaches the predictor how long such jobs
        // run (`predictions.rs`); a cancelled or preempted one does not.
        let ran = job.attempt.started_at.filter(|_| to.is_terminal() && crate::predictions::observed(end));
        if let Some(started) = ran {
            let key = crate::predictions::key(&job.owner.name, &job.spec);
            st.observe_run(&key, now.as_millisecond() - started.as_millisecond());
        }
        let job = st.job_mut(job_id).expect("checked above");
        if to.is_terminal() || to == JobState::Pending {
            let bindings = std::mem::take(&mut job.attempt.bindings);
            if to == JobState::Pending {
                job.requeue(now.as_millisecond());
            }
            if from.holds_resources() {
                st.release(&bindings);
                if let Some(b) = st.batch_mut() {
                    b.released(job_id, &bindings);
                }
            }
            if to.is_terminal()
                && let Some(t) = st.remove_job(job_id).and_then(|j| j.spec.array_task)
                && let Some(p) = st.array_mut(t.array_id)
            {
                p.ended(to);
            }
            self.wake();
        }
        // A cancel while pending leaves the set, a requeue comes back to it.
        st.sync_sets(job_id);
        if let Some(e) = event {
            self.publish(st, e);
        }
        Ok(())
    }

    /// Stores `changes`, or stages them in the open batch (committed with it, `batch.rs`).
    pub async fn write(&self, st: &mut State, changes: Vec<Change>) -> Result<(), StoreError> {
        match st.batch_mut() {
            Some(b) => {
                b.stage(changes);
                Ok(())
            }
            None => {
                let started = std::time::Instant::now();
                let stored = self.store.apply(&changes).await;
                self.metrics.commit(Commit::Transition, started.elapsed());
                stored
            }
        }
    }

    /// `StopKernel` commands for every kernel of the job whose end is not recorded yet, to
    /// send once the state change that calls for them is stored.
    pub fn stop_commands(&self, st: &State, job_id: JobId, reason: &str) -> Vec<(String, ManagerMessage)> {
        let Some(job) = st.job(job_id) else { return Vec::new() };
        let mut out = Vec::new();
        for (i, b) in job.attempt.bindings.iter().enumerate() {
            if job.attempt.ends.get(i).is_some_and(|e| e.is_none()) {
                let msg = ManagerMessage::StopKernel {
                    cmd_id: self.next_cmd_id(),
                    key: job.key(i as u32),
                    reason: reason.to_string(),
                    grace_ms: STOP_GRACE_MS,
                };
                out.push((b.node.clone(), msg));
            }
        }
        out
    }

    /// The job's node(s) are gone: requeue it if it asked for that, otherwise end it with
    /// `cause` (LOST when the node is lost, FAILED when the agent no longer has the kernel). A
    /// job being stopped ends as its stop cause says.
    /// `node` is where the kernel was lost; kernels there are not stopped.
    pub async fn lose_job(&self, st: &mut State, job_id: JobId, node: &str, cause: LostCause, reason: String) {
        let Some(job) = st.job(job_id) else { return };
        // Kernels on other, still connected nodes of a multi-node job must stop too.
        let mut stops = self.stop_commands(st, job_id, &reason);
        stops.retain(|(n, _)| n != node);
        let mv = if job.state == JobState::Terminating {
            Move::stopped(job.attempt.stop.as_ref(), &reason)
        } else if job.spec.requeue {
            Move::to(JobState::Pending, format!("requeued: {reason}"))
        } else {
            match cause {
                LostCause::Node => Move::end(JobState::Lost, EndCause::NodeLost, reason.clone()),
                LostCause::Kernel => Move::end(JobState::Failed, EndCause::KernelLost, reason.clone()),
            }
        };
        let res = self.transition(st, job_id, mv, vec![]).await;
        match res {
            Ok(()) => st.send_all(stops),
            Err(e) => {
                tracing::warn!(job_id, "cannot record lost job: {e}");
                if worth_retrying(&e) {
                    st.defer(Deferred::Lost { job_id, node: node.to_string(), cause, reason });
                }
            }
        }
    }

    /// A kernel reported how its setup goes on `node`: the job becomes PREPARING (committed, like
    /// every move) at the first report; later ones only update its progress, kept in memory.
    pub async fn kernel_preparing(&self, st: &mut State, node: &str, key: KernelKey, progress: SetupProgress) {
        let Some(job) = st.job_mut(key.job_id) else { return };
        if job.attempt.number != key.attempt || !job.on_node(key.index, node) {
            return;
        }
        if !matches!(job.state, JobState::Scheduled | JobState::Preparing) {
            return;
        }
        let first = job.state == JobState::Scheduled;
        let reason = format!("preparing on {node}: {}", progress.step.label());
        job.attempt.setup = Some(progress);
        if first && let Err(e) = self.transition(st, key.job_id, Move::to(JobState::Preparing, reason), vec![]).await {
            // Still SCHEDULED: the next progress report tries again.
            tracing::warn!(job = key.job_id, "cannot record preparing: {e}");
        }
    }

    /// A kernel reported `Started` on `node`.
    pub async fn kernel_started(&self, st: &mut State, node: &str, key: KernelKey) -> bool {
        let Some(job) = st.job_mut(key.job_id) else { return false };
        if job.attempt.number != key.attempt || !job.on_node(key.index, node) {
            return false;
        }
        job.attempt.unstarted.remove(&key.index);
        if matches!(job.state, JobState::Scheduled | JobState::Preparing) {
            let mv = Move::to(JobState::Running, format!("started on {node}"));
            if let Err(e) = self.transition(st, key.job_id, mv, vec![]).await {
                tracing::warn!(job = key.job_id, "cannot record start: {e}");
                if worth_retrying(&e) {
                    st.defer(Deferred::Started { node: node.to_string(), key });
                }
            }
        }
        true
    }

    /// A kernel reported its end on `node`. Unwanted or duplicate reports only get a `Forget`.
    pub async fn kernel_finished(
        &self,
        st: &mut State,
        node: &str,
        key: KernelKey,
        outcome: KernelOutcome,
        exit: Exit,
        message: &str,
    ) {
        let wanted = st.job(key.job_id).is_some_and(|j| {
            j.attempt.number == key.attempt
                && j.on_node(key.index, node)
                && j.attempt.ends.get(key.index as usize).is_some_and(|e| e.is_none())
        });
        if !wanted {
            st.meters_mut().forget_kernel(key);
            st.send(node, ManagerMessage::Forget { key });
            return;
        }
        if outcome == KernelOutcome::Fenced {
            // The agent lost the manager for half the heartbeat timeout and stopped its
            // kernels: the same outcome as the node being lost (requeue or LOST), reached
            // earlier because the partition healed before the manager's own timeout.
            let reason = format!("node {node} lost contact with the manager: {message}");
            self.lose_job(st, key.job_id, node, LostCause::Node, reason).await;
            st.send(node, ManagerMessage::Forget { key });
            return;
        }
        // What it used, as its agent reported with its end (`agent_conn` puts it in the meters).
        let usage = st.meters().totals(key);
        let job = st.job_mut(key.job_id).expect("checked above");
        job.attempt.ends[key.index as usize] = Some(KernelEnd { outcome: Some(outcome), exit });
        let exit_code = exit.code;
        let all_done = job.attempt.ends.iter().all(|e| e.is_some());
        let kernel_exit =
            Change::KernelExit { job_id: key.job_id, attempt: key.attempt, index: key.index, exit_code, usage };
        // A kernel that only holds its node (`launch = first`) never ends by itself: when it
        // does, its node is gone from the job's allocation, and the job fails.
        let holder = job.spec.holds_only(key.index);
        if outcome == KernelOutcome::Succeeded && !all_done && key.index != 0 && !holder {
            // A sub kernel of a multi-node job is done; the job goes on until `main` ends
            // (like torchrun's agents, the workers may finish before the coordinator).
            if let Err(e) = self.write(st, vec![kernel_exit]).await {
                tracing::warn!(job = key.job_id, "cannot record kernel exit: {e}");
            }
            st.send(node, ManagerMessage::Forget { key });
            return;
        }
        // The main kernel's end once it has one (its signal with its code), else this one's.
        let main_exit = match job.attempt.ends[0] {
            Some(KernelEnd { exit: e @ Exit { code: Some(_), .. }, .. }) => e,
            _ => exit,
        };
        let stopping = job.attempt.stop.as_ref().filter(|_| job.state == JobState::Terminating);
        let preempted = stopping.filter(|s| matches!(s, StopCause::Preempted { .. }));
        let mv = match outcome {
            // A preempted job's kernel stopped (or failed while stopping): requeue or cancel it.
            o if o != KernelOutcome::Succeeded && preempted.is_some() => Move::stopped(preempted, ""),
            KernelOutcome::Succeeded | KernelOutcome::Failed if holder && stopping.is_none() => Move::end(
                JobState::Failed,
                EndCause::KernelLost,
                format!(
                    "kernel {}, which held node {node} for srun, ended ({})",
                    key.index,
                    non_empty(message, &format!("exit code {}", exit_code.unwrap_or(-1)))
                ),
            ),
            // `main` ended: the job is over, and sub kernels still running are stopped.
            KernelOutcome::Succeeded => Move::end(JobState::Succeeded, EndCause::Exited, "exit code 0"),
            KernelOutcome::Failed if !message.is_empty() => Move::end(JobState::Failed, EndCause::Exited, message),
            KernelOutcome::Failed => {
                Move::end(JobState::Failed, EndCause::Exited, format!("exit code {}", exit_code.unwrap_or(-1)))
            }
            KernelOutcome::Timeout => {
                Move::end(JobState::Timeout, EndCause::TimeLimit, non_empty(message, "time limit reached"))
            }
            // A cancel names who asked; an agent's own stop says why in its message.
            KernelOutcome::Stopped if stopping.is_some() => Move::stopped(stopping, ""),
            KernelOutcome::Stopped => Move::stopped(None, message),
            KernelOutcome::OutOfMemory => Move::end(JobState::Failed, EndCause::OutOfMemory, "out of memory"),
            KernelOutcome::LaunchFailed => {
                Move::end(JobState::Failed, EndCause::LaunchFailed, format!("launch failed: {message}"))
            }
            // The agent's message names the step (`environment build failed: <uv's error>`); the
            // stored end cause stays `launch_failed`: the kernel never ran.
            KernelOutcome::SetupFailed => {
                Move::end(JobState::Failed, EndCause::LaunchFailed, non_empty(message, "setup failed"))
            }
            // Handled above (the job is lost or requeued); kept total for the compiler.
            KernelOutcome::Fenced => {
                Move::end(JobState::Lost, EndCause::NodeLost, non_empty(message, "fenced by its agent"))
            }
        }
        .with_exit(main_exit);
        let reason = mv.reason.clone();
        let finished: Vec<(String, KernelKey)> = job
            .attempt
            .bindings
            .iter()
            .enumerate()
            .filter(|(i, _)| job.attempt.ends[*i].is_some())
            .map(|(i, b)| (b.node.clone(), job.key(i as u32)))
            .collect();
        // Other kernels of a multi-node job that failed, or whose main ended, are stopped;
        // their reports are then unwanted.
        let stops = self.stop_commands(st, key.job_id, &reason);
        match self.transition(st, key.job_id, mv, vec![kernel_exit]).await {
            Ok(()) => {
                st.send_all(stops);
                for (n, k) in finished {
                    st.send(&n, ManagerMessage::Forget { key: k });
                }
            }
            Err(e) => {
                tracing::warn!(job = key.job_id, "cannot record kernel end: {e}");
                // Not recorded: try again later (and let a repeated report do so too).
                if let Some(j) = st.job_mut(key.job_id) {
                    j.attempt.ends[key.index as usize] = None;
                }
                if worth_retrying(&e) {
                    let message = message.to_string();
                    let (exit_code, signal) = (exit.code, exit.signal);
                    st.defer(Deferred::Finished { node: node.to_string(), key, outcome, exit_code, signal, message });
                }
            }
        }
    }

    /// Applies the deferred reports again; those that fail once more stay deferred.
    pub async fn retry_deferred(&self) {
        let mut st = self.lock().await;
        let todo = st.take_deferred();
        if todo.is_empty() {
            return;
        }
        tracing::info!(reports = todo.len(), "applying agent reports the store refused before");
        for d in todo {
            match d {
                Deferred::Started { node, key } => {
                    self.kernel_started(&mut st, &node, key).await;
                }
                Deferred::Finished { node, key, outcome, exit_code, signal, message } => {
                    let exit = Exit { code: exit_code, signal };
                    self.kernel_finished(&mut st, &node, key, outcome, exit, &message).await;
                }
                Deferred::Lost { job_id, node, cause, reason } => {
                    self.lose_job(&mut st, job_id, &node, cause, reason).await;
                }
            }
        }
    }
}

fn non_empty(s: &str, default: &str) -> String {
    if s.is_empty() { default.to_string() } else { s.to_string() }
}
