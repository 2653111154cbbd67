//! Property tests of the scheduler's invariants over random clusters and queues.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use berth_model::{NumaPolicy, PendingKind, ResourceRequest};
use berth_sched::{
    FairShare, HeadOfLine, NO_FAIR_SHARE, NodeLedger, Ordering, PassInput, PassOutput, PendingJob, PreemptAction,
    Preemption, QueueConfig, RunningJob, Scoring, schedule,
};
use proptest::prelude::*;

const GIB: u64 = 1 << 30;
const POLICIES: [NumaPolicy; 5] = [
    NumaPolicy::PreferLocal,
    NumaPolicy::RequireLocal,
    NumaPolicy::SingleNode,
    NumaPolicy::Interleave,
    NumaPolicy::None,
];

fn node_strategy() -> impl Strategy<Value = (u32, u32, bool, u32, u64, usize, bool)> {
    // (numa, cores per numa, smt, gpus, GiB per numa, queue, schedulable)
    (1u32..=2, 1u32..=4, any::<bool>(), 0u32..=4, 1u64..=8, 0usize..2, prop::bool::weighted(0.85))
}

fn build_nodes(specs: &[(u32, u32, bool, u32, u64, usize, bool)]) -> Vec<NodeLedger> {
    specs
        .iter()
        .enumerate()
        .map(|(i, &(numa, cores, smt, gpus, gib, q, up))| {
            let threads = if smt { 2 } else { 1 };
            let t = support::topology(numa * cores * threads, numa as u64 * gib * GIB, gpus, numa, smt);
            let mut l = NodeLedger::new(format!("n{i}"), ["a", "b"][q], t);
            l.set_schedulable(up);
            // Half the nodes offer feature f0, the other half f1.
            l.set_labels([(format!("f{}", i % 2), "yes".to_string())].into());
            l
        })
        .collect()
}

fn request_strategy() -> impl Strategy<Value = ResourceRequest> {
    (0u64..=12, 0u64..=24, prop::sample::select(vec![0u64, 0, 250, 500, 700, 1000, 2000, 3000])).prop_map(
        |(half_cpus, quarter_gib, gpu_milli)| ResourceRequest {
            cpu_milli: half_cpus * 500,
            mem_bytes: quarter_gib * (GIB / 4),
            gpu_milli,
        },
    )
}

fn job_strategy() -> impl Strategy<Value = (i32, usize, ResourceRequest, u32, usize, u32)> {
    // (priority, queue, request, nodes, numa policy, blocked passes)
    (-2i32..=2, 0usize..3, request_strategy(), prop::sample::select(vec![1u32, 1, 1, 2, 3]), 0usize..5, 0u32..=3)
}

fn build_jobs(specs: &[(i32, usize, ResourceRequest, u32, usize, u32)], first_id: i64) -> Vec<PendingJob> {
    specs
        .iter()
        .enumerate()
        .map(|(i, &(priority, q, request, nodes, p, blocked))| PendingJob {
            id: first_id + i as i64,
            priority,
            queue: ["a", "b", "nope"][q].into(),
            request,
            nodes,
            numa: POLICIES[p],
            blocked_passes: blocked,
            user: "u".into(),
            project: "u".into(),
            submitted_at: 0,
            time_limit_ms: None,
            estimate_ms: None,
            attained: 0,
            image: None,
            kernels: 1,
            mounts: Vec::new(),
            // Every third job prefers nodes holding its data: the invariants hold all the same.
            data_on: if i % 3 == 0 { vec![(format!("n{}", i % 4), (i as u64 + 1) << 20)] } else { Vec::new() },
            avoid: Vec::new(),
            // Some jobs ask for node features, some for whole nodes.
            constraint: [None, Some("f0"), Some("f0|f1"), None][i % 4].map(|c| c.parse().unwrap()),
            exclusive: i % 5 == 2,
            folders: false,
        })
        .collect()
}

fn queues(skip: u32) -> Vec<QueueConfig> {
    vec![
        QueueConfig { head_of_line: HeadOfLine::Strict, ..QueueConfig::new("a") },
        QueueConfig { head_of_line: HeadOfLine::SkipAfter(skip), ..QueueConfig::new("b") },
    ]
}

