//! Unit tests of the ledger's bookkeeping: allocate, release, refusals.

use berth_model::{Binding, GpuShare, Topology};

use super::*;
use crate::test_support::smt;

const GIB: u64 = 1 << 30;

fn binding(cpus: &[u32], mems: &[u32], mem: u64, gpus: &[(u32, u64)]) -> Binding {
    Binding {
        node: "n1".into(),
        cpus: cpus.to_vec(),
        cpu_milli: cpus.len() as u64 * 1000,
        mems: mems.to_vec(),
        mem_bytes: mem,
        gpus: gpus.iter().map(|&(index, milli)| GpuShare { uuid: format!("GPU-{index}"), index, milli }).collect(),
        port: None,
    }
}

fn ledger() -> NodeLedger {
    NodeLedger::new("n1", "default", smt(2, 2, 8 * GIB, 1))
}

#[test]
fn allocate_tracks_usage_and_release_restores() {
    let mut l = ledger();
    let empty = l.clone();
    let b = binding(&[0, 4], &[0], 3 * GIB, &[(0, 500)]);
    l.allocate(&b).unwrap();
    assert_eq!(l.cpus_used(), 2);
    assert_eq!(l.mem_used(), 3 * GIB);
    assert_eq!(l.gpu_used_milli(0), 500);
    assert_eq!(l.gpu_used_milli(1), 0);
    assert_eq!(l.gpu_used_milli(9), 0);
    assert_eq!(l.allocations(), 1);
    l.release(&b);
    assert_eq!(l, empty);
}

#[test]
fn release_is_idempotent_and_ignores_unknown_bindings() {
    let mut l = ledger();
    let a = binding(&[0], &[0], GIB, &[(0, 500)]);
    l.allocate(&a).unwrap();
    let after_a = l.clone();
    l.release(&binding(&[1], &[0], GIB, &[]));
    l.release(&Binding { node: "other".into(), ..a.clone() });
    assert_eq!(l, after_a);
    l.release(&a);
    l.release(&a);
    assert_eq!(l, ledger());
    assert_eq!(l.mem_used(), 0);
}

#[test]
fn double_booking_is_refused_and_changes_nothing() {
    let mut l = ledger();
    l.allocate(&binding(&[0], &[0], GIB, &[(0, 600)])).unwrap();
    let before = l.clone();
    let cases = [
        (binding(&[1, 0], &[0], GIB, &[]), "cpu 0 on node n1 is already taken"),
        (binding(&[1, 1], &[0], GIB, &[]), "cpu 1 on node n1 is already taken"),
        (binding(&[99], &[0], GIB, &[]), "cpu 99 does not exist on node n1"),
        (binding(&[1], &[0], GIB, &[(0, 500)]), "gpu 0 on node n1 has 0.4 free, binding wants 0.5"),
        (binding(&[1], &[0], GIB, &[(7, 500)]), "gpu 7 does not exist on node n1"),
        (binding(&[1], &[3], GIB, &[]), "numa node 3 does not exist on node n1"),
        (binding(&[1], &[0], 8 * GIB, &[]), "binding wants 8GiB memory, node n1 has 7GiB free on numa nodes 0"),
        (binding(&[1], &[0, 1], 16 * GIB, &[]), "binding wants 16GiB memory, node n1 has 15GiB free on numa nodes 0-1"),
    ];
    for (b, msg) in cases {
        assert_eq!(l.allocate(&b).unwrap_err().to_string(), msg);
        assert_eq!(l, before);
    }
    let wrong_uuid = Binding {
        gpus: vec![GpuShare { uuid: "GPU-x".into(), index: 1, milli: 100 }],
        ..binding(&[1], &[1], GIB, &[])
    };
    assert_eq!(l.allocate(&wrong_uuid).unwrap_err().to_string(), "gpu 1 on node n1 has uuid GPU-1, binding says GPU-x");
    let wrong_node = Binding { node: "n2".into(), ..binding(&[1], &[1], GIB, &[]) };
    assert_eq!(l.allocate(&wrong_node).unwrap_err().to_string(), "binding is for node n2, not n1");
    assert_eq!(l, before);
}

