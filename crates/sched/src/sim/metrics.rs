//! What one replay measured.

use crate::Millis;

/// The figures of one policy on one trace. Times are in seconds of virtual time.
///
/// - JCT (job completion time) = end − submit; `wait` = JCT − run time: the queueing delay
///   (first start − submit) of a job that ran once, plus the time stopped and the work lost
///   of a preempted one, so that preemptive policies are not judged by first starts only.
/// - Bounded slowdown = JCT / max(duration, 10 s) (Feitelson's bound, so that a 1-second job
///   that waited a minute does not dominate the mean).
/// - `allocation` = allocated resource-time (GPU-seconds for GPU traces, CPU-seconds for CPU
///   traces, counting runs later preempted) ÷ (cluster capacity × makespan).
/// - `makespan` = last end − first submit.
/// - Jain's index `(Σx)² / (n·Σx²)` across users (Philly: virtual clusters) of each user's
///   mean bounded slowdown (`jain_slowdown`) and mean queueing delay (`jain_wait`); 1 is
///   perfectly even, 1/n is one user taking all the pain. All-zero waits count as even (1).
/// - Big jobs: ≥ 8 GPUs (GPU traces) or ≥ 8 nodes (CPU traces).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Metrics {
    pub policy: String,
    /// Jobs replayed (after cleaning and the window), including those skipped as too big.
    pub jobs: usize,
    pub finished: usize,
    /// Jobs larger than the whole cluster: reported and never submitted.
    pub skipped_too_big: usize,
    /// Jobs still pending or running when the events ran out (should be 0).
    pub unfinished: usize,
    /// Jobs cancelled by preemption (queues whose action is `cancel`).
    pub cancelled: usize,
    pub jct_mean_s: f64,
    pub jct_median_s: f64,
    pub jct_p99_s: f64,
    pub wait_mean_s: f64,
    pub wait_median_s: f64,
    pub wait_p99_s: f64,
    pub slowdown_mean: f64,
    pub makespan_s: f64,
    /// `gpu` or `cpu`: the resource `allocation` counts.
    pub resource: String,
    pub allocation: f64,
    pub users: usize,
    pub jain_slowdown: f64,
    pub jain_wait: f64,
    pub big_jobs: usize,
    pub big_wait_mean_s: f64,
    pub big_wait_max_s: f64,
    pub preemptions: usize,
    /// Scheduling passes run.
    pub passes: u64,
    /// How far run-time predictions fell from the true run times (jobs that started).
    pub prediction: crate::PredictionError,
}

/// Nearest-rank percentile (`p` in 0..=100) of sorted values; 0 for none.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Jain's fairness index of the values: 1 when all are equal (or all zero), 1/n at worst.
pub fn jain(xs: &[f64]) -> f64 {
    let sum: f64 = xs.iter().sum();
    let sq: f64 = xs.iter().map(|x| x * x).sum();
    if xs.is_empty() || sq == 0.0 { 1.0 } else { sum * sum / (xs.len() as f64 * sq) }
}

/// One finished job, as [`compute`] needs it.
pub(crate) struct Done {
    pub submit: Millis,
    pub end: Millis,
    pub duration: Millis,
    pub user: usize,
    pub big: bool,
}

fn secs(ms: f64) -> f64 {
    ms / 1000.0
}

fn mean(xs: &[f64]) -> f64 {
    if xs.is_empty() { 0.0 } else { xs.iter().sum::<f64>() / xs.len() as f64 }
}

pub(crate) struct Totals {
    pub policy: String,
    pub jobs: usize,
    pub skipped_too_big: usize,
    pub unfinished: usize,
    pub cancelled: usize,
    pub resource: &'static str,
    /// Resource-milliseconds allocated.
    pub allocated: f64,
    /// Resource units of the whole cluster.
    pub capacity: f64,
    pub first_submit: Millis,
    pub users: usize,
    pub preemptions: usize,
    pub passes: u64,
    pub prediction: crate::PredictionError,
}

pub(crate) fn compute(done: &[Done], t: Totals) -> Metrics {
    let mut jct: Vec<f64> = done.iter().map(|d| secs((d.end - d.submit) as f64)).collect();
    // Time not spent on the run that completed: queueing, and under preemption the time
    // stopped and the work lost (first start − submit for a job that ran once).
    let mut wait: Vec<f64> = done.iter().map(|d| secs((d.end - d.submit - d.duration).max(0) as f64)).collect();
    let slow: Vec<f64> = done.iter().map(|d| (d.end - d.submit) as f64 / (d.duration.max(10_000) as f64)).collect();
    let (mut per_user_slow, mut per_user_wait, mut per_user_n) =
        (vec![0.0; t.users], vec![0.0; t.users], vec![0usize; t.users]);
    for (i, d) in done.iter().enumerate() {
        per_user_slow[d.user] += slow[i];
        per_user_wait[d.user] += wait[i];
        per_user_n[d.user] += 1;
    }
    let (mut us, mut uw) = (Vec::new(), Vec::new());
    for u in 0..t.users {
        if per_user_n[u] > 0 {
            us.push(per_user_slow[u] / per_user_n[u] as f64);
            uw.push(per_user_wait[u] / per_user_n[u] as f64);
        }
    }
    let big: Vec<f64> = done.iter().zip(&wait).filter(|(d, _)| d.big).map(|(_, w)| *w).collect();
    let last_end = done.iter().map(|d| d.end).max().unwrap_or(t.first_submit);
    let makespan = (last_end - t.first_submit).max(0) as f64;
    let (jct_mean, wait_mean) = (mean(&jct), mean(&wait));
    jct.sort_by(f64::total_cmp);
    wait.sort_by(f64::total_cmp);
    Metrics {
        policy: t.policy,
        jobs: t.jobs,
        finished: done.len(),
        skipped_too_big: t.skipped_too_big,
        unfinished: t.unfinished,
        cancelled: t.cancelled,
        jct_mean_s: jct_mean,
        jct_median_s: percentile(&jct, 50.0),
        jct_p99_s: percentile(&jct, 99.0),
        wait_mean_s: wait_mean,
        wait_median_s: percentile(&wait, 50.0),
        wait_p99_s: percentile(&wait, 99.0),
        slowdown_mean: mean(&slow),
        makespan_s: secs(makespan),
        resource: t.resource.to_string(),
        allocation: if makespan > 0.0 && t.capacity > 0.0 { t.allocated / (t.capacity * makespan) } else { 0.0 },
        users: us.len(),
        jain_slowdown: jain(&us),
        jain_wait: jain(&uw),
        big_jobs: big.len(),
        big_wait_mean_s: mean(&big),
        big_wait_max_s: big.iter().copied().fold(0.0, f64::max),
        preemptions: t.preemptions,
        passes: t.passes,
        prediction: t.prediction,
    }
}
