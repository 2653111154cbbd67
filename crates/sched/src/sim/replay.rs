//! The replay's state: the trace's jobs, the node ledgers, the pending and running sets a
//! pass reads, the completion heap and the fair-share books. Passes are applied to it through
//! [`PassTarget`] (`apply.rs`, as in the manager); what only a replay does is here: a run
//! stops at once (completion or preemption), and a requeued job goes back to `pending`.
//!
//! Run-time predictions (`predict.rs`) are made when a job is submitted or requeued, from the
//! run times of the jobs that completed before; each job's first prediction is kept beside its
//! true run time for the error figures. A preempted job keeps its progress up to its last
//! checkpoint (`SimOptions::checkpoint_interval_ms`) and its attained service (`las`).

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};
use std::sync::Arc;

use berth_model::{JobId, NumaPolicy, ResourceRequest};
use rustc_hash::FxHashMap;

use super::cluster::QUEUE;
use super::policy::{SimOptions, Victims};
use super::trace::Trace;
use crate::apply::{self, PassTarget};
use crate::predict::{JobKey, Predictor};
use crate::{
    Millis, NodeLedger, PendingJob, PendingSet, Preempt, PreemptAction, RunningJob, RunningSet, Start, Untried,
    UsageBook, Waiting, service, size_milli,
};

/// Per trace job, what the replay tracks.
pub(super) struct JobState {
    pub request: ResourceRequest,
    /// Nodes of its gang; 0 for a job too big for the cluster (never submitted).
    pub nodes: u32,
    /// Units of the measured resource (GPUs or CPUs) the job holds while it runs.
    pub amount: f64,
    pub remaining_ms: Millis,
    pub first_start: Option<Millis>,
    pub started_at: Millis,
    pub end: Option<Millis>,
    /// Bumped when a run stops early: completions of older runs are stale.
    pub generation: u32,
    /// Index in `running_idx` while the job runs.
    pub run_slot: usize,
    pub user: usize,
    pub blocked_passes: u32,
    /// Service received by earlier runs, device-seconds (`las`).
    pub attained: u64,
    /// Progress kept by its last checkpoint (run time it does not have to run again).
    pub saved_ms: Millis,
    /// The prediction it was first submitted with.
    pub first_estimate: Option<Millis>,
}

impl JobState {
    pub fn new(request: ResourceRequest, nodes: u32, amount: f64, duration_ms: Millis, user: usize) -> Self {
        JobState {
            request,
            nodes,
            amount,
            remaining_ms: duration_ms,
            first_start: None,
            started_at: 0,
            end: None,
            generation: 0,
            run_slot: usize::MAX,
            user,
            blocked_passes: 0,
            attained: 0,
            saved_ms: 0,
            first_estimate: None,
        }
    }
}

/// A completion: (time, seq, job index, generation).
type Completion = Reverse<(Millis, u64, usize, u32)>;

pub(super) struct Replay<'t> {
    trace: &'t Trace,
    opts: &'t SimOptions,
    victims: Victims,
    queue: Arc<str>,
    pub user_names: Vec<String>,
    pub jobs: Vec<JobState>,
    pub ledgers: Vec<NodeLedger>,
    /// Ledgers by node name: every start and end looks its bindings' nodes up.
    node_index: FxHashMap<String, usize>,
    /// Kept across passes: a pass reads only the jobs it tries (`schedule_set`).
    pub pending: PendingSet,
    /// Kept across passes too: backfill walks its ends as kept (`schedule_set`).
    pub running: RunningSet,
    /// The job index of each running job, in the order usage is charged (a job's slot is
    /// refilled by the last one when it stops, so that the figures add up in the same order
    /// from one build to the next).
    running_idx: Vec<usize>,
    pub completions: BinaryHeap<Completion>,
    seq: u64,
    pub usage: UsageBook,
    /// Run-time history of the jobs that completed.
    pub predictor: Predictor,
    /// Per user, its numbers in `usage` (user, project), once it was charged.
    usage_ids: Vec<Option<(u32, u32)>>,
    /// Resource-time held by runs that have stopped (the measured resource × ms).
    pub allocated: f64,
    pub preemptions: usize,
    pub cancelled: usize,
    /// Jobs done with: finished, cancelled by preemption, or too big to run.
    pub settled: usize,
}

