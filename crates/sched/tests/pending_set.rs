//! The incremental pass (`schedule_set` over a `PendingSet` and a `RunningSet` kept across
//! passes) against the full one (`schedule` over lists), on random sequences of submits,
//! starts, cancels, ends and preemptions: every pass must decide exactly the same, untried
//! jobs and backfill reservations included.

mod support;

use std::collections::BTreeMap;

use berth_model::{JobId, NumaPolicy, PendingReason, ResourceRequest};
use berth_sched::{
    FairShare, HeadOfLine, NodeLedger, Ordering, PassInput, PassOutput, PendingJob, PendingSet, PreemptAction,
    Preemption, QueueConfig, RunningJob, RunningSet, Scoring, schedule, schedule_set, schedule_set_kinds,
};
use proptest::prelude::*;

const GIB: u64 = 1 << 30;
const USERS: [&str; 4] = ["ann", "bob", "cy", "dee"];
const PROJECTS: [&str; 3] = ["p", "q", "r"];

/// (priority, queue, cpus, GiB, GPU thousandths, nodes, user, project, limit in minutes)
type JobSpec = (i32, usize, u64, u64, u64, u32, usize, usize, Option<i64>);

fn job_strategy() -> impl Strategy<Value = JobSpec> {
    (
        -1i32..=1,
        prop::sample::select(vec![0usize, 0, 1, 1, 2]),
        1u64..=4,
        1u64..=6,
        prop::sample::select(vec![0u64, 0, 500, 1000, 2000]),
        prop::sample::select(vec![1u32, 1, 1, 2]),
        0usize..4,
        0usize..3,
        prop::option::of(1i64..120),
    )
}

fn pending(id: JobId, &(priority, q, cpus, gib, gpu_milli, nodes, u, p, limit): &JobSpec) -> PendingJob {
    PendingJob {
        id,
        priority,
        queue: ["a", "b", "nope"][q].into(),
        request: ResourceRequest { cpu_milli: cpus * 1000, mem_bytes: gib * GIB, gpu_milli },
        nodes,
        numa: NumaPolicy::PreferLocal,
        blocked_passes: 0,
        user: USERS[u].into(),
        project: PROJECTS[p].into(),
        submitted_at: 0,
        time_limit_ms: limit.map(|m| m * 60_000),
        estimate_ms: None,
        attained: 0,
        image: None,
        kernels: 1,
        mounts: Vec::new(),
        data_on: Vec::new(),
        avoid: Vec::new(),
        constraint: None,
        exclusive: false,
        folders: false,
    }
}

/// (ordering, head of line: strict / skip-after-1 / backfill with a window of 2, spread,
/// preemption)
fn queue(name: &str, (o, h, spread, pre): (usize, usize, bool, bool)) -> QueueConfig {
    let mut q = QueueConfig::new(name);
    q.ordering = [Ordering::Fifo, Ordering::Lifo, Ordering::Drf, Ordering::FairShare][o];
    q.head_of_line = [HeadOfLine::Strict, HeadOfLine::SkipAfter(1), HeadOfLine::Backfill][h];
    q.backfill_window = 2;
    q.scoring = if spread { Scoring::Spread } else { Scoring::Binpack };
    q.preemption = pre.then_some(Preemption { action: PreemptAction::Requeue, min_runtime_ms: 0 });
    q
}

/// Every untried job with its position and reason, from the lists alone.
fn untried(out: &PassOutput) -> Vec<(JobId, u32, &PendingReason)> {
    out.untried_jobs().collect()
}

