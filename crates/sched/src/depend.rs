//! Judging a job's dependency (`berth_model::Dependency`, Slurm's `--dependency`) against what
//! the caller knows of the jobs it names: met (the job may be scheduled), waiting (with the
//! reason `berth ps` shows), or never (it can no longer be met).
//!
//! A condition may name one task of a job array (`afterok:12_7`): the caller says what it
//! knows of that task's job, and a task its array has not made yet is PENDING, as Slurm shows
//! it.
//!
//! A job whose dependency is not met is held out of its queue altogether, as in Slurm: it
//! takes no position, holds no one back and counts for no backfill window. The caller keeps
//! it aside and judges it again on each pass (and when a job it names changes).

use berth_model::{Condition, Dependency, JobId, JobRef, JobState, PendingKind, PendingReason};

use crate::Millis;

/// What the caller knows of a job that another depends on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub state: JobState,
    /// When its current (or last) run started, if it did.
    pub started_at: Option<Millis>,
}

/// The verdict on a dependency.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    Met,
    /// Not yet: the reason names the first condition still open.
    Waits(PendingReason),
    /// It can never be met: why, for the job's end reason (`dependency never satisfied: ...`).
    Never(String),
}

/// One condition's verdict.
enum One {
    Met,
    Waits(String),
    Never(String),
}

/// Judges `dep` at `now`. `target(r)` is what is known of job (or array task) `r` (`None`: no
/// such job on record, e.g. removed by retention); `singleton_busy` is the job of the same user and name
/// that has started and not ended, if any (for `singleton`).
pub fn judge(
    dep: &Dependency,
    target: impl Fn(JobRef) -> Option<Target>,
    singleton_busy: Option<(JobId, JobState)>,
    now: Millis,
) -> Judgement {
    let mut waits = None;
    let mut never = None;
    for c in &dep.conditions {
        match condition(c, &target, singleton_busy, now) {
            One::Met if dep.any => return Judgement::Met,
            One::Met => {}
            One::Never(why) if !dep.any => return Judgement::Never(why),
            One::Never(why) => {
                never.get_or_insert(why);
            }
            One::Waits(why) => {
                waits.get_or_insert(why);
            }
        }
    }
    match (waits, never) {
        (Some(why), _) => Judgement::Waits(PendingReason::new(PendingKind::Dependency, format!("dependency: {why}"))),
        (None, Some(why)) => Judgement::Never(why),
        (None, None) => Judgement::Met,
    }
}

