//! Applying a pass's output to a cluster's in-memory state, one way for the manager and for
//! `berth sim`: starts take their devices on the node ledgers, tried and untried waiting jobs
//! get their place and reason, preemptions are filtered against what is already stopping, and
//! ends and requeues give the devices back.
//!
//! The state is seen through [`PassTarget`], a narrow view its owner implements (the
//! manager's `State`, the simulator's replay), as a scheduler sees the cluster through a few
//! reads and writes and never through its storage. What has to be stored first (the
//! manager's one store batch) is the caller's business, before it calls in here; carrying a
//! preemption out (stop commands, a requeue) is too: this module only says which ones stand.

use std::collections::BTreeSet;

use berth_model::{Binding, JobId};

use crate::{LedgerError, Millis, NodeLedger, PassOutput, Preempt, Start, Untried, Waiting};

/// What applying a pass reads and changes in a cluster's state.
pub trait PassTarget {
    /// The ledger of node `node`, if the cluster has it.
    fn ledger_mut(&mut self, node: &str) -> Option<&mut NodeLedger>;

    /// Whether `job` waits to be scheduled: a start of any other job is stale and skipped.
    fn is_pending(&self, job: JobId) -> bool;

    /// Whether `job` may be stopped for another: placed, preparing or running, and not
    /// already being stopped.
    fn stoppable(&self, job: JobId) -> bool;

    /// The jobs whose earlier victims are still stopping (their resources are on the way).
    fn awaiting_victims(&self) -> BTreeSet<JobId>;

    /// A job the pass tried waits: its position, reason, blocked count and expected start.
    fn waits(&mut self, waiting: Waiting);

    /// Jobs the pass did not try wait, the k-th at `run.first_position + k`, for `run.reason`;
    /// their blocked counts stay and they have no expected start. By runs, so that a target
    /// that keeps none of it pays nothing for a deep queue.
    fn untried(&mut self, run: &Untried);

    /// `start` holds its devices on the ledgers now: the job is placed at `now`.
    fn started(&mut self, start: Start, borrowed: bool, now: Millis);
}

/// A binding a ledger refused while a start took its devices.
#[derive(Debug)]
pub struct Clash {
    pub job: JobId,
    pub node: String,
    pub error: LedgerError,
}

/// What [`apply`] leaves to its caller.
#[derive(Debug, Default)]
pub struct Applied {
    /// The jobs started, in the pass's order.
    pub started: Vec<JobId>,
    /// The preemptions to carry out, in the pass's order ([`preemptions`]).
    pub preemptions: Vec<Preempt>,
    /// Bindings the ledgers refused (the start stands: see [`allocate`]).
    pub clashes: Vec<Clash>,
}

/// Applies `out` at `now`: untried and waiting jobs get their places, then the starts of
/// jobs still pending take their devices; returns the preemptions that stand, for the caller
/// to carry out.
pub fn apply<T: PassTarget + ?Sized>(target: &mut T, out: PassOutput, now: Millis) -> Applied {
    let mut applied = Applied { preemptions: preemptions(&out.preemptions, target), ..Applied::default() };
    for run in &out.untried {
        target.untried(run);
    }
    for w in out.waiting {
        target.waits(w);
    }
    for s in out.starts {
        if !target.is_pending(s.job) {
            continue;
        }
        applied.clashes.extend(allocate(target, s.job, &s.bindings));
        let borrowed = out.borrowed.contains(&s.job);
        applied.started.push(s.job);
        target.started(s, borrowed, now);
    }
    applied
}

/// The preemptions of `list` that stand: a job whose earlier victims are still stopping gets
/// no new ones, a victim is stopped once, and only a job that is placed, preparing or running
/// (and not already stopping) is a victim.
pub fn preemptions<T: PassTarget + ?Sized>(list: &[Preempt], target: &T) -> Vec<Preempt> {
    if list.is_empty() {
        return Vec::new();
    }
    let busy = target.awaiting_victims();
    let mut taken = BTreeSet::new();
    list.iter()
        .filter(|p| !busy.contains(&p.for_job) && target.stoppable(p.victim) && taken.insert(p.victim))
        .cloned()
        .collect()
}

/// Takes the devices of `bindings` on their nodes' ledgers. The pass placed them on these
/// very ledgers, so a refusal means the state changed under it; the refused bindings are
/// returned and the others kept, as the start stands (the manager has stored it by then).
pub fn allocate<T: PassTarget + ?Sized>(target: &mut T, job: JobId, bindings: &[Binding]) -> Vec<Clash> {
    let mut clashes = Vec::new();
    for b in bindings {
        if let Some(l) = target.ledger_mut(&b.node)
            && let Err(error) = l.allocate(b)
        {
            clashes.push(Clash { job, node: b.node.clone(), error });
        }
    }
    clashes
}