/// Checks every invariant of one pass and returns the ledgers with its starts applied.
fn check_pass(qs: &[QueueConfig], nodes: &[NodeLedger], pending: &[PendingJob], out: &PassOutput) -> Vec<NodeLedger> {
    // Every pending job exactly once.
    let mut seen: Vec<i64> = out
        .starts
        .iter()
        .map(|s| s.job)
        .chain(out.waiting.iter().map(|w| w.job))
        .chain(out.untried_jobs().map(|(id, ..)| id))
        .collect();
    seen.sort_unstable();
    let mut want: Vec<i64> = pending.iter().map(|j| j.id).collect();
    want.sort_unstable();
    assert_eq!(seen, want, "every pending job appears exactly once");

    let by_id: BTreeMap<i64, &PendingJob> = pending.iter().map(|j| (j.id, j)).collect();
    let mut after: Vec<NodeLedger> = nodes.to_vec();
    for s in &out.starts {
        let job = by_id[&s.job];
        // Gang: all kernels, on distinct ready nodes of the job's queue.
        assert_eq!(s.bindings.len(), job.nodes.max(1) as usize, "gang all-or-nothing");
        let distinct: BTreeSet<&str> = s.bindings.iter().map(|b| b.node.as_str()).collect();
        assert_eq!(distinct.len(), s.bindings.len(), "kernels on distinct nodes");
        for b in &s.bindings {
            let l = after.iter_mut().find(|l| l.name() == b.node).expect("known node");
            assert_eq!(l.queue(), &*job.queue);
            assert!(l.schedulable());
            assert!(l.offers(job), "job {} on node {} without its features", job.id, b.node);
            if job.exclusive {
                // The whole node, which ran nothing; the ledger then refuses anything beside it.
                assert_eq!(l.allocations(), 0, "exclusive job {} on a busy node", job.id);
                assert_eq!((b.cpus.len() as u32, b.mem_bytes), (l.cpus_total(), l.mem_total()));
                assert_eq!(b.gpus.len(), l.topology().gpus.len());
                assert!(b.cpus.len() as u32 >= job.request.whole_cpus() && b.mem_bytes >= job.request.mem_bytes);
                l.allocate(b).unwrap_or_else(|e| panic!("start of job {} does not fit: {e}", s.job));
                continue;
            }
            assert_eq!(b.cpus.len() as u32, job.request.whole_cpus());
            assert_eq!((b.cpu_milli, b.mem_bytes), (job.request.cpu_milli, job.request.mem_bytes));
            assert_eq!(b.gpus.iter().map(|g| g.milli).sum::<u64>(), job.request.gpu_milli);
            if job.request.gpu_milli < 1000 {
                assert!(b.gpus.len() <= 1, "a fraction sits on one GPU");
            } else {
                assert!(b.gpus.iter().all(|g| g.milli == 1000));
            }
            let topo = l.topology();
            let numa_of = |cpu: u32| topo.cpus.iter().find(|c| c.id == cpu).unwrap().numa;
            if matches!(job.numa, NumaPolicy::RequireLocal | NumaPolicy::SingleNode) {
                assert_eq!(b.mems.len(), 1, "{:?} uses one memory node", job.numa);
                assert!(b.cpus.iter().all(|&c| numa_of(c) == b.mems[0]));
            }
            if job.numa == NumaPolicy::SingleNode {
                for g in &b.gpus {
                    let gn = topo.gpus.iter().find(|x| x.index == g.index).unwrap().numa;
                    assert!(gn == Some(b.mems[0]) || topo.numa_nodes.len() == 1);
                }
            }
            // No double booking: the ledger refuses any.
            l.allocate(b).unwrap_or_else(|e| panic!("start of job {} does not fit: {e}", s.job));
        }
    }
    for l in &after {
        assert!(l.cpus_used() <= l.topology().cpus.len() as u32);
        assert!(l.mem_used() <= l.topology().mem_bytes);
        for g in &l.topology().gpus {
            assert!(l.gpu_used_milli(g.index) <= 1000);
        }
    }

    // Strict queues: nothing after a job that waits for resources starts.
    for q in qs.iter().filter(|q| q.head_of_line == HeadOfLine::Strict) {
        let mut order: Vec<&PendingJob> = pending.iter().filter(|j| *j.queue == *q.name).collect();
        order.sort_by_key(|j| (std::cmp::Reverse(j.priority), j.id));
        let pos = |id: i64| order.iter().position(|j| j.id == id).unwrap();
        let first_blocked = out
            .waiting
            .iter()
            .filter(|w| w.reason.kind == PendingKind::Resources && *by_id[&w.job].queue == *q.name)
            .map(|w| pos(w.job))
            .min();
        if let Some(b) = first_blocked {
            assert!(out.starts.iter().filter(|s| *by_id[&s.job].queue == *q.name).all(|s| pos(s.job) < b));
        }
    }
    for w in &out.waiting {
        let job = by_id[&w.job];
        assert!(w.blocked_passes == job.blocked_passes || w.blocked_passes == job.blocked_passes + 1);
        if w.reason.kind == PendingKind::Queue {
            assert_eq!(&*job.queue, "nope");
        }
    }
    after
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn passes_keep_every_invariant(
        node_specs in prop::collection::vec(node_strategy(), 0..6),
        first in prop::collection::vec(job_strategy(), 0..20),
        second in prop::collection::vec(job_strategy(), 0..20),
        finish_mask in any::<u64>(),
        skip in 0u32..3,
    ) {
        let qs = queues(skip);
        let nodes = build_nodes(&node_specs);
        let pending = build_jobs(&first, 1);
        let out = schedule(&PassInput { queues: &qs, nodes: &nodes, pending: &pending, running: &[], fair_share: &NO_FAIR_SHARE, quotas: &berth_sched::NO_QUOTAS, now: 0 });
        let mut nodes = check_pass(&qs, &nodes, &pending, &out);

        // Same input, same output, whatever the order of the input slices.
        let before = build_nodes(&node_specs);
        prop_assert_eq!(&schedule(&PassInput { queues: &qs, nodes: &before, pending: &pending, running: &[], fair_share: &NO_FAIR_SHARE, quotas: &berth_sched::NO_QUOTAS, now: 0 }), &out);
        let mut rev_before = before.clone();
        rev_before.reverse();
        let mut rev_pending = pending.clone();
        rev_pending.reverse();
        prop_assert_eq!(&schedule(&PassInput { queues: &qs, nodes: &rev_before, pending: &rev_pending, running: &[], fair_share: &NO_FAIR_SHARE, quotas: &berth_sched::NO_QUOTAS, now: 0 }), &out);

        // Finish some of the started jobs, then run a second pass on the fragmented cluster.
        for (i, s) in out.starts.iter().enumerate() {
            if finish_mask >> (i % 64) & 1 == 1 {
                for b in &s.bindings {
                    nodes.iter_mut().find(|l| l.name() == b.node).unwrap().release(b);
                }
            }
        }
        let mut pending2: Vec<PendingJob> =
            pending.iter().filter(|j| !out.starts.iter().any(|s| s.job == j.id)).cloned().collect();
        pending2.extend(build_jobs(&second, 1000));
        let out2 = schedule(&PassInput { queues: &qs, nodes: &nodes, pending: &pending2, running: &[], fair_share: &NO_FAIR_SHARE, quotas: &berth_sched::NO_QUOTAS, now: 0 });
        check_pass(&qs, &nodes, &pending2, &out2);
    }

    #[test]
    fn allocate_then_release_restores_the_ledger(
        spec in node_strategy(),
        reqs in prop::collection::vec((request_strategy(), 0usize..5), 1..30),
        order_seed in any::<u64>(),
    ) {
        let empty = build_nodes(&[spec]).remove(0);
        let mut l = empty.clone();
        l.set_schedulable(true);
        let start = l.clone();
        let mut held = Vec::new();
        let mut states = vec![l.clone()];
        for (r, p) in &reqs {
            if let Ok(b) = l.try_bind(r, POLICIES[*p]) {
                l.allocate(&b).unwrap();
                // A second allocate of the same binding is a double booking whenever it holds
                // a CPU or a whole GPU, and must change nothing when refused.
                let snapshot = l.clone();
                if !b.cpus.is_empty() && l.allocate(&b).is_ok() {
                    prop_assert!(false, "double booking accepted: {:?}", b);
                }
                prop_assert_eq!(&l, &snapshot);
                held.push(b);
                states.push(l.clone());
            }
        }
        // Undo in reverse: every intermediate state comes back exactly.
        let mut lifo = l.clone();
        for (i, b) in held.iter().enumerate().rev() {
            lifo.release(b);
            prop_assert_eq!(&lifo, &states[i]);
        }
        // Undo in a scrambled order: the empty ledger comes back.
        let mut idx: Vec<usize> = (0..held.len()).collect();
        idx.sort_by_key(|&i| (i as u64).wrapping_mul(order_seed | 1).rotate_left(17));
        for &i in &idx {
            l.release(&held[i]);
            l.release(&held[i]);
        }
        prop_assert_eq!(l.cpus_used(), 0);
        prop_assert_eq!(l.mem_used(), 0);
        prop_assert_eq!(&l, &start);
    }
}