fn condition(
    c: &Condition,
    target: &impl Fn(JobRef) -> Option<Target>,
    singleton_busy: Option<(JobId, JobState)>,
    now: Millis,
) -> One {
    let Some(job) = c.target() else {
        return match singleton_busy {
            Some((id, state)) => One::Waits(format!("singleton: waits for {id} ({}) of the same name", state.as_str())),
            None => One::Met,
        };
    };
    let Some(t) = target(job) else {
        // The job is gone from the records: it ended long ago, how is no longer known.
        return match c {
            Condition::After { .. } | Condition::AfterAny { .. } => One::Met,
            _ => One::Never(format!("{c}: job {job} is no longer on record")),
        };
    };
    let state = t.state.as_str();
    let waits = || One::Waits(format!("waits for {job} ({state})"));
    let ended = t.state.is_terminal();
    let ok = t.state == JobState::Succeeded;
    match *c {
        Condition::AfterOk { .. } if ok => One::Met,
        Condition::AfterNotOk { .. } if ended && !ok => One::Met,
        Condition::AfterOk { .. } | Condition::AfterNotOk { .. } if ended => {
            One::Never(format!("{c}: job {job} ended {state}"))
        }
        Condition::AfterAny { .. } if ended => One::Met,
        Condition::After { delay_secs, .. } if t.state != JobState::Pending => {
            match t.started_at {
                Some(at) if now.saturating_sub(at) < (delay_secs as i64).saturating_mul(1000) => {
                    One::Waits(format!("waits until {job} has run {}", berth_model::format_duration(delay_secs)))
                }
                // Started long enough ago, or ended (cancelled) without a start.
                Some(_) => One::Met,
                None if ended || delay_secs == 0 => One::Met,
                None => waits(),
            }
        }
        _ => waits(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn at(state: JobState) -> Option<Target> {
        Some(Target { state, started_at: None })
    }

    fn j(dep: &str, t: impl Fn(JobRef) -> Option<Target>) -> Judgement {
        judge(&dep.parse().unwrap(), t, None, 0)
    }

    #[test]
    fn each_kind_is_met_waits_or_never_by_the_targets_state() {
        use JobState::*;
        let waits = |s: &str| Judgement::Waits(PendingReason::new(PendingKind::Dependency, s));
        assert_eq!(j("afterok:12", |_| at(Running)), waits("dependency: waits for 12 (RUNNING)"));
        assert_eq!(j("afterok:12", |_| at(Succeeded)), Judgement::Met);
        assert_eq!(j("afterok:12", |_| at(Failed)), Judgement::Never("afterok:12: job 12 ended FAILED".into()));
        assert_eq!(j("afternotok:12", |_| at(Cancelled)), Judgement::Met);
        assert!(matches!(j("afternotok:12", |_| at(Succeeded)), Judgement::Never(_)));
        assert_eq!(j("afterany:12", |_| at(Timeout)), Judgement::Met);
        assert!(matches!(j("afterany:12", |_| at(Pending)), Judgement::Waits(_)));
        assert!(matches!(j("after:12", |_| at(Pending)), Judgement::Waits(_)));
        assert_eq!(j("after:12", |_| at(Scheduled)), Judgement::Met);
        assert_eq!(j("after:12", |_| at(Cancelled)), Judgement::Met);
        // Gone from the records: its end is unknown.
        assert_eq!(j("afterany:12", |_| None), Judgement::Met);
        assert!(matches!(j("afterok:12", |_| None), Judgement::Never(m) if m.contains("no longer on record")));
    }

    #[test]
    fn after_with_a_delay_counts_from_the_start() {
        let dep: Dependency = "after:4+2".parse().unwrap();
        let t = |_| Some(Target { state: JobState::Running, started_at: Some(1_000) });
        assert!(matches!(judge(&dep, t, None, 100_000), Judgement::Waits(r) if r.message.contains("has run 2m")));
        assert_eq!(judge(&dep, t, None, 121_000), Judgement::Met);
    }

    #[test]
    fn all_needs_every_condition_and_any_needs_one() {
        use JobState::*;
        let t = |r: JobRef| {
            let id = r.job;
            at(if id == 1 {
                Succeeded
            } else if id == 2 {
                Running
            } else {
                Failed
            })
        };
        assert!(matches!(j("afterok:1,afterok:2", t), Judgement::Waits(r) if r.message.contains("waits for 2")));
        assert!(matches!(j("afterok:1,afterok:3", t), Judgement::Never(_)));
        assert_eq!(j("afterok:3?afterok:1", t), Judgement::Met);
        assert!(matches!(j("afterok:3?afterok:2", t), Judgement::Waits(_)), "one may still come");
        assert!(matches!(
            j("afterok:3?afterany:9", |r| if r.job == 3 { at(Failed) } else { at(Running) }),
            Judgement::Waits(_)
        ));
        assert!(matches!(j("afterok:3?afternotok:1", t), Judgement::Never(_)), "none ever can");
    }

    #[test]
    fn one_task_of_an_array_is_judged_by_that_tasks_state_not_the_arrays() {
        use JobState::*;
        let waits = |s: &str| Judgement::Waits(PendingReason::new(PendingKind::Dependency, s));
        // The array (12) is still pending while task 7 succeeded and task 8 failed; task 9 is
        // not made yet: the caller reports it PENDING.
        let t = |r: JobRef| match r.task {
            None => at(Pending),
            Some(7) => at(Succeeded),
            Some(8) => at(Failed),
            Some(_) => at(Pending),
        };
        assert_eq!(j("afterok:12_7", t), Judgement::Met);
        assert_eq!(j("afterok:12", t), waits("dependency: waits for 12 (PENDING)"));
        assert_eq!(j("afterok:12_9", t), waits("dependency: waits for 12_9 (PENDING)"));
        assert_eq!(j("afterok:12_8", t), Judgement::Never("afterok:12_8: job 12_8 ended FAILED".into()));
        assert_eq!(j("afternotok:12_8", t), Judgement::Met);
        assert_eq!(j("afternotok:12_7", t), Judgement::Never("afternotok:12_7: job 12_7 ended SUCCEEDED".into()));
        assert_eq!(j("afterany:12_8:12_7", t), Judgement::Met);
        assert!(matches!(j("after:12_9", t), Judgement::Waits(_)));
        assert_eq!(j("afterok:12_7,afterok:12_9", t), waits("dependency: waits for 12_9 (PENDING)"));
        // A task cancelled before it was made ended like any cancelled job.
        let cancelled = |_| at(Cancelled);
        assert_eq!(j("after:12_3", cancelled), Judgement::Met);
        assert_eq!(j("afterany:12_3", cancelled), Judgement::Met);
        assert!(
            matches!(j("afterok:12_3", cancelled), Judgement::Never(m) if m == "afterok:12_3: job 12_3 ended CANCELLED")
        );
        assert!(
            matches!(j("afterok:12_3", |_| None), Judgement::Never(m) if m.contains("12_3 is no longer on record"))
        );
    }

    #[test]
    fn singleton_waits_for_the_running_job_of_the_same_name() {
        let dep: Dependency = "singleton".parse().unwrap();
        assert_eq!(judge(&dep, |_| None, None, 0), Judgement::Met);
        let r = judge(&dep, |_| None, Some((7, JobState::Running)), 0);
        assert!(
            matches!(r, Judgement::Waits(r) if r.message == "dependency: singleton: waits for 7 (RUNNING) of the same name")
        );
    }

    fn state() -> impl Strategy<Value = JobState> {
        prop::sample::select(JobState::ALL.to_vec())
    }

    proptest! {
        /// A verdict never goes back: once a target ended, a met or never dependency stays so
        /// whatever the clock; and an unfinished target never makes `afterok` final.
        #[test]
        fn an_ended_targets_verdict_is_final_and_an_open_one_waits(
            s in state(),
            now in 0i64..1_000_000,
            task in prop::option::of(0u32..100),
        ) {
            let dep = Dependency { any: false, conditions: vec![Condition::AfterOk { job: 5, task }] };
            let t = |_| Some(Target { state: s, started_at: Some(0) });
            let v = judge(&dep, t, None, now);
            if s.is_terminal() {
                prop_assert_eq!(v.clone(), judge(&dep, t, None, now + 1_000_000));
                prop_assert!(!matches!(v, Judgement::Waits(_)));
            } else {
                prop_assert!(matches!(v, Judgement::Waits(_)));
            }
        }
    }
}
