//! Job state changes shared by the API, the agent hub and the heartbeat checker.
//!
//! Each function runs with the state lock held, writes the change to the store first, and
//! only then updates memory and sends commands, so a crash never leaves an action the store
//! does not know about. A failed compare-and-set means someone else already moved the job:
//! the event is stale and is dropped (this is what makes duplicate agent reports harmless).
//! A report whose change the store refused for a reason that may pass is kept instead
//! (`deferred.rs`) and applied again by [`Manager::retry_deferred`] on every tick of the
//! scheduling loop.

use berth_model::protocol::{KernelKey, KernelOutcome, ManagerMessage};
use berth_model::{JobId, JobState};
use berth_store::{Change, StoreError};
use jiff::Timestamp;

use crate::deferred::{Deferred, worth_retrying};
use crate::manager::Manager;
use crate::state::{KernelEnd, State};

/// How long an agent lets a kernel stop before it kills it.
pub const STOP_GRACE_MS: u64 = 10_000;

impl Manager {
    /// Writes `job_id`'s move to `to` (plus `extra` changes) and mirrors it in memory. Ends,
    /// requeues and ledger bookkeeping are handled here; sending commands is the caller's.
    pub async fn transition(
        &self,
        st: &mut State,
        job_id: JobId,
        to: JobState,
        reason: String,
        exit_code: Option<i32>,
        mut extra: Vec<Change>,
    ) -> Result<(), StoreError> {
        let Some(job) = st.jobs.get(&job_id) else {
            return Err(StoreError::NotFound(format!("job {job_id}")));
        };
        let from = job.state;
        let now = Timestamp::now();
        // A job that gives its resources back is charged for them (fair share), in the same
        // batch as its state change: O(1), one row per user and project.
        let usage = if from.holds_resources() && (to.is_terminal() || to == JobState::Pending) {
            let now_ms = now.as_millisecond();
            let amount = job.usage_rate() * (now_ms - job.accounted_ms).max(0) as f64 / 1000.0;
            st.usage.charge(&[(&job.user, &job.account(), amount)], now_ms, self.fair_share.half_life_ms)
        } else {
            Vec::new()
        };
        extra.extend(usage.iter().cloned().map(Change::Usage));
        extra.push(Change::Transition { job_id, from, to, at: now, reason: reason.clone(), exit_code });
        self.store.apply(&extra).await?;
        st.usage.set(&usage);
        let job = st.jobs.get_mut(&job_id).expect("checked above");
        job.state = to;
        job.reason = Some(reason);
        if to == JobState::Running && job.started_at.is_none() {
            job.started_at = Some(now);
        }
        if to.is_terminal() || to == JobState::Pending {
            let bindings = std::mem::take(&mut job.bindings);
            if to == JobState::Pending {
                job.attempt += 1;
                job.ends.clear();
                job.unstarted.clear();
                job.started_at = None;
                job.pending_reason = None;
                job.blocked_passes = 0;
                job.preempt = None;
                job.placed_at = None;
                job.expected_start = None;
            }
            if from.holds_resources() {
                st.release(&bindings);
            }
            if to.is_terminal() {
                st.jobs.remove(&job_id);
            }
            self.wake.notify_one();
        }
        Ok(())
    }

    /// `StopKernel` commands for every kernel of the job whose end is not recorded yet, to
    /// send once the state change that calls for them is stored.
    pub fn stop_commands(&self, st: &State, job_id: JobId, reason: &str) -> Vec<(String, ManagerMessage)> {
        let Some(job) = st.jobs.get(&job_id) else { return Vec::new() };
        let mut out = Vec::new();
        for (i, b) in job.bindings.iter().enumerate() {
            if job.ends.get(i).is_some_and(|e| e.is_none()) {
                let msg = ManagerMessage::StopKernel {
                    cmd_id: self.next_id(),
                    key: job.key(i as u32),
                    reason: reason.to_string(),
                    grace_ms: STOP_GRACE_MS,
                };
                out.push((b.node.clone(), msg));
            }
        }
        out
    }

