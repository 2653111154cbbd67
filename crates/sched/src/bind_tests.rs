//! Unit tests of the node-level allocator: GPU fractions, whole GPUs, NUMA policies, SMT.

use berth_model::{Binding, NumaPolicy, ResourceRequest};

use super::*;
use crate::test_support::smt;

const GIB: u64 = 1 << 30;

fn req(cpus: u64, mem_gib: u64, gpu_milli: u64) -> ResourceRequest {
    ResourceRequest { cpu_milli: cpus * 1000, mem_bytes: mem_gib * GIB, gpu_milli }
}

/// Binds and commits, like a pass does.
fn take(l: &mut NodeLedger, r: ResourceRequest, p: NumaPolicy) -> Binding {
    let b = l.try_bind(&r, p).unwrap();
    l.allocate(&b).unwrap();
    b
}

fn gpus(b: &Binding) -> Vec<(u32, u64)> {
    b.gpus.iter().map(|g| (g.index, g.milli)).collect()
}

/// Two NUMA nodes of 4 cores × 2 threads (CPUs 0-3,8-11 and 4-7,12-15), 16GiB each, one GPU
/// on each (GPU-0 on node 0, GPU-1 on node 1).
fn node() -> NodeLedger {
    NodeLedger::new("n1", "default", smt(2, 4, 16 * GIB, 1))
}

#[test]
fn binding_carries_the_exact_request() {
    let l = node();
    let r = ResourceRequest { cpu_milli: 1500, mem_bytes: 3 * GIB, gpu_milli: 250 };
    let b = l.try_bind(&r, NumaPolicy::PreferLocal).unwrap();
    assert_eq!(b.node, "n1");
    assert_eq!(b.cpus, [0, 8], "1.5 CPUs round up to one whole core");
    assert_eq!((b.cpu_milli, b.mem_bytes), (1500, 3 * GIB));
    assert_eq!(b.mems, [0]);
    assert_eq!(b.gpus[0].uuid, "GPU-0");
    assert_eq!(gpus(&b), [(0, 250)]);
}

#[test]
fn fractions_pack_onto_shared_gpus_first() {
    let mut l = node();
    take(&mut l, req(1, 1, 300), NumaPolicy::PreferLocal);
    // GPU-0 has 0.7 free, GPU-1 1.0: best fit keeps GPU-1 whole.
    let b = take(&mut l, req(1, 1, 500), NumaPolicy::PreferLocal);
    assert_eq!(gpus(&b), [(0, 500)]);
    // 0.2 left on GPU-0: 0.3 does not fit there, so it opens GPU-1.
    let b = take(&mut l, req(1, 1, 300), NumaPolicy::PreferLocal);
    assert_eq!(gpus(&b), [(1, 300)]);
    assert_eq!(b.mems, [1], "CPUs follow the GPU");
    // 0.2 fits both (0.2 and 0.7 free): the fuller one wins.
    let b = take(&mut l, req(1, 1, 200), NumaPolicy::PreferLocal);
    assert_eq!(gpus(&b), [(0, 200)]);
}

#[test]
fn half_and_half_share_a_gpu_but_half_and_seven_tenths_do_not() {
    let mut l = NodeLedger::new("n1", "default", smt(1, 4, 16 * GIB, 1));
    take(&mut l, req(1, 1, 500), NumaPolicy::PreferLocal);
    assert_eq!(
        l.try_bind(&req(1, 1, 700), NumaPolicy::PreferLocal).unwrap_err().to_string(),
        "needs 0.7 GPU, node n1 has 0.5 free"
    );
    take(&mut l, req(1, 1, 500), NumaPolicy::PreferLocal);
    assert_eq!(l.gpu_used_milli(0), 1000);
    assert_eq!(
        l.try_bind(&req(1, 1, 500), NumaPolicy::PreferLocal).unwrap_err().to_string(),
        "needs 0.5 GPU, node n1 has 0 free"
    );
}

