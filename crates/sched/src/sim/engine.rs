//! The event loop.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

use berth_model::{Binding, NumaPolicy, ResourceRequest, Topology};

use super::metrics::{Done, Metrics, Totals, compute};
use super::trace::{Trace, TraceFormat, TraceJob};
use crate::{
    FairShare, HeadOfLine, Millis, NodeLedger, Ordering, PassInput, PendingJob, PreemptAction, Preemption, QueueConfig,
    RunningJob, Scoring, decay_usage, schedule,
};

const QUEUE: &str = "sim";

/// The simulated cluster: identical nodes, one NUMA node each (`n0000`, `n0001`, …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cluster {
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub cpus_per_node: u32,
    pub mem_per_node: u64,
}

impl Cluster {
    /// One ledger per node, all in the simulator's one queue.
    pub fn ledgers(&self) -> Vec<NodeLedger> {
        let topo = Topology::synthetic(1, self.cpus_per_node, self.mem_per_node, self.gpus_per_node);
        (0..self.nodes).map(|i| NodeLedger::new(node_name(i), QUEUE, topo.clone())).collect()
    }

    /// What each kernel of a trace job asks for and on how many nodes (a gang when > 1).
    ///
    /// GPU job of g GPUs on G-GPU nodes: ⌈g/G⌉ nodes with ⌈g/nodes⌉ whole GPUs each, plus
    /// ⌊C/G⌋ CPUs (at least one) and mem/G per GPU. CPU job of p processors on C-CPU nodes:
    /// ⌈p/C⌉ nodes with ⌈p/nodes⌉ CPUs each and mem/C per CPU. Errors when the job is larger
    /// than the cluster.
    pub fn shape(&self, job: &TraceJob) -> Result<(ResourceRequest, u32), String> {
        let c = self.cpus_per_node.max(1) as u64;
        let per_share = |n: u64, of: u64| (self.mem_per_node as u128 * n as u128 / of as u128) as u64;
        let (req, nodes) = if job.gpus > 0 {
            let g = self.gpus_per_node as u64;
            if g == 0 {
                return Err(format!("needs {} GPUs and the nodes have none", job.gpus));
            }
            let want = job.gpus as u64;
            let nodes = want.div_ceil(g);
            let per = want.div_ceil(nodes);
            let cpus = (per * (c / g).max(1)).min(c);
            (ResourceRequest { cpu_milli: cpus * 1000, mem_bytes: per_share(per, g), gpu_milli: per * 1000 }, nodes)
        } else {
            let want = job.cpus.max(1) as u64;
            let nodes = want.div_ceil(c);
            let per = want.div_ceil(nodes);
            (ResourceRequest { cpu_milli: per * 1000, mem_bytes: per_share(per, c), gpu_milli: 0 }, nodes)
        };
        if nodes > self.nodes as u64 {
            let what = if job.gpus > 0 { format!("{} GPUs", job.gpus) } else { format!("{} CPUs", job.cpus) };
            return Err(format!("needs {what} = {nodes} nodes, the cluster has {}", self.nodes));
        }
        Ok((req, nodes as u32))
    }
}

fn node_name(i: u32) -> String {
    format!("n{i:05}")
}

/// A named queue policy of `berth sim` (`--policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// fifo + strict
    Fifo,
    /// lifo + strict
    Lifo,
    /// fifo + skip-after-10
    Skip,
    /// fifo + EASY backfill
    Backfill,
    /// drf + backfill
    Drf,
    /// fair-share + backfill
    FairShare,
    /// fifo + backfill + spread scoring
    Spread,
    /// priority bands + backfill + preemption (requeue); needs a trace with priorities
    Preempt,
}

impl Policy {
    pub const ALL: [Policy; 8] = [
        Policy::Fifo,
        Policy::Lifo,
        Policy::Skip,
        Policy::Backfill,
        Policy::Drf,
        Policy::FairShare,
        Policy::Spread,
        Policy::Preempt,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Policy::Fifo => "fifo",
            Policy::Lifo => "lifo",
            Policy::Skip => "skip",
            Policy::Backfill => "backfill",
            Policy::Drf => "drf",
            Policy::FairShare => "fair-share",
            Policy::Spread => "spread",
            Policy::Preempt => "preempt",
        }
    }

    /// The queue configuration this policy stands for.
    pub fn queue_config(self, opts: &SimOptions) -> QueueConfig {
        let mut q = QueueConfig::new(QUEUE);
        q.default_time_limit_ms = opts.default_time_limit_ms;
        q.head_of_line = HeadOfLine::Backfill;
        match self {
            Policy::Fifo => q.head_of_line = HeadOfLine::Strict,
            Policy::Lifo => {
                q.ordering = Ordering::Lifo;
                q.head_of_line = HeadOfLine::Strict;
            }
            Policy::Skip => q.head_of_line = HeadOfLine::SkipAfter(10),
            Policy::Backfill => {}
            Policy::Drf => q.ordering = Ordering::Drf,
            Policy::FairShare => q.ordering = Ordering::FairShare,
            Policy::Spread => q.scoring = Scoring::Spread,
            Policy::Preempt => {
                q.preemption = Some(Preemption { action: PreemptAction::Requeue, min_runtime_ms: opts.min_runtime_ms })
            }
        }
        q
    }
}

