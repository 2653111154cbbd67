//! One full scheduling pass over a synthetic cluster: 1k / 10k / 100k pending jobs × 100 / 1k /
//! 10k nodes, with a mix of CPU-only, fractional-GPU and whole-GPU requests and some gangs;
//! the pass after one job finishes (10k × 1k); and an EASY backfill pass with running jobs.
//! `deep`: a queue of 1,000,000 pending jobs on 10,000 nodes (strict and backfill with the
//! default window), a full pass and the pass after one job finishes, the latter also over a
//! persistent `PendingSet` and `RunningSet` (`schedule_set`).
//! Figures only; nothing here asserts a time.

use std::time::Duration;

use berth_model::{NumaPolicy, ResourceRequest, Topology};
use berth_sched::{
    HeadOfLine, NO_FAIR_SHARE, NodeLedger, PassInput, PendingJob, PendingSet, QueueConfig, RunningJob, RunningSet,
    schedule, schedule_set,
};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

const GIB: u64 = 1 << 30;

/// Nodes of 2 NUMA nodes × 32 CPUs, 256GiB and 8 GPUs, a tenth of them already half full.
fn nodes(n: usize) -> Vec<NodeLedger> {
    (0..n)
        .map(|i| {
            let mut l = NodeLedger::new(format!("node{i:05}"), "default", Topology::synthetic(2, 32, 128 * GIB, 4));
            if i % 10 == 0 {
                let r = ResourceRequest { cpu_milli: 32_000, mem_bytes: 128 * GIB, gpu_milli: 4000 };
                let b = l.try_bind(&r, NumaPolicy::PreferLocal).unwrap();
                l.allocate(&b).unwrap();
            }
            l
        })
        .collect()
}

/// A deterministic mix: CPU-only, 0.25/0.5 GPU, 1/2/8 GPUs, every 50th a 2-node gang.
fn jobs(n: usize) -> Vec<PendingJob> {
    (0..n)
        .map(|i| {
            let gpu_milli = [0, 250, 500, 1000, 1000, 2000, 500, 8000][i % 8];
            PendingJob {
                id: i as i64 + 1,
                priority: (i % 3) as i32,
                queue: "default".into(),
                request: ResourceRequest {
                    cpu_milli: 1000 * (1 + (i % 8) as u64),
                    mem_bytes: GIB * (1 + (i % 16) as u64),
                    gpu_milli,
                },
                nodes: if i % 50 == 0 { 2 } else { 1 },
                numa: if i % 7 == 0 { NumaPolicy::RequireLocal } else { NumaPolicy::PreferLocal },
                blocked_passes: 0,
                user: format!("u{}", i % 10),
                project: format!("p{}", i % 3),
                submitted_at: 0,
                time_limit_ms: Some(60_000 * (1 + (i % 120) as i64)),
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
        })
        .collect()
}

/// A pass's input without fair-share history or quotas.
fn pass_input<'a>(
    queues: &'a [QueueConfig],
    nodes: &'a [NodeLedger],
    pending: &'a [PendingJob],
    running: &'a [RunningJob],
    now: i64,
) -> PassInput<'a> {
    PassInput { queues, nodes, pending, running, fair_share: &NO_FAIR_SHARE, quotas: &berth_sched::NO_QUOTAS, now }
}

/// Skip-after-0: every job is tried, the worst case for a pass.
fn queue(hol: HeadOfLine) -> [QueueConfig; 1] {
    [QueueConfig { head_of_line: hol, ..QueueConfig::new("default") }]
}

fn full_pass(c: &mut Criterion) {
    let mut g = c.benchmark_group("pass");
    g.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    let queues = queue(HeadOfLine::SkipAfter(0));
    for cluster in [100, 1_000, 10_000] {
        let nodes = nodes(cluster);
        for pending in [1_000, 10_000, 100_000] {
            let jobs = jobs(pending);
            let input = pass_input(&queues, &nodes, &jobs, &[], 0);
            let out = schedule(&input);
            eprintln!(
                "{pending} pending x {cluster} nodes: {} start, {} wait, {} untried",
                out.starts.len(),
                out.waiting.len(),
                out.untried_jobs().count()
            );
            g.bench_with_input(BenchmarkId::from_parameter(format!("{pending}x{cluster}")), &input, |b, input| {
                b.iter(|| schedule(input))
            });
        }
    }
    g.finish();
}