/// `out` with every reason's message left out (what `schedule_set_kinds` gives).
fn without_messages(mut out: PassOutput) -> PassOutput {
    let reasons = out.waiting.iter_mut().map(|w| &mut w.reason).chain(out.untried.iter_mut().map(|u| &mut u.reason));
    for r in reasons {
        r.message.clear();
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn the_incremental_pass_decides_like_the_full_one(
        nodes in prop::collection::vec((1u32..=4, 0u32..=2, 0usize..2), 1..5),
        qa in (0usize..4, 0usize..3, any::<bool>(), any::<bool>()),
        qb in (0usize..4, 0usize..3, any::<bool>(), any::<bool>()),
        steps in prop::collection::vec((prop::collection::vec(job_strategy(), 0..12), any::<u64>(), any::<u64>()), 1..5),
        usage in prop::collection::vec(0u32..5, 7),
    ) {
        let queues = [queue("a", qa), queue("b", qb)];
        let mut ledgers: Vec<NodeLedger> = nodes
            .iter()
            .enumerate()
            .map(|(i, &(cores, gpus, q))| {
                let t = support::topology(cores * 2, cores as u64 * 4 * GIB, gpus, 1, false);
                NodeLedger::new(format!("n{i}"), ["a", "b"][q], t)
            })
            .collect();
        let mut fs = FairShare::default();
        for (k, &x) in usage.iter().enumerate() {
            match k {
                0..4 => fs.usage_by_user.insert(USERS[k].into(), x as f64 * 7.0),
                _ => fs.usage_by_project.insert(PROJECTS[k - 4].into(), x as f64 * 3.0),
            };
        }
        let mut list: BTreeMap<JobId, PendingJob> = BTreeMap::new();
        let mut set = PendingSet::new();
        let mut running: Vec<RunningJob> = Vec::new();
        let mut run_set = RunningSet::new();
        let mut next_id = 1;
        for (t, (submits, cancel, end)) in steps.iter().enumerate() {
            let now = t as i64 * 600_000;
            for spec in submits {
                let j = pending(next_id, spec);
                next_id += 1;
                list.insert(j.id, j.clone());
                set.insert(j);
            }
            let gone: Vec<JobId> = list.keys().copied().filter(|id| cancel >> (id % 64) & 1 == 1).collect();
            for id in gone {
                list.remove(&id);
                prop_assert!(set.remove(id).is_some());
            }
            let (ended, kept): (Vec<RunningJob>, Vec<RunningJob>) =
                running.into_iter().partition(|r| end >> (r.id % 64) & 1 == 1);
            running = kept;
            for r in &ended {
                prop_assert_eq!(run_set.remove(r.id), Some(r.clone()));
                for b in &r.bindings {
                    ledgers.iter_mut().find(|l| l.name() == b.node).unwrap().release(b);
                }
            }
            prop_assert_eq!(set.len(), list.len());
            prop_assert_eq!(run_set.len(), running.len());

            let jobs: Vec<PendingJob> = list.values().cloned().collect();
            let input = PassInput {
                queues: &queues,
                nodes: &ledgers,
                pending: &jobs,
                running: &running,
                fair_share: &fs,
                quotas: &berth_sched::NO_QUOTAS,
                now,
            };
            let full = schedule(&input);
            let inc = schedule_set(&PassInput { pending: &[], running: &[], ..input }, &set, &run_set);
            prop_assert_eq!(&full.starts, &inc.starts);
            prop_assert_eq!(&full.waiting, &inc.waiting);
            prop_assert_eq!(&full.preemptions, &inc.preemptions);
            prop_assert_eq!(&full.borrowed, &inc.borrowed);
            prop_assert_eq!(untried(&full), set.untried_jobs(&inc));
            // The pass without messages decides the same, kinds and all.
            let kinds = schedule_set_kinds(&PassInput { pending: &[], running: &[], ..input }, &set, &run_set);
            prop_assert_eq!(&kinds, &without_messages(inc.clone()));

            // Apply the pass to both: starts run, waiting jobs keep their new counts, victims
            // go back to pending (requeued) with their ids.
            for w in &full.waiting {
                list.get_mut(&w.job).unwrap().blocked_passes = w.blocked_passes;
                prop_assert!(set.set_blocked_passes(w.job, w.blocked_passes));
            }
            for s in &full.starts {
                for b in &s.bindings {
                    ledgers.iter_mut().find(|l| l.name() == b.node).unwrap().allocate(b).unwrap();
                }
                let j = list.remove(&s.job).unwrap();
                prop_assert_eq!(set.remove(s.job), Some(j.clone()));
                let r = support::running_job(&j, s.bindings.clone(), now, j.priority < 1);
                run_set.insert(r.clone());
                running.push(r);
            }
            for p in &full.preemptions {
                let Some(k) = running.iter().position(|r| r.id == p.victim) else { continue };
                let r = running.remove(k);
                prop_assert!(run_set.remove(r.id).is_some());
                for b in &r.bindings {
                    ledgers.iter_mut().find(|l| l.name() == b.node).unwrap().release(b);
                }
                let user = USERS.iter().position(|u| *u == r.user).unwrap();
                let project = PROJECTS.iter().position(|p| *p == r.project).unwrap();
                let q = if r.queue == "a" { 0 } else { 1 };
                let spec = (r.priority, q, 1, 1, 0, 1, user, project, None);
                let j = pending(r.id, &spec);
                list.insert(j.id, j.clone());
                set.insert(j);
            }
        }
    }
}