/// Gives the devices of `bindings` back to their nodes' ledgers: a job's run ended, was
/// requeued or was stopped (releasing twice is harmless).
pub fn release<T: PassTarget + ?Sized>(target: &mut T, bindings: &[Binding]) {
    for b in bindings {
        if let Some(l) = target.ledger_mut(&b.node) {
            l.release(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use berth_model::{NumaPolicy, PendingKind, PendingReason, ResourceRequest, Topology};

    use super::*;
    use crate::PreemptAction;

    /// One node, jobs by state; records what it was told.
    #[derive(Default)]
    struct Fake {
        ledger: Option<NodeLedger>,
        pending: BTreeSet<JobId>,
        running: BTreeSet<JobId>,
        busy: BTreeSet<JobId>,
        places: BTreeMap<JobId, (u32, PendingKind)>,
        started: Vec<(JobId, bool)>,
    }

    impl PassTarget for Fake {
        fn ledger_mut(&mut self, node: &str) -> Option<&mut NodeLedger> {
            self.ledger.as_mut().filter(|l| l.name() == node)
        }
        fn is_pending(&self, job: JobId) -> bool {
            self.pending.contains(&job)
        }
        fn stoppable(&self, job: JobId) -> bool {
            self.running.contains(&job)
        }
        fn awaiting_victims(&self) -> BTreeSet<JobId> {
            self.busy.clone()
        }
        fn waits(&mut self, w: Waiting) {
            self.places.insert(w.job, (w.position, w.reason.kind));
        }
        fn untried(&mut self, run: &Untried) {
            for (k, &job) in run.jobs.iter().enumerate() {
                self.places.insert(job, (run.first_position + k as u32, run.reason.kind));
            }
        }
        fn started(&mut self, s: Start, borrowed: bool, _: Millis) {
            self.pending.remove(&s.job);
            self.started.push((s.job, borrowed));
        }
    }

    fn preempt(victim: JobId, for_job: JobId) -> Preempt {
        Preempt { victim, for_job, action: PreemptAction::Requeue }
    }

    #[test]
    fn preemptions_stand_once_for_running_victims_of_jobs_not_already_waiting_on_victims() {
        let t = Fake { running: [1, 2, 3].into(), busy: [20].into(), ..Fake::default() };
        let list = [preempt(1, 10), preempt(2, 20), preempt(1, 11), preempt(4, 10), preempt(3, 10)];
        assert_eq!(preemptions(&list, &t), [preempt(1, 10), preempt(3, 10)]);
    }

    #[test]
    fn apply_places_waiting_jobs_and_starts_pending_ones_on_the_ledgers() {
        let ledger = NodeLedger::new("n1", "q", Topology::synthetic(1, 4, 1 << 30, 0));
        let req = ResourceRequest { cpu_milli: 2000, mem_bytes: 1 << 20, gpu_milli: 0 };
        let binding = ledger.try_bind(&req, NumaPolicy::None).unwrap();
        let mut t = Fake { ledger: Some(ledger), pending: [1, 2, 3].into(), ..Fake::default() };
        let reason = |kind| PendingReason::new(kind, "x");
        let out = PassOutput {
            starts: vec![
                Start { job: 1, bindings: vec![binding.clone()] },
                Start { job: 9, bindings: vec![binding.clone()] },
                Start { job: 2, bindings: vec![binding] },
            ],
            borrowed: vec![2],
            waiting: vec![Waiting {
                job: 3,
                position: 1,
                reason: reason(PendingKind::Resources),
                blocked_passes: 1,
                expected_start: None,
            }],
            untried: vec![Untried {
                first_position: 2,
                reason: reason(PendingKind::Priority),
                jobs: vec![4, 5],
                rest: None,
            }],
            preemptions: vec![],
        };
        let applied = apply(&mut t, out, 0);
        // Job 9 is not pending (a stale start); job 2's binding clashes with job 1's and
        // stands all the same.
        assert_eq!(applied.started, [1, 2]);
        assert_eq!(t.started, [(1, false), (2, true)]);
        assert_eq!(applied.clashes.iter().map(|c| (c.job, c.node.as_str())).collect::<Vec<_>>(), [(2, "n1")]);
        assert_eq!(t.ledger.as_ref().unwrap().cpus_used(), 2);
        let places: Vec<_> = t.places.into_iter().collect();
        assert_eq!(
            places,
            [(3, (1, PendingKind::Resources)), (4, (2, PendingKind::Priority)), (5, (3, PendingKind::Priority))]
        );
    }
}
