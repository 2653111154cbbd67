//! One full scheduling pass over a synthetic cluster: 1k pending jobs × 100 nodes and
//! 10k × 1k, with a mix of CPU-only, fractional-GPU and whole-GPU requests and some gangs.
//! Figures only; nothing here asserts a time.

use std::time::Duration;

use berth_model::{NumaPolicy, ResourceRequest, Topology};
use berth_sched::{HeadOfLine, NO_FAIR_SHARE, NodeLedger, PassInput, PendingJob, QueueConfig, schedule};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

const GIB: u64 = 1 << 30;

/// Nodes of 2 NUMA nodes × 32 CPUs, 256GiB and 8 GPUs, a tenth of them already half full.
fn nodes(n: usize) -> Vec<NodeLedger> {
    (0..n)
        .map(|i| {
            let mut l = NodeLedger::new(format!("node{i:04}"), "default", Topology::synthetic(2, 32, 128 * GIB, 4));
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
                user: "u".into(),
                project: "u".into(),
                submitted_at: 0,
                time_limit_ms: None,
            }
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("pass");
    g.sample_size(10).warm_up_time(Duration::from_millis(500)).measurement_time(Duration::from_secs(3));
    for (pending, cluster) in [(1_000, 100), (10_000, 1_000)] {
        let nodes = nodes(cluster);
        let jobs = jobs(pending);
        // Skip-after-0: every job is tried, the worst case for a pass.
        let queues = [QueueConfig { head_of_line: HeadOfLine::SkipAfter(0), ..QueueConfig::new("default") }];
        let input = PassInput {
            queues: &queues,
            nodes: &nodes,
            pending: &jobs,
            running: &[],
            fair_share: &NO_FAIR_SHARE,
            now: 0,
        };
        let out = schedule(&input);
        eprintln!("{pending} pending x {cluster} nodes: {} start, {} wait", out.starts.len(), out.waiting.len());
        g.bench_with_input(BenchmarkId::from_parameter(format!("{pending}x{cluster}")), &input, |b, input| {
            b.iter(|| schedule(input))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