/// A queue with random policies: (ordering, head of line 0 strict / 1 skip / 2 backfill,
/// spread, preemption with min runtime in minutes).
fn policy_strategy() -> impl Strategy<Value = (usize, usize, bool, Option<i64>)> {
    (0usize..4, 0usize..3, any::<bool>(), prop::option::of(0i64..30))
}

fn policy_queue(name: &str, (o, h, spread, pre): (usize, usize, bool, Option<i64>)) -> QueueConfig {
    let mut q = QueueConfig::new(name);
    q.ordering = [Ordering::Fifo, Ordering::Lifo, Ordering::Drf, Ordering::FairShare][o];
    q.head_of_line = [HeadOfLine::Strict, HeadOfLine::SkipAfter(1), HeadOfLine::Backfill][h];
    q.scoring = if spread { Scoring::Spread } else { Scoring::Binpack };
    q.preemption = pre.map(|m| Preemption { action: PreemptAction::Requeue, min_runtime_ms: m * 60_000 });
    q.default_time_limit_ms = 3_600_000;
    q
}

/// Runs `jobs` on the empty cluster to get running jobs, with random start times, limits,
/// preemptibility and users.
fn start_some(qs: &[QueueConfig], nodes: &mut [NodeLedger], jobs: &[PendingJob], seed: u64) -> Vec<RunningJob> {
    let out = schedule(&PassInput {
        queues: qs,
        nodes,
        pending: jobs,
        running: &[],
        fair_share: &NO_FAIR_SHARE,
        quotas: &berth_sched::NO_QUOTAS,
        now: 0,
    });
    out.starts
        .iter()
        .enumerate()
        .map(|(k, s)| {
            for b in &s.bindings {
                nodes.iter_mut().find(|l| l.name() == b.node).unwrap().allocate(b).unwrap();
            }
            let j = jobs.iter().find(|j| j.id == s.job).unwrap();
            let r = seed.wrapping_mul(k as u64 * 2 + 1).rotate_left(k as u32 % 64);
            RunningJob {
                borrowed: false,
                id: j.id,
                queue: j.queue.to_string(),
                priority: j.priority,
                user: j.user.clone(),
                project: j.project.clone(),
                bindings: s.bindings.clone(),
                started_at: -((r % 120) as i64) * 60_000,
                time_limit_ms: if r & 1 == 0 { None } else { Some(((r >> 8) % 180 + 1) as i64 * 60_000) },
                estimate_ms: None,
                attained: 0,
                submitted_at: 0,
                preemptible: r & 2 == 0,
            }
        })
        .collect()
}