impl std::str::FromStr for Policy {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Policy::ALL.into_iter().find(|p| p.name() == s).ok_or_else(|| {
            let names: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
            format!("unknown policy `{s}`: use one of {}", names.join(", "))
        })
    }
}

/// Replay options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimOptions {
    /// The queue's default time limit (backfill's estimate for jobs without one: every Philly
    /// job unless `time_limit_from_duration`). Jobs are never killed at it.
    pub default_time_limit_ms: Millis,
    /// Oracle: give every job its true duration as its time limit (perfect estimates).
    pub time_limit_from_duration: bool,
    /// Fair-share usage half-life.
    pub half_life_ms: Millis,
    /// A requeued (preempted) job resumes with its remaining time (checkpointed) instead of
    /// starting over.
    pub checkpoint: bool,
    /// `preempt` policy: a job that has run less than this is never a victim.
    pub min_runtime_ms: Millis,
    /// `preempt` policy: jobs of priority ≤ this are preemptible.
    pub preemptible_max_priority: i32,
}

impl Default for SimOptions {
    fn default() -> Self {
        Self {
            default_time_limit_ms: 3_600_000,
            time_limit_from_duration: false,
            half_life_ms: 7 * 86_400_000,
            checkpoint: false,
            min_runtime_ms: 600_000,
            preemptible_max_priority: 0,
        }
    }
}

/// Why a replay could not run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    #[error("policy {policy}: {why}")]
    NotApplicable { policy: &'static str, why: String },
    #[error("the cluster is empty: give it at least one node with CPUs")]
    EmptyCluster,
}

/// Per trace job, what the replay tracks.
struct JobState {
    request: ResourceRequest,
    nodes: u32,
    /// Units of the measured resource (GPUs or CPUs) the job holds while it runs.
    amount: f64,
    remaining_ms: Millis,
    first_start: Option<Millis>,
    started_at: Millis,
    end: Option<Millis>,
    /// Bumped when a run stops early: completions of older runs are stale.
    generation: u32,
    /// Index in `running` while the job runs.
    run_slot: usize,
    user: usize,
    blocked_passes: u32,
    started_now: bool,
    /// Index in `pending` while the job waits.
    pending_slot: usize,
}

/// What happened to one trace job in a replay (times in trace milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct JobOutcome {
    pub submit_ms: Millis,
    /// First start (`None`: never started, or skipped as too big).
    pub start_ms: Option<Millis>,
    /// End of its last run (completion, or cancellation by preemption).
    pub end_ms: Option<Millis>,
    pub duration_ms: Millis,
    /// Whether it ran to completion.
    pub finished: bool,
}

/// Replays `trace` on `cluster` under `policy`. Deterministic.
pub fn simulate(trace: &Trace, cluster: &Cluster, policy: Policy, opts: &SimOptions) -> Result<Metrics, SimError> {
    simulate_detailed(trace, cluster, policy, opts).map(|(m, _)| m)
}

/// [`simulate`], with each trace job's outcome (in trace order).
pub fn simulate_detailed(
    trace: &Trace,
    cluster: &Cluster,
    policy: Policy,
    opts: &SimOptions,
) -> Result<(Metrics, Vec<JobOutcome>), SimError> {
    simulate_observed(trace, cluster, policy, opts, &mut |_| {})
}

/// How far a replay has got, for a caller's progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimProgress {
    /// Trace jobs that are done with: finished, cancelled by preemption, or too big to run.
    pub settled: usize,
    /// Trace jobs in the replay.
    pub total: usize,
}

/// How many progress reports a replay makes at most (besides the last): often enough for a
/// smooth bar, rarely enough to cost nothing next to the passes.
const PROGRESS_STEPS: usize = 500;

