//! Run-time predictions in the live manager (`berth_sched::Predictor`): what backfill plans
//! with and the `qssf` ordering sorts by, instead of a time limit that is missing or far too
//! long. Leaf module: the state (`State::predictor`) keeps the predictor, feeds it each job that
//! ends after running (`lifecycle.rs`) and asks it when a job enters the pending set, and
//! again as it starts if it had no history then; the manager rebuilds it at start from the
//! store's newest finished jobs ([`rebuild`]).
//!
//! A job is never stopped at its prediction, only at its time limit.

use berth_model::api::Transition;
use berth_model::{EndCause, JobSpec, JobState};
use berth_sched::{JobKey, Millis, Predictor};
use berth_store::{JobFilter, Store, StoreError};

/// How many finished jobs (the newest) the predictor is rebuilt from at start.
pub const HISTORY: u32 = 10_000;

/// What a job's history is looked up by: its owner, its name (empty without one) and its size
/// (`berth_sched::size_milli`).
pub fn key(user: &str, spec: &JobSpec) -> JobKey {
    JobKey { user: user.to_string(), name: spec.name.clone().unwrap_or_default(), size: size(spec) }
}

/// The job's size in thousandths of a device (GPUs, else CPUs, times nodes and kernels).
pub fn size(spec: &JobSpec) -> u64 {
    berth_sched::size_milli(&spec.resources, spec.nodes, spec.kernels)
}

/// Whether a run that ended so says how long the job runs: it exited by itself (succeeded or
/// failed), ran out of memory or reached its time limit. A cancelled, preempted or lost run,
/// or one that never launched, says nothing about it.
pub fn observed(end: Option<EndCause>) -> bool {
    matches!(end, Some(EndCause::Exited | EndCause::OutOfMemory | EndCause::TimeLimit))
}

/// The predictor from the store's newest [`HISTORY`] finished jobs, fed oldest end first.
pub async fn rebuild(store: &dyn Store) -> Result<Predictor, StoreError> {
    let filter = JobFilter {
        states: Some(vec![JobState::Succeeded, JobState::Failed, JobState::Timeout]),
        limit: Some(HISTORY),
        ..JobFilter::default()
    };
    let mut runs: Vec<(Millis, JobKey, Millis)> = store
        .jobs(&filter)
        .await?
        .into_iter()
        .filter(|r| observed(r.end_cause))
        .filter_map(|r| {
            let (start, end) = (r.started_at?.as_millisecond(), r.ended_at?.as_millisecond());
            Some((end, key(&r.user, &r.spec), end - start))
        })
        .collect();
    runs.sort_by_key(|(end, _, _)| *end);
    let mut p = Predictor::new();
    for (_, k, ran) in &runs {
        p.observe(k, *ran);
    }
    Ok(p)
}

/// Service (device-seconds, `berth_sched::service`) a job of `size` received in the runs its
/// history records, each from RUNNING to its requeue (PENDING again); the current run, if
/// any, is not counted (the scheduler adds it from the start).
pub fn attained(transitions: &[Transition], size: u64) -> u64 {
    let mut since: Option<Millis> = None;
    let mut total: u64 = 0;
    for t in transitions {
        match t.to {
            JobState::Running => since = Some(t.at.as_millisecond()),
            JobState::Pending => {
                if let Some(s) = since.take() {
                    total = total.saturating_add(berth_sched::service(size, t.at.as_millisecond() - s));
                }
            }
            s if s.is_terminal() => since = None,
            _ => {}
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tr(secs: i64, to: JobState) -> Transition {
        Transition { at: jiff::Timestamp::from_second(secs).unwrap(), from: None, to, reason: String::new() }
    }

    #[test]
    fn attained_service_adds_up_the_runs_that_ended_in_a_requeue() {
        use JobState::*;
        let h = [
            tr(0, Pending),
            tr(10, Scheduled),
            tr(12, Running),
            tr(3_612, Terminating),
            tr(3_620, Pending),
            tr(4_000, Scheduled),
            tr(4_001, Running),
            tr(5_001, Pending),
            tr(6_000, Running),
        ];
        // Two GPUs: 3,608 s and 1,000 s before the requeues; the current run is not counted.
        assert_eq!(attained(&h, 2_000), 2 * (3_608 + 1_000));
        assert_eq!(attained(&h[..3], 2_000), 0);
    }

    #[test]
    fn only_runs_that_ended_by_themselves_or_at_their_limit_are_observed() {
        assert!(observed(Some(EndCause::Exited)) && observed(Some(EndCause::TimeLimit)));
        assert!(observed(Some(EndCause::OutOfMemory)));
        for e in [EndCause::Cancelled, EndCause::Preempted, EndCause::NodeLost, EndCause::LaunchFailed] {
            assert!(!observed(Some(e)), "{e:?}");
        }
        assert!(!observed(None));
    }

    #[test]
    fn the_key_is_user_name_and_size() {
        let mut spec = JobSpec::command(["true"]);
        spec.resources.gpu_milli = 500;
        spec.nodes = 2;
        spec.name = Some("train".into());
        assert_eq!(key("ada", &spec), JobKey { user: "ada".into(), name: "train".into(), size: 1_000 });
        spec.name = None;
        assert_eq!(key("ada", &spec).name, "");
    }
}