    /// The job's node(s) are gone: requeue it if it asked for that, otherwise end it in
    /// `to` (LOST on heartbeat timeout, FAILED when the agent no longer has the kernel). A
    /// job being cancelled just becomes CANCELLED.
    /// `node` is where the kernel was lost; kernels there are not stopped.
    pub async fn lose_job(&self, st: &mut State, job_id: JobId, node: &str, to: JobState, reason: String) {
        let Some(job) = st.jobs.get(&job_id) else { return };
        let (state, requeue, by, preempt) = (job.state, job.spec.requeue, job.cancelled_by.clone(), job.preempt);
        // Kernels on other, still connected nodes of a multi-node job must stop too.
        let mut stops = self.stop_commands(st, job_id, &reason);
        stops.retain(|(n, _)| n != node);
        let res = if let Some(p) = preempt.filter(|_| state == JobState::Terminating) {
            let (to, why) = preempted_end(p);
            self.transition(st, job_id, to, why, None, vec![]).await
        } else if state == JobState::Terminating {
            let who = by.unwrap_or_else(|| "?".into());
            self.transition(st, job_id, JobState::Cancelled, format!("cancelled by {who} ({reason})"), None, vec![])
                .await
        } else if requeue {
            self.transition(st, job_id, JobState::Pending, format!("requeued: {reason}"), None, vec![]).await
        } else {
            self.transition(st, job_id, to, reason.clone(), None, vec![]).await
        };
        match res {
            Ok(()) => send_all(st, stops),
            Err(e) => {
                tracing::warn!(job_id, "cannot record lost job: {e}");
                if worth_retrying(&e) {
                    st.deferred.push(Deferred::Lost { job_id, node: node.to_string(), to, reason });
                }
            }
        }
    }