/// Whether `job` alone can start on these ledgers.
fn fits(qs: &[QueueConfig], nodes: &[NodeLedger], job: &PendingJob) -> bool {
    let mut j = job.clone();
    j.blocked_passes = 0;
    let qs: Vec<QueueConfig> = qs.iter().map(|q| QueueConfig { preemption: None, ..q.clone() }).collect();
    let out = schedule(&PassInput {
        queues: &qs,
        nodes,
        pending: &[j],
        running: &[],
        fair_share: &NO_FAIR_SHARE,
        quotas: &berth_sched::NO_QUOTAS,
        now: 0,
    });
    out.starts.len() == 1
}

fn release(nodes: &mut [NodeLedger], bindings: &[berth_model::Binding]) {
    for b in bindings {
        if let Some(l) = nodes.iter_mut().find(|l| l.name() == b.node) {
            l.release(b);
        }
    }
}

type NodeSpec = (u32, u32, bool, u32, u64, usize, bool);
type JobSpec = (i32, usize, ResourceRequest, u32, usize, u32);
type PolicySpec = (usize, usize, bool, Option<i64>);

proptest! {
    #![proptest_config(ProptestConfig { cases: 500, ..ProptestConfig::default() })]

    #[test]
    fn policies_keep_every_invariant(
        node_specs in prop::collection::vec(node_strategy(), 1..6),
        first in prop::collection::vec(job_strategy(), 4..30),
        second in prop::collection::vec(job_strategy(), 0..16),
        users in prop::collection::vec(0usize..3, 32),
        pa in policy_strategy(),
        pb in policy_strategy(),
        seed in any::<u64>(),
        now_min in 0i64..120,
    ) {
        check_policies(&node_specs, &first, &second, &users, pa, pb, seed, now_min)?;
    }
}