#[test]
fn whole_gpus_need_untouched_devices() {
    let mut l = node();
    take(&mut l, req(1, 1, 500), NumaPolicy::PreferLocal);
    take(&mut l, req(1, 1, 500), NumaPolicy::PreferLocal);
    let b = take(&mut l, req(1, 1, 1000), NumaPolicy::PreferLocal);
    assert_eq!(gpus(&b), [(1, 1000)]);
    let mut l = node();
    take(&mut l, req(1, 1, 500), NumaPolicy::PreferLocal);
    assert_eq!(
        l.try_bind(&req(1, 1, 2000), NumaPolicy::PreferLocal).unwrap_err().to_string(),
        "needs 2 GPUs, node n1 has 1.5 free"
    );
    let mut l = NodeLedger::new("n1", "default", smt(1, 4, 16 * GIB, 1));
    take(&mut l, req(1, 1, 500), NumaPolicy::PreferLocal);
    assert_eq!(
        l.try_bind(&req(1, 1, 1000), NumaPolicy::PreferLocal).unwrap_err().to_string(),
        "needs 1 GPU, node n1 has 0.5 free"
    );
}

#[test]
fn whole_gpus_come_from_one_numa_node_when_possible() {
    // Two GPUs per NUMA node: GPU-0,1 on node 0 and GPU-2,3 on node 1.
    let mut l = NodeLedger::new("n1", "default", smt(2, 4, 16 * GIB, 2));
    take(&mut l, req(1, 1, 1000), NumaPolicy::PreferLocal);
    let b = take(&mut l, req(2, 1, 2000), NumaPolicy::PreferLocal);
    assert_eq!(gpus(&b), [(2, 1000), (3, 1000)]);
    assert_eq!(b.mems, [1]);
    assert!(b.cpus.iter().all(|c| (4..8).contains(c) || (12..16).contains(c)), "{:?}", b.cpus);
    // A single GPU goes where only one is free (best fit), keeping pairs together.
    let mut l = NodeLedger::new("n1", "default", smt(2, 4, 16 * GIB, 2));
    take(&mut l, req(1, 1, 1000), NumaPolicy::PreferLocal);
    let b = take(&mut l, req(1, 1, 1000), NumaPolicy::PreferLocal);
    assert_eq!(gpus(&b), [(1, 1000)]);
    // Three GPUs span nodes.
    let b = take(&mut NodeLedger::new("n1", "default", smt(2, 4, 16 * GIB, 2)), req(1, 1, 3000), NumaPolicy::None);
    assert_eq!(gpus(&b), [(0, 1000), (1, 1000), (2, 1000)]);
}

#[test]
fn smt_takes_whole_cores_and_fills_split_cores_first() {
    let mut l = node();
    let b = take(&mut l, req(2, 1, 0), NumaPolicy::PreferLocal);
    assert_eq!(b.cpus, [0, 8], "both siblings of core 0");
    let b = take(&mut l, req(3, 1, 0), NumaPolicy::PreferLocal);
    assert_eq!(b.cpus, [1, 2, 9], "core 1 whole, then one thread of core 2");
    let b = take(&mut l, req(1, 1, 0), NumaPolicy::PreferLocal);
    assert_eq!(b.cpus, [10], "the odd CPU comes from the split core");
    let b = take(&mut l, req(2, 1, 0), NumaPolicy::PreferLocal);
    assert_eq!(b.cpus, [3, 11]);
}

#[test]
fn prefer_local_follows_the_gpu_and_spills_when_nothing_fits() {
    let mut l = node();
    take(&mut l, req(1, 1, 1000), NumaPolicy::PreferLocal);
    let b = take(&mut l, req(4, 4, 1000), NumaPolicy::PreferLocal);
    assert_eq!(gpus(&b), [(1, 1000)]);
    assert_eq!(b.mems, [1]);
    assert_eq!(b.cpus, [4, 5, 12, 13]);
    // 10 CPUs fit in no NUMA node (8 each): spill over both.
    let b = take(&mut node(), req(10, 4, 0), NumaPolicy::PreferLocal);
    assert_eq!(b.cpus.len(), 10);
    assert_eq!(b.mems, [0, 1]);
    // CPUs fit locally but memory does not: memory spills, CPUs stay.
    let b = take(&mut node(), req(2, 20, 1000), NumaPolicy::PreferLocal);
    assert_eq!(b.cpus, [0, 8]);
    assert_eq!(b.mems, [0, 1]);
}

#[test]
fn prefer_local_without_gpus_keeps_cpus_next_to_idle_gpus_free() {
    // GPU-0 busy, GPU-1 idle: CPU-only work goes to node 0, next to the busy GPU.
    let mut l = node();
    let g = l.try_bind(&req(1, 1, 1000), NumaPolicy::PreferLocal).unwrap();
    assert_eq!(g.mems, [0]);
    l.allocate(&g).unwrap();
    let b = take(&mut l, req(2, 1, 0), NumaPolicy::PreferLocal);
    assert_eq!(b.mems, [0]);
}