/// [`simulate_detailed`], telling `on_progress` how far it has got now and then and once at
/// the end. The crate stays pure: the caller decides what to do with it (the CLI draws a bar).
pub fn simulate_observed(
    trace: &Trace,
    cluster: &Cluster,
    policy: Policy,
    opts: &SimOptions,
    on_progress: &mut dyn FnMut(SimProgress),
) -> Result<(Metrics, Vec<JobOutcome>), SimError> {
    if cluster.nodes == 0 || cluster.cpus_per_node == 0 {
        return Err(SimError::EmptyCluster);
    }
    if policy == Policy::Preempt && !trace.has_priorities {
        return Err(SimError::NotApplicable {
            policy: policy.name(),
            why: "the trace has no priorities, so nothing may preempt anything".into(),
        });
    }
    let queues = [policy.queue_config(opts)];
    let gpu_trace = trace.format == TraceFormat::Philly || trace.jobs.iter().any(|j| j.gpus > 0);
    let mut ledgers = cluster.ledgers();
    let node_index: BTreeMap<String, usize> =
        ledgers.iter().enumerate().map(|(i, l)| (l.name().to_string(), i)).collect();

    let mut user_ids: BTreeMap<&str, usize> = BTreeMap::new();
    let mut user_names: Vec<String> = Vec::new();
    let mut jobs: Vec<JobState> = Vec::with_capacity(trace.jobs.len());
    let mut skipped = 0usize;
    let mut big = Vec::with_capacity(trace.jobs.len());
    for tj in &trace.jobs {
        let user = *user_ids.entry(tj.user.as_str()).or_insert_with(|| {
            user_names.push(tj.user.clone());
            user_names.len() - 1
        });
        let (request, nodes, ok) = match cluster.shape(tj) {
            Ok((r, n)) => (r, n, true),
            Err(_) => {
                skipped += 1;
                (ResourceRequest::default(), 0, false)
            }
        };
        let amount = if gpu_trace { request.gpu_milli as f64 / 1000.0 } else { request.cpu_milli as f64 / 1000.0 }
            * nodes as f64;
        big.push(if gpu_trace { tj.gpus >= 8 } else { nodes >= 8 });
        jobs.push(JobState {
            request,
            nodes: if ok { nodes } else { 0 },
            amount,
            remaining_ms: tj.duration_ms,
            first_start: None,
            started_at: 0,
            end: None,
            generation: 0,
            run_slot: usize::MAX,
            user,
            blocked_passes: 0,
            started_now: false,
            pending_slot: usize::MAX,
        });
    }
    let queue_name: std::sync::Arc<str> = QUEUE.into();
    let pending_job = |i: usize, j: &JobState| PendingJob {
        id: i as i64 + 1,
        priority: trace.jobs[i].priority,
        queue: queue_name.clone(),
        request: j.request,
        nodes: j.nodes,
        numa: NumaPolicy::None,
        blocked_passes: 0,
        user: user_names[j.user].clone(),
        project: user_names[j.user].clone(),
        submitted_at: trace.jobs[i].submit_ms,
        time_limit_ms: if opts.time_limit_from_duration {
            Some(j.remaining_ms.max(1))
        } else {
            trace.jobs[i].time_limit_ms
        },
        image: None,
        kernels: 1,
        mounts: Vec::new(),
    };

    let mut pending: Vec<PendingJob> = Vec::new();
    let mut running: Vec<RunningJob> = Vec::new();
    let mut running_idx: Vec<usize> = Vec::new();
    // Completions: (time, seq, job index, generation).
    let mut heap: BinaryHeap<Reverse<(Millis, u64, usize, u32)>> = BinaryHeap::new();
    let mut seq = 0u64;
    let mut next_arrival = 0usize;
    let mut fair = FairShare::default();
    let use_fair = queues[0].ordering == Ordering::FairShare;
    let mut last_accounting: Millis = 0;
    let (mut allocated, mut preemptions, mut cancelled, mut passes) = (0.0f64, 0usize, 0usize, 0u64);
    let total = trace.jobs.len();
    let step = (total / PROGRESS_STEPS).max(1);
    let mut settled = skipped;
    let mut next_report = 0usize;

    // Stops job `i`'s current run at `now`: out of `running`, bindings released.
    #[allow(clippy::too_many_arguments)]
    fn stop(
        i: usize,
        now: Millis,
        jobs: &mut [JobState],
        running: &mut Vec<RunningJob>,
        running_idx: &mut Vec<usize>,
        ledgers: &mut [NodeLedger],
        node_index: &BTreeMap<String, usize>,
        allocated: &mut f64,
    ) {
        let slot = jobs[i].run_slot;
        let r = running.swap_remove(slot);
        running_idx.swap_remove(slot);
        if slot < running.len() {
            jobs[running_idx[slot]].run_slot = slot;
        }
        for b in &r.bindings {
            ledgers[node_index[&b.node]].release(b);
        }
        let j = &mut jobs[i];
        j.run_slot = usize::MAX;
        j.generation += 1;
        *allocated += j.amount * (now - j.started_at) as f64;
    }

    loop {
        let t_arrival = trace.jobs.get(next_arrival).map(|j| j.submit_ms);
        let t_done = heap.peek().map(|Reverse((t, ..))| *t);
        let now = match (t_arrival, t_done) {
            (None, None) => break,
            (Some(a), None) => a,
            (None, Some(d)) => d,
            (Some(a), Some(d)) => a.min(d),
        };
        // Fair-share usage: decay, then add what ran since the last event (the jobs that end
        // now are still in `running`).
        // Every user is their own project in a replay: both maps are kept alike, in place
        // (no name is copied once a user has usage).
        if use_fair {
            let dt = now - last_accounting;
            for map in [&mut fair.usage_by_user, &mut fair.usage_by_project] {
                for v in map.values_mut() {
                    *v = decay_usage(*v, dt, opts.half_life_ms);
                }
            }
            for (r, &i) in running.iter().zip(&running_idx) {
                let add = jobs[i].amount * (now - jobs[i].started_at).min(dt) as f64;
                for map in [&mut fair.usage_by_user, &mut fair.usage_by_project] {
                    match map.get_mut(&r.user) {
                        Some(v) => *v += add,
                        None => {
                            map.insert(r.user.clone(), add);
                        }
                    }
                }
            }
            last_accounting = now;
        }
        let mut changed = false;
        while let Some(&Reverse((t, _, i, generation))) = heap.peek() {
            if t != now {
                break;
            }
            heap.pop();
            if jobs[i].generation != generation || jobs[i].run_slot == usize::MAX {
                continue;
            }
            stop(i, now, &mut jobs, &mut running, &mut running_idx, &mut ledgers, &node_index, &mut allocated);
            jobs[i].end = Some(now);
            jobs[i].remaining_ms = 0;
            settled += 1;
            changed = true;
        }
        if settled >= next_report {
            on_progress(SimProgress { settled, total });
            next_report = settled + step;
        }
        while next_arrival < trace.jobs.len() && trace.jobs[next_arrival].submit_ms == now {
            let i = next_arrival;
            next_arrival += 1;
            if jobs[i].nodes == 0 {
                continue;
            }
            jobs[i].pending_slot = pending.len();
            pending.push(pending_job(i, &jobs[i]));
            changed = true;
        }
        if !changed || pending.is_empty() {
            continue;
        }
        // One pass; a pass that preempted gets a follow-up at the same instant so that the
        // job the victims made room for starts now (bounded: no loops).
        for _round in 0..3 {
            let out = schedule(&PassInput {
                queues: &queues,
                nodes: &ledgers,
                pending: &pending,
                running: &running,
                fair_share: &fair,
                quotas: &crate::NO_QUOTAS,
                now,
            });
            passes += 1;
            for p in &out.preemptions {
                let i = (p.victim - 1) as usize;
                if i >= jobs.len() || jobs[i].run_slot == usize::MAX {
                    continue;
                }
                let ran = now - jobs[i].started_at;
                stop(i, now, &mut jobs, &mut running, &mut running_idx, &mut ledgers, &node_index, &mut allocated);
                preemptions += 1;
                match p.action {
                    PreemptAction::Requeue => {
                        let j = &mut jobs[i];
                        j.remaining_ms =
                            if opts.checkpoint { (j.remaining_ms - ran).max(0) } else { trace.jobs[i].duration_ms };
                        j.blocked_passes = 0;
                        j.pending_slot = pending.len();
                        let pj = pending_job(i, &jobs[i]);
                        pending.push(pj);
                    }
                    PreemptAction::Cancel => {
                        jobs[i].end = Some(now);
                        cancelled += 1;
                        settled += 1;
                    }
                }
            }
            for s in &out.starts {
                let i = (s.job - 1) as usize;
                if i >= jobs.len() || jobs[i].run_slot != usize::MAX || jobs[i].started_now {
                    continue;
                }
                if !allocate_all(&mut ledgers, &node_index, &s.bindings) {
                    continue;
                }
                let j = &mut jobs[i];
                j.started_now = true;
                j.first_start.get_or_insert(now);
                j.started_at = now;
                j.run_slot = running.len();
                let tj = &trace.jobs[i];
                let preemptible = policy == Policy::Preempt && tj.priority <= opts.preemptible_max_priority;
                running.push(RunningJob {
                    borrowed: false,
                    id: s.job,
                    queue: QUEUE.to_string(),
                    priority: tj.priority,
                    user: user_names[j.user].clone(),
                    project: user_names[j.user].clone(),
                    bindings: s.bindings.clone(),
                    started_at: now,
                    time_limit_ms: if opts.time_limit_from_duration {
                        Some(j.remaining_ms.max(1))
                    } else {
                        tj.time_limit_ms
                    },
                    preemptible,
                });
                running_idx.push(i);
                seq += 1;
                heap.push(Reverse((now + j.remaining_ms, seq, i, j.generation)));
            }
            // Only the jobs the pass tried can have a new count (untried ones keep theirs), so
            // a deep queue costs nothing here.
            for w in &out.waiting {
                if let Some(j) = jobs.get_mut((w.job - 1) as usize) {
                    j.blocked_passes = w.blocked_passes;
                    if let Some(p) = pending.get_mut(j.pending_slot) {
                        p.blocked_passes = w.blocked_passes;
                    }
                }
            }
            let preempted = !out.preemptions.is_empty();
            let started = !out.starts.is_empty();
            if started || preempted {
                let mut kept = 0;
                pending.retain_mut(|p| {
                    let j = &mut jobs[(p.id - 1) as usize];
                    let keep = !std::mem::take(&mut j.started_now);
                    j.pending_slot = if keep { kept } else { usize::MAX };
                    kept += keep as usize;
                    keep
                });
            }
            if !preempted || pending.is_empty() {
                break;
            }
        }
    }

    on_progress(SimProgress { settled, total });

    let mut done = Vec::with_capacity(jobs.len());
    let mut unfinished = 0usize;
    for (i, j) in jobs.iter().enumerate() {
        if j.nodes == 0 {
            continue;
        }
        match (j.first_start, j.end) {
            (Some(first_start), Some(end)) if j.remaining_ms == 0 => done.push(Done {
                submit: trace.jobs[i].submit_ms,
                first_start,
                end,
                duration: trace.jobs[i].duration_ms,
                user: j.user,
                big: big[i],
            }),
            (_, Some(_)) => {} // cancelled
            _ => unfinished += 1,
        }
    }
    let outcomes = jobs
        .iter()
        .enumerate()
        .map(|(i, j)| JobOutcome {
            submit_ms: trace.jobs[i].submit_ms,
            start_ms: j.first_start,
            end_ms: j.end,
            duration_ms: trace.jobs[i].duration_ms,
            finished: j.nodes > 0 && j.end.is_some() && j.remaining_ms == 0,
        })
        .collect();
    let per_node = if gpu_trace { cluster.gpus_per_node } else { cluster.cpus_per_node };
    let metrics = compute(
        &done,
        Totals {
            policy: policy.name().to_string(),
            jobs: trace.jobs.len(),
            skipped_too_big: skipped,
            unfinished,
            cancelled,
            resource: if gpu_trace { "gpu" } else { "cpu" },
            allocated,
            capacity: per_node as f64 * cluster.nodes as f64,
            first_submit: trace.jobs.first().map(|j| j.submit_ms).unwrap_or(0),
            users: user_names.len(),
            preemptions,
            passes,
        },
    );
    Ok((metrics, outcomes))
}

/// Allocates every binding of a start, or none (a start the ledgers refuse stays pending).
fn allocate_all(ledgers: &mut [NodeLedger], node_index: &BTreeMap<String, usize>, bindings: &[Binding]) -> bool {
    for (k, b) in bindings.iter().enumerate() {
        let ok = node_index.get(&b.node).is_some_and(|&n| ledgers[n].allocate(b).is_ok());
        if !ok {
            for done in &bindings[..k] {
                ledgers[node_index[&done.node]].release(done);
            }
            return false;
        }
    }
    true
}

/// The jobs of a trace that no node shape of `cluster` can hold, with why (file line first).
pub fn too_big(trace: &Trace, cluster: &Cluster) -> Vec<(usize, String)> {
    trace.jobs.iter().filter_map(|j| cluster.shape(j).err().map(|e| (j.line, e))).collect()
}
