//! The event loop of `berth sim`: arrivals (the sorted trace) and completions (a heap) in
//! virtual time, one pass after each instant's events, applied through `apply.rs` like the
//! manager's (`replay.rs` holds the state); then the figures.

use std::cmp::Reverse;
use std::collections::BTreeMap;

use super::cluster::Cluster;
use super::metrics::{Done, Metrics, Totals, compute};
use super::policy::{Policy, Setup, SimError, SimOptions};
use super::replay::{JobState, Replay};
use super::trace::{Trace, TraceFormat};
use crate::{FairShare, Millis, Ordering, PassInput, QueueConfig, apply, schedule_set_kinds};

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
    simulate_setup(trace, cluster, &policy.setup(opts), opts, on_progress)
}

/// [`simulate_observed`] under any [`Setup`] (`berth sim --config`: a queue of a manager's
/// config file).
pub fn simulate_setup(
    trace: &Trace,
    cluster: &Cluster,
    setup: &Setup,
    opts: &SimOptions,
    on_progress: &mut dyn FnMut(SimProgress),
) -> Result<(Metrics, Vec<JobOutcome>), SimError> {
    if cluster.nodes == 0 || cluster.cpus_per_node == 0 {
        return Err(SimError::EmptyCluster);
    }
    let queues = [setup.queue.clone()];
    let gpu_trace = trace.format == TraceFormat::Philly || trace.jobs.iter().any(|j| j.gpus > 0);
    let (jobs, user_names) = trace_jobs(trace, cluster, gpu_trace);
    let mut sim = Replay::new(trace, opts, setup.victims, setup.queue.ordering, cluster.ledgers(), jobs, user_names);
    // Jobs too big for the cluster are done with from the start.
    sim.settled = sim.jobs.iter().filter(|j| j.nodes == 0).count();

    let mut next_arrival = 0usize;
    let mut fair = FairShare { project_weights: setup.project_weights.clone(), ..FairShare::default() };
    let use_fair = queues[0].ordering == Ordering::FairShare;
    let mut last_accounting: Millis = 0;
    let mut passes = 0u64;
    let total = trace.jobs.len();
    let step = (total / PROGRESS_STEPS).max(1);
    let mut next_report = 0usize;

    loop {
        let t_arrival = trace.jobs.get(next_arrival).map(|j| j.submit_ms);
        let t_done = sim.completions.peek().map(|Reverse((t, ..))| *t);
        let now = match (t_arrival, t_done) {
            (None, None) => break,
            (Some(a), None) => a,
            (None, Some(d)) => d,
            (Some(a), Some(d)) => a.min(d),
        };
        // Fair-share usage: decay, then add what ran since the last event (the jobs that end
        // now are still running).
        if use_fair {
            sim.usage.settle(now, opts.half_life_ms);
            sim.charge_running(last_accounting, now);
            last_accounting = now;
        }
        let mut changed = sim.end_runs_due(now);
        if sim.settled >= next_report {
            on_progress(SimProgress { settled: sim.settled, total });
            next_report = sim.settled + step;
        }
        while next_arrival < trace.jobs.len() && trace.jobs[next_arrival].submit_ms == now {
            let i = next_arrival;
            next_arrival += 1;
            if sim.jobs[i].nodes > 0 {
                sim.submit(i);
                changed = true;
            }
        }
        if !changed || sim.pending.is_empty() {
            continue;
        }
        if use_fair {
            sim.usage.fill(&mut fair, now, opts.half_life_ms);
        }
        passes += run_passes(&mut sim, &queues, &fair, now);
    }

    on_progress(SimProgress { settled: sim.settled, total });
    Ok((figures(trace, cluster, &setup.name, gpu_trace, &sim, passes), outcomes(trace, &sim.jobs)))
}

/// One pass at `now`, applied; a pass that preempted gets a follow-up at the same instant so
/// that the job the victims made room for starts now (bounded: no loops). Returns how many
/// passes ran.
fn run_passes(sim: &mut Replay, queues: &[QueueConfig], fair: &FairShare, now: Millis) -> u64 {
    let mut passes = 0;
    for _round in 0..3 {
        let input = PassInput {
            queues,
            nodes: &sim.ledgers,
            pending: &[],
            running: &[],
            fair_share: fair,
            quotas: &crate::NO_QUOTAS,
            now,
        };
        // A replay reads no reason's message: the pass writes none.
        let out = schedule_set_kinds(&input, &sim.pending, &sim.running);
        passes += 1;
        let preempted = !out.preemptions.is_empty();
        // Starts leave the pending set as they are applied (`PassTarget::started`).
        let applied = apply::apply(sim, out, now);
        for p in &applied.preemptions {
            sim.preempt(p, now);
        }
        if !preempted || sim.pending.is_empty() {
            break;
        }
    }
    passes
}