#[test]
fn require_local_fails_when_no_numa_node_holds_it() {
    let mut l = node();
    assert_eq!(
        l.try_bind(&req(10, 1, 0), NumaPolicy::RequireLocal).unwrap_err().to_string(),
        "needs 10 CPUs and 1GiB memory on one NUMA node (require-local), node n1 has no such NUMA node free"
    );
    take(&mut l, req(6, 1, 0), NumaPolicy::RequireLocal);
    let b = take(&mut l, req(8, 17 - 1, 0), NumaPolicy::RequireLocal);
    assert_eq!(b.mems, [1]);
    assert_eq!(b.cpus, [4, 5, 6, 7, 12, 13, 14, 15]);
}

#[test]
fn single_node_keeps_gpu_cpus_and_memory_together() {
    let mut l = node();
    // Fill NUMA node 0's CPUs; the next GPU job then takes GPU-1, where CPUs are free.
    take(&mut l, req(8, 1, 0), NumaPolicy::RequireLocal);
    let b = take(&mut l, req(1, 1, 1000), NumaPolicy::PreferLocal);
    assert_eq!(gpus(&b), [(1, 1000)]);
    let free_gpu_far = req(2, 1, 1000);
    // The only free GPU is on a NUMA node without free CPUs.
    let b = l.try_bind(&free_gpu_far, NumaPolicy::PreferLocal).unwrap();
    assert_ne!(b.mems, [gpu_numa(&l, &b)]);
    assert!(l.try_bind(&free_gpu_far, NumaPolicy::RequireLocal).is_ok());
    assert_eq!(
        l.try_bind(&free_gpu_far, NumaPolicy::SingleNode).unwrap_err().to_string(),
        "needs 1 GPU, 2 CPUs and 1GiB memory on one NUMA node (single-node), node n1 has no such NUMA node free"
    );
    // A fresh node: the GPU's own node is chosen.
    let b = node().try_bind(&req(2, 1, 500), NumaPolicy::SingleNode).unwrap();
    assert_eq!((b.mems.clone(), gpus(&b)), (vec![0], vec![(0, 500)]));
}

fn gpu_numa(l: &NodeLedger, b: &Binding) -> u32 {
    l.topology().gpus.iter().find(|g| g.index == b.gpus[0].index).unwrap().numa.unwrap()
}

#[test]
fn interleave_spreads_cpus_and_uses_all_memory_nodes() {
    let b = node().try_bind(&req(4, 1, 0), NumaPolicy::Interleave).unwrap();
    assert_eq!(b.cpus, [0, 4, 8, 12]);
    assert_eq!(b.mems, [0, 1]);
    let b = node().try_bind(&req(3, 1, 0), NumaPolicy::Interleave).unwrap();
    assert_eq!(b.cpus, [0, 4, 8]);
}

#[test]
fn none_takes_the_lowest_cpus_and_all_memory_nodes() {
    let b = node().try_bind(&req(2, 1, 1000), NumaPolicy::None).unwrap();
    assert_eq!(b.cpus, [0, 8]);
    assert_eq!(b.mems, [0, 1]);
}

#[test]
fn totals_are_reported_in_order_gpu_cpu_memory() {
    let l = node();
    assert_eq!(
        l.try_bind(&req(1, 1, 3000), NumaPolicy::PreferLocal).unwrap_err().to_string(),
        "needs 3 GPUs, node n1 has 2 free"
    );
    assert_eq!(
        l.try_bind(&req(17, 1, 0), NumaPolicy::PreferLocal).unwrap_err().to_string(),
        "needs 17 CPUs, node n1 has 16 free"
    );
    assert_eq!(
        l.try_bind(&req(1, 40, 0), NumaPolicy::PreferLocal).unwrap_err().to_string(),
        "needs 40GiB memory, node n1 has 32GiB free"
    );
    let mut down = node();
    down.set_schedulable(false);
    assert_eq!(down.try_bind(&req(1, 1, 0), NumaPolicy::PreferLocal).unwrap_err().to_string(), "node n1 is not ready");
}

#[test]
fn zero_cpu_and_zero_memory_requests_still_name_a_memory_node() {
    let r = ResourceRequest { cpu_milli: 0, mem_bytes: 0, gpu_milli: 1000 };
    let b = node().try_bind(&r, NumaPolicy::PreferLocal).unwrap();
    assert!(b.cpus.is_empty());
    assert_eq!(b.mems, [0]);
}
