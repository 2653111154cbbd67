//! What an endpoint's controller does next, decided from what it knows now: a pure function
//! (no clock, no I/O), so that rolling updates, rollbacks, restarts and draining are tested
//! as tables of facts and expected actions.
//!
//! The rules, in order:
//! 1. A running replica that never became ready within its start timeout, or that was ready
//!    and then failed its liveness probe `failures` times in a row, is stopped (and replaced).
//! 2. During a rolling update, a replica of the new revision that fails like that, or three
//!    new replicas that end on their own, roll the endpoint back to the previous spec.
//! 3. A rolling update adds one new replica at a time (at most `desired + 1` take traffic or
//!    start), and drains one old replica each time a new one is ready, or when the new one
//!    finds no room while at least two replicas serve (Kubernetes' max surge and max
//!    unavailable of one).
//! 4. Otherwise replicas are added up to `desired` (one waiting for a place at a time, so
//!    that each is placed knowing where the others went), and surplus ones are drained, the
//!    not-ready ones first.
//! 5. A draining replica stops once it has no request in flight, or when its grace is over.

use std::time::{Duration, Instant};

use berth_model::JobId;
use berth_model::endpoint::{HealthSpec, ReplicaState};

/// What the controller knows of one replica.
#[derive(Debug, Clone, PartialEq)]
pub struct Facts {
    pub job: JobId,
    pub revision: u64,
    pub state: ReplicaState,
    /// Placed on a node (its job left PENDING).
    pub placed: bool,
    pub running_since: Option<Instant>,
    pub ever_ready: bool,
    /// Failed probes in a row.
    pub probe_fails: u32,
    pub inflight: u64,
    pub draining_since: Option<Instant>,
    /// Its revision's start timeout and failure threshold (an old replica keeps the probes
    /// it was started with while an update rolls).
    pub start_timeout_secs: u32,
    pub failures: u32,
}

/// An endpoint as the planner sees it.
#[derive(Debug, Clone)]
pub struct Input<'a> {
    pub now: Instant,
    pub health: &'a HealthSpec,
    pub revision: u64,
    pub desired: u32,
    /// An older revision to roll back to (`None`: nothing to roll back to).
    pub can_roll_back: bool,
    pub replicas: &'a [Facts],
    /// No new replica before this (backoff after failures).
    pub start_after: Option<Instant>,
    /// New-revision replicas that ended on their own during this rollout.
    pub rollout_failures: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Start a new replica of the current revision.
    Start,
    /// Take no new requests, stop when the in-flight ones are done.
    Drain(JobId),
    /// Stop now; `failed`: counts as a failure (backoff, rollback).
    Stop { job: JobId, reason: String, failed: bool },
    /// Back to the previous spec.
    RollBack { reason: String },
}

/// Failures that roll an update back.
const ROLLBACK_AFTER: u32 = 3;