impl<'t> Replay<'t> {
    pub fn new(
        trace: &'t Trace,
        opts: &'t SimOptions,
        victims: Victims,
        ordering: crate::Ordering,
        ledgers: Vec<NodeLedger>,
        jobs: Vec<JobState>,
        user_names: Vec<String>,
    ) -> Self {
        let node_index = ledgers.iter().enumerate().map(|(i, l)| (l.name().to_string(), i)).collect();
        let usage_ids = vec![None; user_names.len()];
        Replay {
            trace,
            opts,
            victims,
            queue: QUEUE.into(),
            user_names,
            jobs,
            ledgers,
            node_index,
            // Only the replayed queue's ordering is walked: the other indexes would cost every
            // arrival, start and requeue their updates for nothing.
            pending: PendingSet::indexing(&[ordering]),
            running: RunningSet::new(),
            running_idx: Vec::new(),
            completions: BinaryHeap::new(),
            seq: 0,
            usage: UsageBook::default(),
            predictor: Predictor::new(),
            usage_ids,
            allocated: 0.0,
            preemptions: 0,
            cancelled: 0,
            settled: 0,
        }
    }

    fn time_limit(&self, i: usize) -> Option<Millis> {
        if self.opts.time_limit_from_duration {
            Some(self.jobs[i].remaining_ms.max(1))
        } else {
            self.trace.jobs[i].time_limit_ms
        }
    }

    /// What job `i`'s history is looked up by.
    fn key(&self, i: usize) -> JobKey {
        let j = &self.jobs[i];
        JobKey { user: self.user_names[j.user].clone(), name: String::new(), size: size_milli(&j.request, j.nodes, 1) }
    }

    /// Job `i` joins the pending set.
    pub fn submit(&mut self, i: usize) {
        let limit = self.time_limit(i);
        let predicted = if self.opts.predict { self.predictor.predict(&self.key(i), limit) } else { None };
        let j = &mut self.jobs[i];
        // A requeued job has what its last checkpoint kept still to run.
        let estimate = predicted.map(|e| (e - j.saved_ms).max(1));
        if j.first_start.is_none() {
            j.first_estimate = estimate;
        }
        let j = &self.jobs[i];
        let user = &self.user_names[j.user];
        let job = PendingJob {
            id: i as JobId + 1,
            priority: self.trace.jobs[i].priority,
            queue: self.queue.clone(),
            request: j.request,
            nodes: j.nodes,
            numa: NumaPolicy::None,
            blocked_passes: 0,
            user: user.clone(),
            project: user.clone(),
            submitted_at: self.trace.jobs[i].submit_ms,
            time_limit_ms: limit,
            estimate_ms: estimate,
            attained: j.attained,
            image: None,
            kernels: 1,
            mounts: Vec::new(),
            data_on: Vec::new(),
            avoid: Vec::new(),
            constraint: None,
            exclusive: false,
            folders: false,
        };
        self.pending.insert(job);
    }

    /// Charges every running job's usage since `since` (or its start) to its user, who is
    /// also its project in a replay.
    pub fn charge_running(&mut self, since: Millis, now: Millis) {
        for &i in &self.running_idx {
            let add = self.jobs[i].amount * (now - self.jobs[i].started_at).min(now - since) as f64;
            let u = self.jobs[i].user;
            let ids = match self.usage_ids[u] {
                Some(ids) => ids,
                None => {
                    let name = &self.user_names[u];
                    let ids = (self.usage.users.id(name), self.usage.projects.id(name));
                    self.usage_ids[u] = Some(ids);
                    ids
                }
            };
            self.usage.add_ids(ids, add, now, self.opts.half_life_ms);
        }
    }

    /// Stops job `i`'s current run at `now`: out of `running`, its devices released, its
    /// resource-time counted.
    pub fn stop(&mut self, i: usize, now: Millis) {
        let slot = self.jobs[i].run_slot;
        self.running_idx.swap_remove(slot);
        if slot < self.running_idx.len() {
            self.jobs[self.running_idx[slot]].run_slot = slot;
        }
        if let Some(r) = self.running.remove(i as JobId + 1) {
            apply::release(self, &r.bindings);
        }
        let j = &mut self.jobs[i];
        j.run_slot = usize::MAX;
        j.generation += 1;
        self.allocated += j.amount * (now - j.started_at) as f64;
        j.attained = j.attained.saturating_add(service(size_milli(&j.request, j.nodes, 1), now - j.started_at));
    }