/// The replay's figures, once the events ran out.
fn figures(trace: &Trace, cluster: &Cluster, name: &str, gpu_trace: bool, sim: &Replay, passes: u64) -> Metrics {
    let mut done = Vec::with_capacity(sim.jobs.len());
    let mut unfinished = 0usize;
    for (j, tj) in sim.jobs.iter().zip(&trace.jobs) {
        if j.nodes == 0 {
            continue;
        }
        match (j.first_start, j.end) {
            (Some(_), Some(end)) if j.remaining_ms == 0 => done.push(Done {
                submit: tj.submit_ms,
                end,
                duration: tj.duration_ms,
                user: j.user,
                big: if gpu_trace { tj.gpus >= 8 } else { j.nodes >= 8 },
            }),
            (_, Some(_)) => {} // cancelled
            _ => unfinished += 1,
        }
    }
    let pairs: Vec<(Millis, Millis)> = sim
        .jobs
        .iter()
        .zip(&trace.jobs)
        .filter(|(j, _)| j.first_start.is_some())
        .filter_map(|(j, tj)| j.first_estimate.map(|e| (e, tj.duration_ms)))
        .collect();
    let started = sim.jobs.iter().filter(|j| j.first_start.is_some()).count();
    let per_node = if gpu_trace { cluster.gpus_per_node } else { cluster.cpus_per_node };
    compute(
        &done,
        Totals {
            policy: name.to_string(),
            jobs: trace.jobs.len(),
            skipped_too_big: sim.jobs.iter().filter(|j| j.nodes == 0).count(),
            unfinished,
            cancelled: sim.cancelled,
            resource: if gpu_trace { "gpu" } else { "cpu" },
            allocated: sim.allocated,
            capacity: per_node as f64 * cluster.nodes as f64,
            first_submit: trace.jobs.first().map(|j| j.submit_ms).unwrap_or(0),
            users: sim.user_names.len(),
            preemptions: sim.preemptions,
            passes,
            prediction: crate::PredictionError::of(&pairs, started),
        },
    )
}

/// Each trace job's state before the replay (its shape on the cluster; too big: no nodes),
/// and the users' names by number.
fn trace_jobs(trace: &Trace, cluster: &Cluster, gpu_trace: bool) -> (Vec<JobState>, Vec<String>) {
    let mut user_ids: BTreeMap<&str, usize> = BTreeMap::new();
    let mut user_names: Vec<String> = Vec::new();
    let mut jobs = Vec::with_capacity(trace.jobs.len());
    for tj in &trace.jobs {
        let user = *user_ids.entry(tj.user.as_str()).or_insert_with(|| {
            user_names.push(tj.user.clone());
            user_names.len() - 1
        });
        let (request, nodes) = cluster.shape(tj).unwrap_or_default();
        let amount = if gpu_trace { request.gpu_milli as f64 / 1000.0 } else { request.cpu_milli as f64 / 1000.0 }
            * nodes as f64;
        jobs.push(JobState::new(request, nodes, amount, tj.duration_ms, user));
    }
    (jobs, user_names)
}

/// What happened to each trace job, in trace order.
fn outcomes(trace: &Trace, jobs: &[JobState]) -> Vec<JobOutcome> {
    jobs.iter()
        .zip(&trace.jobs)
        .map(|(j, tj)| JobOutcome {
            submit_ms: tj.submit_ms,
            start_ms: j.first_start,
            end_ms: j.end,
            duration_ms: tj.duration_ms,
            finished: j.nodes > 0 && j.end.is_some() && j.remaining_ms == 0,
        })
        .collect()
}

/// The jobs of a trace that no node shape of `cluster` can hold, with why (file line first).
pub fn too_big(trace: &Trace, cluster: &Cluster) -> Vec<(usize, String)> {
    trace.jobs.iter().filter_map(|j| cluster.shape(j).err().map(|e| (j.line, e.to_string()))).collect()
}