pub fn plan(i: &Input) -> Vec<Action> {
    let mut out = Vec::new();
    let h = i.health;
    let drain = Duration::from_secs(u64::from(h.drain_secs));
    let mut stopped: Vec<JobId> = Vec::new();
    for r in i.replicas {
        if let Some(since) = r.draining_since {
            if r.inflight == 0 || i.now.saturating_duration_since(since) >= drain {
                let reason = if r.inflight == 0 { "drained" } else { "drain grace over" };
                out.push(Action::Stop { job: r.job, reason: reason.into(), failed: false });
            }
            continue;
        }
        let start_timeout = Duration::from_secs(u64::from(r.start_timeout_secs));
        let why = match (r.ever_ready, r.running_since) {
            (false, Some(since)) if i.now.saturating_duration_since(since) >= start_timeout => Some(format!(
                "not ready {}s after it started: check its readiness probe and logs",
                r.start_timeout_secs
            )),
            (true, Some(_)) if r.probe_fails >= r.failures => {
                Some(format!("stopped answering: {} failed probes in a row", r.probe_fails))
            }
            _ => None,
        };
        if let Some(reason) = why {
            if r.revision == i.revision && i.can_roll_back && rolling(i) {
                return vec![Action::RollBack { reason: format!("replica job {} {reason}", r.job) }];
            }
            stopped.push(r.job);
            out.push(Action::Stop { job: r.job, reason, failed: true });
        }
    }
    if rolling(i) && i.can_roll_back && i.rollout_failures >= ROLLBACK_AFTER {
        return vec![Action::RollBack {
            reason: format!("{} replicas of the new revision ended on their own", i.rollout_failures),
        }];
    }
    let live: Vec<&Facts> =
        i.replicas.iter().filter(|r| r.draining_since.is_none() && !stopped.contains(&r.job)).collect();
    let current: Vec<&&Facts> = live.iter().filter(|r| r.revision == i.revision).collect();
    let old: Vec<&&Facts> = live.iter().filter(|r| r.revision != i.revision).collect();
    let may_start = i.start_after.is_none_or(|t| i.now >= t);
    let desired = i.desired as usize;
    if !old.is_empty() {
        let current_ready = current.iter().filter(|r| r.state == ReplicaState::Ready).count();
        let all_ready = current.len() == current_ready;
        let ready = live.iter().filter(|r| r.state == ReplicaState::Ready).count();
        // The surge replica finds no room: one old replica makes room, if another serves on.
        let no_room = current.iter().any(|r| !r.placed) && ready >= 2;
        if (current_ready > 0 || no_room) && live.len() > desired {
            out.push(Action::Drain(pick_old(&old).job));
        } else if desired == 0 {
            out.extend(old.iter().map(|r| Action::Drain(r.job)));
        } else if current.len() < desired && all_ready && live.len() <= desired && may_start {
            out.push(Action::Start);
        }
        return out;
    }
    if current.len() < desired {
        let unplaced = current.iter().any(|r| !r.placed);
        if may_start && !unplaced {
            out.push(Action::Start);
        }
    } else if current.len() > desired {
        let mut surplus: Vec<&&&Facts> = current.iter().collect();
        // Not-ready ones first, then the newest (the highest job id).
        surplus.sort_by_key(|r| (r.state == ReplicaState::Ready, std::cmp::Reverse(r.job)));
        out.extend(surplus.iter().take(current.len() - desired).map(|r| Action::Drain(r.job)));
    }
    out
}

/// Whether replicas of an older revision still take traffic or start.
fn rolling(i: &Input) -> bool {
    i.replicas.iter().any(|r| r.draining_since.is_none() && r.revision != i.revision)
}