/// The cluster after a first pass (its starts committed and running), then one job finishes;
/// `want` jobs wait.
fn after_first_pass(
    queues: &[QueueConfig],
    want: usize,
    cluster: usize,
) -> (Vec<NodeLedger>, Vec<PendingJob>, Vec<RunningJob>) {
    let mut nodes = nodes(cluster);
    let jobs = jobs(want);
    let out = schedule(&pass_input(queues, &nodes, &jobs, &[], 0));
    let mut running = Vec::new();
    for s in &out.starts {
        for b in &s.bindings {
            nodes.iter_mut().find(|l| l.name() == b.node).unwrap().allocate(b).unwrap();
        }
        let j = jobs.iter().find(|j| j.id == s.job).unwrap();
        running.push(RunningJob {
            borrowed: false,
            id: j.id,
            queue: j.queue.to_string(),
            priority: j.priority,
            user: j.user.clone(),
            project: j.project.clone(),
            bindings: s.bindings.clone(),
            started_at: 0,
            time_limit_ms: j.time_limit_ms,
            estimate_ms: None,
            attained: 0,
            submitted_at: 0,
            preemptible: false,
        });
    }
    // One job (a 1-GPU one, in the middle) finishes.
    let k = running.iter().position(|r| r.bindings[0].gpus.len() == 1).unwrap_or(0);
    let done = running.remove(k);
    for b in &done.bindings {
        nodes.iter_mut().find(|l| l.name() == b.node).unwrap().release(b);
    }
    let started: std::collections::BTreeSet<i64> = out.starts.iter().map(|s| s.job).collect();
    let mut pending: Vec<PendingJob> = jobs.into_iter().filter(|j| !started.contains(&j.id)).collect();
    // Top up with later submissions so that exactly `want` jobs wait.
    let more = want.saturating_sub(pending.len());
    pending.extend(self::jobs(more).into_iter().map(|mut j| {
        j.id += 1_000_000;
        j
    }));
    (nodes, pending, running)
}

fn incremental(c: &mut Criterion) {
    let mut g = c.benchmark_group("after_one_finish");
    g.sample_size(20).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(2));
    for (name, hol) in
        [("skip0", HeadOfLine::SkipAfter(0)), ("strict", HeadOfLine::Strict), ("backfill", HeadOfLine::Backfill)]
    {
        let queues = queue(hol);
        let (nodes, pending, running) = after_first_pass(&queues, 10_000, 1_000);
        let input = pass_input(&queues, &nodes, &pending, &running, 30_000);
        let out = schedule(&input);
        eprintln!("{name}: {} pending, {} running: {} start", pending.len(), running.len(), out.starts.len());
        g.bench_with_input(BenchmarkId::from_parameter(format!("{name}_10000x1000")), &input, |b, input| {
            b.iter(|| schedule(input))
        });
    }
    g.finish();
}

/// A deep queue: the cost of a pass must not grow with the jobs that cannot start.
fn deep(c: &mut Criterion) {
    let mut g = c.benchmark_group("deep");
    g.sample_size(10).warm_up_time(Duration::from_millis(300)).measurement_time(Duration::from_secs(3));
    for (name, hol) in [("strict", HeadOfLine::Strict), ("backfill", HeadOfLine::Backfill)] {
        let queues = queue(hol);
        let nodes = nodes(10_000);
        let jobs = jobs(1_000_000);
        let input = pass_input(&queues, &nodes, &jobs, &[], 0);
        let out = schedule(&input);
        eprintln!(
            "{name} full: {} start, {} wait, {} untried",
            out.starts.len(),
            out.waiting.len(),
            out.untried_jobs().count()
        );
        g.bench_with_input(BenchmarkId::from_parameter(format!("full_{name}_1000000x10000")), &input, |b, input| {
            b.iter(|| schedule(input))
        });
        let (nodes, pending, running) = after_first_pass(&queues, 1_000_000, 10_000);
        let input = pass_input(&queues, &nodes, &pending, &running, 30_000);
        let out = schedule(&input);
        eprintln!(
            "{name} after one finish: {} pending, {} running: {} start",
            pending.len(),
            running.len(),
            out.starts.len()
        );
        g.bench_with_input(
            BenchmarkId::from_parameter(format!("after_one_finish_{name}_1000000x10000")),
            &input,
            |b, input| b.iter(|| schedule(input)),
        );
        // The same pass over the caller's persistent sets (`schedule_set`): they are kept
        // across passes, so building them is not part of the pass.
        let set: PendingSet = pending.iter().cloned().collect();
        let run_set: RunningSet = running.iter().cloned().collect();
        let input = pass_input(&queues, &nodes, &[], &[], 30_000);
        let out = schedule_set(&input, &set, &run_set);
        eprintln!("{name} after one finish, set: {} start, {} wait", out.starts.len(), out.waiting.len());
        g.bench_with_input(
            BenchmarkId::from_parameter(format!("after_one_finish_set_{name}_1000000x10000")),
            &input,
            |b, input| b.iter(|| schedule_set(input, &set, &run_set)),
        );
    }
    g.finish();
}

criterion_group!(benches, full_pass, incremental, deep);
criterion_main!(benches);