    /// A kernel reported `Started` on `node`.
    pub async fn kernel_started(&self, st: &mut State, node: &str, key: KernelKey) -> bool {
        let Some(job) = st.jobs.get_mut(&key.job_id) else { return false };
        if job.attempt != key.attempt || !job.on_node(key.index, node) {
            return false;
        }
        job.unstarted.remove(&key.index);
        if matches!(job.state, JobState::Scheduled | JobState::Preparing) {
            let reason = format!("started on {node}");
            if let Err(e) = self.transition(st, key.job_id, JobState::Running, reason, None, vec![]).await {
                tracing::warn!(job = key.job_id, "cannot record start: {e}");
                if worth_retrying(&e) {
                    st.deferred.push(Deferred::Started { node: node.to_string(), key });
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
        exit_code: Option<i32>,
        message: &str,
    ) {
        let wanted = st.jobs.get(&key.job_id).is_some_and(|j| {
            j.attempt == key.attempt
                && j.on_node(key.index, node)
                && j.ends.get(key.index as usize).is_some_and(|e| e.is_none())
        });
        if !wanted {
            st.send(node, ManagerMessage::Forget { key });
            return;
        }
        if outcome == KernelOutcome::Fenced {
            // The agent lost the manager for half the heartbeat timeout and stopped its
            // kernels: the same outcome as the node being lost (requeue or LOST), reached
            // earlier because the partition healed before the manager's own timeout.
            let reason = format!("node {node} lost contact with the manager: {message}");
            self.lose_job(st, key.job_id, node, JobState::Lost, reason).await;
            st.send(node, ManagerMessage::Forget { key });
            return;
        }
        let job = st.jobs.get_mut(&key.job_id).expect("checked above");
        job.ends[key.index as usize] = Some(KernelEnd { outcome: Some(outcome), exit_code });
        let all_done = job.ends.iter().all(|e| e.is_some());
        let kernel_exit = Change::KernelExit { job_id: key.job_id, attempt: key.attempt, index: key.index, exit_code };
        if outcome == KernelOutcome::Succeeded && !all_done && key.index != 0 {
            // A sub kernel of a multi-node job is done; the job goes on until `main` ends
            // (like torchrun's agents, the workers may finish before the coordinator).
            if let Err(e) = self.store.apply(&[kernel_exit]).await {
                tracing::warn!(job = key.job_id, "cannot record kernel exit: {e}");
            }
            st.send(node, ManagerMessage::Forget { key });
            return;
        }
        let main_exit = job.ends[0].and_then(|e| e.exit_code).or(exit_code);
        let preempted = job.preempt.filter(|_| job.state == JobState::Terminating);
        let (to, reason) = match outcome {
            // A preempted job's kernel stopped (or failed while stopping): requeue or cancel it.
            o if o != KernelOutcome::Succeeded && preempted.is_some() => {
                preempted_end(preempted.expect("checked in the guard"))
            }
            // `main` ended: the job is over, and sub kernels still running are stopped.
            KernelOutcome::Succeeded => (JobState::Succeeded, "exit code 0".to_string()),
            KernelOutcome::Failed if !message.is_empty() => (JobState::Failed, message.to_string()),
            KernelOutcome::Failed => (JobState::Failed, format!("exit code {}", exit_code.unwrap_or(-1))),
            KernelOutcome::Timeout => (JobState::Timeout, non_empty(message, "time limit reached")),
            KernelOutcome::Stopped => match &job.cancelled_by {
                Some(who) => (JobState::Cancelled, format!("cancelled by {who}")),
                None => (JobState::Cancelled, non_empty(message, "stopped by the agent")),
            },
            KernelOutcome::OutOfMemory => (JobState::Failed, "out of memory".to_string()),
            // the agent's message already says `launch failed: ...`
            KernelOutcome::LaunchFailed if message.starts_with("launch failed") => {
                (JobState::Failed, message.to_string())
            }
            KernelOutcome::LaunchFailed => (JobState::Failed, format!("launch failed: {message}")),
            // Handled above (the job is lost or requeued); kept total for the compiler.
            KernelOutcome::Fenced => (JobState::Lost, non_empty(message, "fenced by its agent")),
        };
        let finished: Vec<(String, KernelKey)> = job
            .bindings
            .iter()
            .enumerate()
            .filter(|(i, _)| job.ends[*i].is_some())
            .map(|(i, b)| (b.node.clone(), job.key(i as u32)))
            .collect();
        // Other kernels of a multi-node job that failed, or whose main ended, are stopped;
        // their reports are then unwanted.
        let stops = self.stop_commands(st, key.job_id, &reason);
        match self.transition(st, key.job_id, to, reason, main_exit, vec![kernel_exit]).await {
            Ok(()) => {
                send_all(st, stops);
                for (n, k) in finished {
                    st.send(&n, ManagerMessage::Forget { key: k });
                }
            }
            Err(e) => {
                tracing::warn!(job = key.job_id, "cannot record kernel end: {e}");
                // Not recorded: try again later (and let a repeated report do so too).
                if let Some(j) = st.jobs.get_mut(&key.job_id) {
                    j.ends[key.index as usize] = None;
                }
                if worth_retrying(&e) {
                    let message = message.to_string();
                    st.deferred.push(Deferred::Finished { node: node.to_string(), key, outcome, exit_code, message });
                }
            }
        }
    }

    /// Applies the deferred reports again; those that fail once more stay deferred.
    pub async fn retry_deferred(&self) {
        let mut st = self.lock_state().await;
        if st.deferred.is_empty() {
            return;
        }
        let todo = std::mem::take(&mut st.deferred);
        tracing::info!(reports = todo.len(), "applying agent reports the store refused before");
        for d in todo {
            match d {
                Deferred::Started { node, key } => {
                    self.kernel_started(&mut st, &node, key).await;
                }
                Deferred::Finished { node, key, outcome, exit_code, message } => {
                    self.kernel_finished(&mut st, &node, key, outcome, exit_code, &message).await;
                }
                Deferred::Lost { job_id, node, to, reason } => {
                    self.lose_job(&mut st, job_id, &node, to, reason).await;
                }
            }
        }
    }
}

/// Where a preempted job goes once its kernels stopped, and why.
fn preempted_end(p: crate::state::PreemptedBy) -> (JobState, String) {
    match p.action {
        berth_sched::PreemptAction::Requeue => (JobState::Pending, format!("requeued: preempted by job {}", p.for_job)),
        berth_sched::PreemptAction::Cancel => {
            (JobState::Cancelled, format!("cancelled: preempted by job {}", p.for_job))
        }
    }
}

fn non_empty(s: &str, default: &str) -> String {
    if s.is_empty() { default.to_string() } else { s.to_string() }
}

/// Sends commands collected before a state change, now that it is stored.
pub fn send_all(st: &State, msgs: Vec<(String, ManagerMessage)>) {
    for (node, msg) in msgs {
        st.send(&node, msg);
    }
}