#[test]
fn gpu_fractions_add_up_to_one_device() {
    let mut l = ledger();
    l.allocate(&binding(&[0], &[0], GIB, &[(0, 500)])).unwrap();
    l.allocate(&binding(&[1], &[0], GIB, &[(0, 500)])).unwrap();
    assert_eq!(l.gpu_used_milli(0), 1000);
    assert!(l.allocate(&binding(&[2], &[1], GIB, &[(0, 1)])).is_err());
}

#[test]
fn memory_over_several_nodes_is_split_evenly_and_released_exactly() {
    let mut l = ledger();
    let local = binding(&[0], &[0], 6 * GIB, &[]);
    l.allocate(&local).unwrap();
    // 2GiB left on node 0 and 8 on node 1: an even split caps node 0 and moves the rest.
    let wide = binding(&[1], &[0, 1], 8 * GIB, &[]);
    l.allocate(&wide).unwrap();
    assert_eq!(l.numas[0].mem_free(), 0);
    assert_eq!(l.numas[1].mem_free(), 2 * GIB);
    l.release(&local);
    l.release(&wide);
    assert_eq!(l, ledger());
}

/// Regression (backfill reservation that did not fit at its start): a copy of the node where
/// other memory was freed must keep the split the binding got on the real ledger.
#[test]
fn allocate_like_keeps_the_split_of_the_other_ledger() {
    let mut now = ledger();
    let local = binding(&[0], &[0], 6 * GIB, &[]);
    now.allocate(&local).unwrap();
    // 2 GiB free on node 0 and 8 on node 1: the wide binding takes 2 + 4.
    let wide = binding(&[], &[0, 1], 6 * GIB, &[]);
    now.allocate(&wide).unwrap();
    assert_eq!((now.numas[0].mem_free(), now.numas[1].mem_free()), (0, 4 * GIB));
    // Once `local` has ended, `wide` still holds 2 + 4, not the even 3 + 3 a fresh split gives.
    let mut later = ledger();
    later.allocate_like(&wide, &now).unwrap();
    assert_eq!((later.numas[0].mem_free(), later.numas[1].mem_free()), (6 * GIB, 4 * GIB));
    let mut fresh = ledger();
    fresh.allocate(&wide).unwrap();
    assert_eq!((fresh.numas[0].mem_free(), fresh.numas[1].mem_free()), (5 * GIB, 5 * GIB));
    // A ledger that does not hold the binding falls back to a fresh split.
    let mut other = ledger();
    other.allocate_like(&wide, &ledger()).unwrap();
    assert_eq!(other, fresh);
}

#[test]
fn a_binding_without_memory_nodes_may_use_all() {
    let mut l = ledger();
    l.allocate(&binding(&[0], &[], 12 * GIB, &[])).unwrap();
    assert_eq!(l.mem_used(), 12 * GIB);
}

#[test]
fn a_topology_without_numa_nodes_is_one_node() {
    let mut t = Topology::synthetic(1, 4, 8 * GIB, 1);
    t.numa_nodes.clear();
    let l = NodeLedger::new("n1", "default", t);
    assert_eq!(l.numas.len(), 1);
    assert_eq!(l.mem_total(), 8 * GIB);
    assert_eq!(l.cpus_total(), 4);
    assert_eq!(l.gpus[0].numa, Some(0));
}

#[test]
fn accessors() {
    let mut l = ledger();
    assert_eq!((l.name(), l.queue()), ("n1", "default"));
    assert_eq!(l.topology().gpus.len(), 2);
    assert!(l.schedulable());
    l.set_schedulable(false);
    assert!(!l.schedulable());
}