/// The old replica to drain next: a not-ready one first, then the oldest.
fn pick_old<'a>(old: &[&&'a Facts]) -> &'a Facts {
    old.iter().min_by_key(|r| (r.state == ReplicaState::Ready, r.job)).map(|r| **r).expect("old is not empty")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(job: JobId, revision: u64, state: ReplicaState) -> Facts {
        Facts {
            job,
            revision,
            state,
            placed: true,
            running_since: None,
            ever_ready: state == ReplicaState::Ready,
            probe_fails: 0,
            inflight: 0,
            draining_since: None,
            start_timeout_secs: HealthSpec::default().start_timeout_secs,
            failures: HealthSpec::default().failures,
        }
    }

    fn input<'a>(now: Instant, health: &'a HealthSpec, replicas: &'a [Facts], desired: u32) -> Input<'a> {
        Input {
            now,
            health,
            revision: 2,
            desired,
            can_roll_back: true,
            replicas,
            start_after: None,
            rollout_failures: 0,
        }
    }

    #[test]
    fn replicas_are_added_one_unplaced_at_a_time_and_surplus_drained() {
        let now = Instant::now();
        let h = HealthSpec::default();
        assert_eq!(plan(&input(now, &h, &[], 3)), [Action::Start]);
        let mut waiting = facts(1, 2, ReplicaState::Starting);
        waiting.placed = false;
        assert_eq!(plan(&input(now, &h, &[waiting], 3)), []);
        let r =
            [facts(1, 2, ReplicaState::Ready), facts(2, 2, ReplicaState::NotReady), facts(3, 2, ReplicaState::Ready)];
        assert_eq!(plan(&input(now, &h, &r, 1)), [Action::Drain(2), Action::Drain(3)]);
        let mut backoff = input(now, &h, &[], 1);
        backoff.start_after = Some(now + Duration::from_secs(4));
        assert_eq!(plan(&backoff), []);
    }

    #[test]
    fn a_rolling_update_surges_one_then_drains_one_old_per_ready_new() {
        let now = Instant::now();
        let h = HealthSpec::default();
        let old = [facts(1, 1, ReplicaState::Ready), facts(2, 1, ReplicaState::Ready)];
        assert_eq!(plan(&input(now, &h, &old, 2)), [Action::Start]);
        let starting = [old[0].clone(), old[1].clone(), facts(3, 2, ReplicaState::NotReady)];
        assert_eq!(plan(&input(now, &h, &starting, 2)), [], "waits for the new one");
        let ready = [old[0].clone(), old[1].clone(), facts(3, 2, ReplicaState::Ready)];
        assert_eq!(plan(&input(now, &h, &ready, 2)), [Action::Drain(1)]);
        let mut drained = ready.clone();
        drained[0].draining_since = Some(now);
        drained[0].inflight = 2;
        assert_eq!(plan(&input(now, &h, &drained, 2)), [Action::Start]);
        drained[0].inflight = 0;
        let mut full = [old[0].clone(), old[1].clone(), facts(3, 2, ReplicaState::Starting)];
        full[2].placed = false;
        assert_eq!(plan(&input(now, &h, &full, 2)), [Action::Drain(1)], "makes room");
        assert_eq!(plan(&input(now, &h, &full[1..], 1)), [], "never below one ready");
        assert_eq!(
            plan(&input(now, &h, &drained, 2))[0],
            Action::Stop { job: 1, reason: "drained".into(), failed: false }
        );
    }

    #[test]
    fn a_new_replica_that_never_gets_ready_rolls_the_update_back() {
        let t0 = Instant::now();
        let h = HealthSpec::default();
        let mut new = facts(3, 2, ReplicaState::NotReady);
        new.running_since = Some(t0);
        new.start_timeout_secs = 10;
        let r = [facts(1, 1, ReplicaState::Ready), new];
        assert_eq!(plan(&input(t0 + Duration::from_secs(5), &h, &r, 1)), []);
        let got = plan(&input(t0 + Duration::from_secs(10), &h, &r, 1));
        assert!(matches!(&got[..], [Action::RollBack { reason }] if reason.contains("job 3 not ready")), "{got:?}");
        // Without an older revision, it is only restarted.
        let mut i = input(t0 + Duration::from_secs(10), &h, &r[1..], 1);
        i.can_roll_back = false;
        assert!(matches!(&plan(&i)[..], [Action::Stop { job: 3, failed: true, .. }, Action::Start]));
        let mut crashes = input(t0, &h, &r, 1);
        crashes.rollout_failures = 3;
        assert!(matches!(&plan(&crashes)[..], [Action::RollBack { .. }]));
    }

    #[test]
    fn a_replica_that_stops_answering_is_restarted() {
        let now = Instant::now();
        let h = HealthSpec::default();
        let mut r = facts(1, 2, ReplicaState::NotReady);
        r.ever_ready = true;
        r.running_since = Some(now);
        r.probe_fails = r.failures;
        let got = plan(&input(now, &h, std::slice::from_ref(&r), 1));
        assert!(matches!(&got[..], [Action::Stop { job: 1, failed: true, .. }, Action::Start]), "{got:?}");
    }

    #[test]
    fn draining_ends_at_the_grace() {
        let t0 = Instant::now();
        let h = HealthSpec { drain_secs: 5, ..HealthSpec::default() };
        let mut r = facts(1, 2, ReplicaState::Draining);
        r.draining_since = Some(t0);
        r.inflight = 1;
        let replicas = [r, facts(2, 2, ReplicaState::Ready)];
        assert_eq!(plan(&input(t0 + Duration::from_secs(4), &h, &replicas, 1)), []);
        assert!(matches!(
            &plan(&input(t0 + Duration::from_secs(5), &h, &replicas, 1))[..],
            [Action::Stop { job: 1, .. }]
        ));
    }
}