/// Regression: a backfill reservation was made on a node where the job's NUMA-local placement
/// did not fit at the reserved start ("job 1000 does not fit at its reserved start", found by
/// `policies_keep_every_invariant` in CI).
#[test]
fn reservation_fits_the_numa_placement_at_its_start() {
    let req = |cpu_milli, mem_bytes, gpu_milli| ResourceRequest { cpu_milli, mem_bytes, gpu_milli };
    let nodes = [(2, 3, true, 4, 5, 1, false)];
    let first = [
        (0, 1, req(0, 1_610_612_736, 250), 1, 0, 0),
        (1, 1, req(4500, 5_637_144_576, 2000), 1, 4, 0),
        (0, 0, req(0, 0, 0), 1, 0, 0),
        (0, 2, req(0, 0, 0), 1, 0, 0),
    ];
    let second = [(1, 1, req(0, 3_489_660_928, 0), 1, 1, 0), (0, 1, req(0, 2_952_790_016, 0), 1, 3, 0)];
    check_policies(&nodes, &first, &second, &[0; 32], (0, 0, false, None), (0, 2, false, None), 3493714048149019503, 0)
        .unwrap();
}

/// One case of `policies_keep_every_invariant`: runs some jobs, then one pass under queues
/// `a` and `b` with the given policies, and checks preemption and backfill invariants.
#[allow(clippy::too_many_arguments)]
fn check_policies(
    node_specs: &[NodeSpec],
    first: &[JobSpec],
    second: &[JobSpec],
    users: &[usize],
    pa: PolicySpec,
    pb: PolicySpec,
    seed: u64,
    now_min: i64,
) -> Result<(), TestCaseError> {
    let qs = vec![policy_queue("a", pa), policy_queue("b", pb)];
    let mut nodes = build_nodes(node_specs);
    for l in &mut nodes {
        l.set_schedulable(true);
    }
    let name = |i: usize| ["ann", "bob", "cy"][users[i % users.len()]].to_string();
    let with_users = |mut js: Vec<PendingJob>| {
        for (i, j) in js.iter_mut().enumerate() {
            j.user = name(i);
            j.project = format!("p{}", users[(i + 7) % users.len()]);
            j.time_limit_ms =
                if users[(i + 3) % users.len()] == 0 { None } else { Some((i as i64 % 5 + 1) * 1_200_000) };
        }
        js
    };
    let running = start_some(&qs, &mut nodes, &with_users(build_jobs(first, 1)), seed);
    // Later jobs tend to rank higher, so that preemption has candidates.
    let pending: Vec<PendingJob> = with_users(build_jobs(second, 1000))
        .into_iter()
        .map(|mut j| {
            j.priority += 1;
            j
        })
        .collect();
    let mut fs = FairShare::default();
    fs.usage_by_user.insert("ann".into(), 10.0);
    fs.usage_by_project.insert("p1".into(), 5.0);
    fs.project_weights.insert("p2".into(), 2.0);
    let now = now_min * 60_000;
    let input = PassInput {
        queues: &qs,
        nodes: &nodes,
        pending: &pending,
        running: &running,
        fair_share: &fs,
        quotas: &berth_sched::NO_QUOTAS,
        now,
    };
    let out = schedule(&input);
    let after = check_pass(&[], &nodes, &pending, &out);

    // Same output whatever the order of the inputs.
    let (mut n2, mut p2, mut r2) = (nodes.clone(), pending.clone(), running.clone());
    n2.reverse();
    let half = p2.len() / 2;
    p2.rotate_left(half);
    r2.reverse();
    let shuffled = PassInput {
        queues: &qs,
        nodes: &n2,
        pending: &p2,
        running: &r2,
        fair_share: &fs,
        quotas: &berth_sched::NO_QUOTAS,
        now,
    };
    prop_assert_eq!(&schedule(&shuffled), &out);

    let by_id: BTreeMap<i64, &PendingJob> = pending.iter().map(|j| (j.id, j)).collect();
    let run_by_id: BTreeMap<i64, &RunningJob> = running.iter().map(|r| (r.id, r)).collect();
    let queue_of = |name: &str| qs.iter().find(|q| q.name == name).cloned();

    // Preemption: allowed victims only, each once, preemptors do not start now.
    let mut seen = BTreeSet::new();
    for p in &out.preemptions {
        let (v, j) = (run_by_id[&p.victim], by_id[&p.for_job]);
        let q = queue_of(&j.queue).unwrap();
        let policy = q.preemption.expect("preemption only where enabled");
        prop_assert!(v.preemptible && v.priority < j.priority && *v.queue == *j.queue);
        prop_assert!(now - v.started_at >= policy.min_runtime_ms);
        prop_assert!(seen.insert(p.victim), "victim {} chosen twice", p.victim);
        prop_assert!(!out.starts.iter().any(|s| s.job == p.for_job));
    }
    // The first preemptor of each queue (before any node was held) needs every victim.
    for qname in ["a", "b"] {
        let Some(first) = out.preemptions.iter().find(|p| *by_id[&p.for_job].queue == *qname) else { continue };
        let job = by_id[&first.for_job];
        let victims: Vec<&RunningJob> =
            out.preemptions.iter().filter(|p| p.for_job == job.id).map(|p| run_by_id[&p.victim]).collect();
        let mut all = after.clone();
        for v in &victims {
            release(&mut all, &v.bindings);
        }
        prop_assert!(fits(&qs, &all, job), "job {} does not fit once its victims stop", job.id);
        for keep in &victims {
            let mut some = after.clone();
            for v in victims.iter().filter(|v| v.id != keep.id) {
                release(&mut some, &v.bindings);
            }
            prop_assert!(!fits(&qs, &some, job), "victim {} of job {} is not needed", keep.id, job.id);
        }
    }

    // Backfill: the reserved job fits at its reserved start once every binding that ends
    // by then (running jobs, this pass's starts) is released.
    for w in out.waiting.iter().filter(|w| w.expected_start.is_some()) {
        let t = w.expected_start.unwrap();
        let job = by_id[&w.job];
        let default = |q: &str| queue_of(q).map_or(3_600_000, |q| q.default_time_limit_ms);
        let mut at_t = after.clone();
        for r in &running {
            let end = (r.started_at + r.time_limit_ms.unwrap_or_else(|| default(&r.queue))).max(now);
            if end <= t {
                release(&mut at_t, &r.bindings);
            }
        }
        for s in &out.starts {
            let j = by_id[&s.job];
            if now + j.time_limit_ms.unwrap_or_else(|| default(&j.queue)) <= t {
                release(&mut at_t, &s.bindings);
            }
        }
        prop_assert!(fits(&qs, &at_t, job), "job {} does not fit at its reserved start", job.id);
        prop_assert_eq!(queue_of(&job.queue).unwrap().head_of_line, HeadOfLine::Backfill);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    /// Whatever the cluster, the jobs and the current use, a pass never takes a user or a
    /// project past a limit, and every job it leaves waiting for quota really would break one.
    #[test]
    fn quotas_are_never_exceeded(
        node_specs in prop::collection::vec(node_strategy(), 1..6),
        jobs in prop::collection::vec((job_strategy(), 0usize..3, 0usize..2), 0..30),
        limits in prop::collection::vec((prop::option::of(0u64..4000), prop::option::of(0u64..8000), prop::option::of(0u32..4)), 5),
        used in prop::collection::vec((0u64..2000, 0u64..4000, 0u32..3), 5),
        borrow in prop::collection::vec((prop::option::of(0u64..2000), prop::option::of(0u64..4000)), 5),
    ) {
        use berth_model::QuotaLimits;
        use berth_sched::{QuotaUse, Quotas};
        let qs = queues(1);
        let nodes = build_nodes(&node_specs);
        let users = ["u0", "u1", "u2"];
        let projects = ["p0", "p1"];
        let mut pending = build_jobs(&jobs.iter().map(|(j, _, _)| *j).collect::<Vec<_>>(), 1);
        for (p, (_, u, pr)) in pending.iter_mut().zip(&jobs) {
            p.user = users[*u].into();
            p.project = projects[*pr].into();
        }
        let mut quotas = Quotas::default();
        let names: Vec<(bool, &str)> = users.iter().map(|u| (true, *u)).chain(projects.iter().map(|p| (false, *p))).collect();
        for (i, (is_user, name)) in names.iter().enumerate() {
            let (gpu, cpu, run) = limits[i];
            let (borrow_gpu_milli, borrow_cpu_milli) = borrow[i];
            let l = QuotaLimits { gpu_milli: gpu, cpu_milli: cpu, running_jobs: run, borrow_gpu_milli, borrow_cpu_milli, ..Default::default() };
            let u = QuotaUse { gpu_milli: used[i].0, cpu_milli: used[i].1, mem_bytes: 0, running_jobs: used[i].2 };
            if *is_user {
                quotas.users.insert(name.to_string(), l);
                quotas.used_by_user.insert(name.to_string(), u);
            } else {
                quotas.projects.insert(name.to_string(), l);
                quotas.used_by_project.insert(name.to_string(), u);
            }
        }
        let out = schedule(&PassInput { queues: &qs, nodes: &nodes, pending: &pending, running: &[], fair_share: &NO_FAIR_SHARE, quotas: &quotas, now: 0 });
        let mut borrowed_now = BTreeSet::new();
        let mut by_user = quotas.used_by_user.clone();
        let mut by_project = quotas.used_by_project.clone();
        for s in &out.starts {
            let j = pending.iter().find(|j| j.id == s.job).unwrap();
            let add = QuotaUse::of(&j.request, j.nodes);
            for (map, limits, name) in [(&mut by_user, &quotas.users, &j.user), (&mut by_project, &quotas.projects, &j.project)] {
                let before = map[name.as_str()];
                let l = limits[name.as_str()];
                let mut after = before;
                after.add(&add);
                let over = l.gpu_milli.is_some_and(|m| add.gpu_milli > 0 && after.gpu_milli > m)
                    || l.cpu_milli.is_some_and(|m| after.cpu_milli > m);
                if over {
                    borrowed_now.insert(s.job);
                }
                // A limit already exceeded by running jobs only blocks jobs that add to it.
                // Borrowing may go past a GPU or CPU limit by at most its borrowing allowance.
                let bg = l.borrow_gpu_milli.unwrap_or(0);
                let bc = l.borrow_cpu_milli.unwrap_or(0);
                if let Some(m) = l.gpu_milli { prop_assert!(add.gpu_milli == 0 || after.gpu_milli <= m + bg, "gpu of {name}: {after:?} > {m}+{bg}"); }
                if let Some(m) = l.cpu_milli { prop_assert!(after.cpu_milli <= m + bc, "cpu of {name}: {after:?} > {m}+{bc}"); }
                if let Some(m) = l.running_jobs { prop_assert!(after.running_jobs <= m, "jobs of {name}: {after:?} > {m}"); }
                map.insert(name.clone(), after);
            }
        }
        // A start is marked borrowed exactly when it took its user or project past a limit.
        for s in &out.starts {
            prop_assert_eq!(out.borrowed.contains(&s.job), borrowed_now.contains(&s.job));
        }
        for w in out.waiting.iter().filter(|w| w.reason.kind == PendingKind::Quota) {
            prop_assert!(w.reason.message.starts_with("quota: "), "{}", w.reason.message);
        }
    }
}