    /// Carries out a preemption at once: the victim stops, then is requeued (with what is
    /// left of it when checkpointed, else from the start) or cancelled.
    pub fn preempt(&mut self, p: &Preempt, now: Millis) {
        let i = (p.victim - 1) as usize;
        let ran = now - self.jobs[i].started_at;
        self.stop(i, now);
        self.preemptions += 1;
        match p.action {
            PreemptAction::Requeue => {
                let duration = self.trace.jobs[i].duration_ms;
                let j = &mut self.jobs[i];
                // Progress: what earlier runs kept, plus this run; kept up to the last
                // checkpoint (all of it when checkpointed exactly, none without checkpoints).
                let progress = (duration - j.remaining_ms + ran).min(duration);
                j.saved_ms = match (self.opts.checkpoint, self.opts.checkpoint_interval_ms) {
                    (true, _) => progress,
                    (false, Some(every)) if every > 0 => j.saved_ms.max(progress / every * every),
                    _ => 0,
                };
                j.remaining_ms = (duration - j.saved_ms).max(0);
                j.blocked_passes = 0;
                self.submit(i);
            }
            PreemptAction::Cancel => {
                self.jobs[i].end = Some(now);
                self.cancelled += 1;
                self.settled += 1;
            }
        }
    }

    /// Ends the runs due at `now` (stale completions of stopped runs are skipped); whether
    /// any ended.
    pub fn end_runs_due(&mut self, now: Millis) -> bool {
        let mut ended = false;
        while let Some(&Reverse((t, _, i, generation))) = self.completions.peek() {
            if t != now {
                break;
            }
            self.completions.pop();
            if self.jobs[i].generation != generation || self.jobs[i].run_slot == usize::MAX {
                continue;
            }
            self.stop(i, now);
            self.jobs[i].end = Some(now);
            self.jobs[i].remaining_ms = 0;
            self.settled += 1;
            ended = true;
            let key = self.key(i);
            self.predictor.observe(&key, self.trace.jobs[i].duration_ms);
        }
        ended
    }
}

impl PassTarget for Replay<'_> {
    fn ledger_mut(&mut self, node: &str) -> Option<&mut NodeLedger> {
        self.node_index.get(node).map(|&i| &mut self.ledgers[i])
    }

    fn is_pending(&self, job: JobId) -> bool {
        self.pending.get(job).is_some()
    }

    fn stoppable(&self, job: JobId) -> bool {
        self.jobs.get((job - 1) as usize).is_some_and(|j| j.run_slot != usize::MAX)
    }

    /// None: a victim stops at once.
    fn awaiting_victims(&self) -> BTreeSet<JobId> {
        BTreeSet::new()
    }

    /// The job's count is kept in both places alike, so an unchanged count (most of a deep
    /// queue's, pass after pass) costs no look-up in the set.
    fn waits(&mut self, w: Waiting) {
        if let Some(j) = self.jobs.get_mut((w.job - 1) as usize)
            && j.blocked_passes != w.blocked_passes
        {
            j.blocked_passes = w.blocked_passes;
            self.pending.set_blocked_passes(w.job, w.blocked_passes);
        }
    }

    /// Only the jobs the pass tried can have a new count, so a deep queue costs nothing here.
    fn untried(&mut self, _: &Untried) {}

    fn started(&mut self, s: Start, _borrowed: bool, now: Millis) {
        let i = (s.job - 1) as usize;
        let estimate_ms = self.pending.remove(s.job).and_then(|p| p.estimate_ms);
        let time_limit_ms = self.time_limit(i);
        let j = &mut self.jobs[i];
        j.first_start.get_or_insert(now);
        j.started_at = now;
        j.run_slot = self.running_idx.len();
        let tj = &self.trace.jobs[i];
        let user = &self.user_names[j.user];
        self.running.insert(RunningJob {
            borrowed: false,
            id: s.job,
            queue: QUEUE.to_string(),
            priority: tj.priority,
            user: user.clone(),
            project: user.clone(),
            bindings: s.bindings,
            submitted_at: tj.submit_ms,
            started_at: now,
            time_limit_ms,
            estimate_ms,
            attained: j.attained,
            preemptible: match self.victims {
                Victims::UpToPriority(max) => tj.priority <= max,
                Victims::All => true,
                Victims::None => false,
            },
        });
        self.running_idx.push(i);
        self.seq += 1;
        self.completions.push(Reverse((now + j.remaining_ms, self.seq, i, j.generation)));
    }
}
