//! Service: what the `las` and `qssf` orderings rank jobs by. A job's size is its devices
//! (GPUs when it has any, else CPUs, in thousandths, times nodes and kernels:
//! [`crate::size_milli`]); its service is size × run time in device-seconds
//! ([`crate::service`]). Leaf module: the pending set indexes by these keys and the orders
//! walk them.

use crate::fairness::binding_use;
use crate::{Millis, PendingJob, RunningJob, service, size_milli};

/// What `qssf` assumes of a job with neither an estimate nor a limit: longer than any job
/// that has one, so such jobs go last (the wait bound, `reserve_after`, still brings them up).
const UNKNOWN_MS: Millis = Millis::MAX / 4;

/// A pending job's expected service, `qssf`'s key: size × (estimate, else limit).
pub(crate) fn expected(job: &PendingJob) -> u64 {
    let ms = job.estimate_ms.or(job.time_limit_ms).unwrap_or(UNKNOWN_MS);
    service(size_milli(&job.request, job.nodes, job.kernels), ms)
}

/// The `las` level of `attained` device-seconds: how many thresholds it has reached.
pub(crate) fn level(attained: u64, thresholds: &[u64]) -> usize {
    thresholds.iter().take_while(|&&t| attained >= t).count()
}

/// A running job's expected remaining service (`qssf` preemption): size × (estimate −
/// elapsed); a job past its estimate is expected to run as long again as it has (the
/// estimate was wrong, and a job that ran long tends to run longer); without an estimate or
/// limit, more than any job that has one.
pub(crate) fn remaining_now(r: &RunningJob, now: Millis) -> u64 {
    let elapsed = now.saturating_sub(r.started_at).max(0);
    let left = match crate::running_set::planned(r) {
        Some(p) if p > elapsed => p - elapsed,
        Some(_) => elapsed.max(1),
        None => UNKNOWN_MS,
    };
    service(size_of(r), left)
}

/// Its size from its bindings, one per kernel ([`size_milli`] of what each holds).
fn size_of(r: &RunningJob) -> u64 {
    r.bindings.iter().map(|b| size_milli(&binding_use(b), 1, 1)).sum()
}

/// A running job's service so far: before this run, plus its size × the time since it
/// started. Its size comes from its bindings (one per kernel).
pub(crate) fn attained_now(r: &RunningJob, now: Millis) -> u64 {
    r.attained.saturating_add(service(size_of(r), now.saturating_sub(r.started_at)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn levels() {
        let t = [3_600, 36_000];
        assert_eq!(level(0, &t), 0);
        assert_eq!(level(3_599, &t), 0);
        assert_eq!(level(3_600, &t), 1);
        assert_eq!(level(1 << 40, &t), 2);
        assert_eq!(level(5, &[]), 0);
    }
}
