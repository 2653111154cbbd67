//! The submit-time feasibility check on 500 nodes of four shapes: every node checked
//! (`check_feasible_kernels`, what the manager's admission did per submit) beside once per
//! shape (`NodeShapes::check_kernels`, what it does now), for a request the first node fits,
//! a 4-node gang of the rarest shape, and a refusal (the whole list is read). Figures only.

use berth_model::{NumaPolicy, ResourceRequest, Topology};
use berth_sched::{NodeLedger, NodeShapes, check_feasible_kernels};
use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};

const GIB: u64 = 1 << 30;

/// 500 empty nodes in queue `default`: CPU-only, 4-GPU, 8-GPU and a big-memory kind, each
/// node's GPUs named apart as real machines' are.
fn nodes() -> Vec<NodeLedger> {
    (0..500)
        .map(|i| {
            let mut t = match i % 10 {
                0..=3 => Topology::synthetic(2, 16, 64 * GIB, 0),
                4..=7 => Topology::synthetic(2, 32, 128 * GIB, 2),
                8 => Topology::synthetic(2, 32, 256 * GIB, 4),
                _ => Topology::synthetic(4, 32, 512 * GIB, 0),
            };
            for g in &mut t.gpus {
                g.uuid = format!("GPU-{i}-{}", g.index);
            }
            NodeLedger::new(format!("node{i:04}"), "default", t)
        })
        .collect()
}

fn feasible(c: &mut Criterion) {
    let nodes = nodes();
    let shapes = NodeShapes::new(&nodes);
    let cases = [
        ("fits", ResourceRequest { cpu_milli: 1000, mem_bytes: GIB, gpu_milli: 0 }, 1),
        ("gang-8gpu", ResourceRequest { cpu_milli: 8000, mem_bytes: 32 * GIB, gpu_milli: 8000 }, 4),
        ("refused", ResourceRequest { cpu_milli: 1000, mem_bytes: GIB, gpu_milli: 16_000 }, 1),
    ];
    let mut g = c.benchmark_group("feasible_500_nodes");
    for (name, req, n) in cases {
        let numa = NumaPolicy::PreferLocal;
        g.bench_with_input(BenchmarkId::new("per_node", name), &req, |b, r| {
            b.iter(|| check_feasible_kernels(r, n, 1, numa, &nodes, "default"))
        });
        g.bench_with_input(BenchmarkId::new("per_shape", name), &req, |b, r| {
            b.iter(|| shapes.check_kernels(r, n, 1, numa, "default"))
        });
    }
    g.bench_function("group_500_nodes", |b| b.iter(|| NodeShapes::new(&nodes)));
    g.finish();
}

criterion_group!(benches, feasible);
criterion_main!(benches);
