//! Node scoring: which of the nodes that can take a kernel is preferred. The search itself
//! (buckets, merge in score order, gangs) is in `pool.rs`.

use crate::Scoring;
use crate::ledger::NodeLedger;

/// A node's sort key under `scoring`: smaller is preferred; ties go to the node whose name
/// sorts first. Binpack prefers the most-allocated node (it fills nodes up and keeps whole
/// nodes free for big jobs); spread the least-allocated one (it spreads load and heat).
pub(crate) fn score_key(scoring: Scoring, l: &NodeLedger) -> u64 {
    score_of(scoring, allocated_ppm(l))
}

/// [`score_key`] from the node's allocated share ([`allocated_ppm_of`]).
pub(crate) fn score_of(scoring: Scoring, ppm: u64) -> u64 {
    match scoring {
        Scoring::Binpack => 1_000_000 - ppm.min(1_000_000),
        Scoring::Spread => ppm,
    }
}

/// The node's mean allocated share over the resources it has (CPU, memory, GPU), in parts
/// per million. Integer arithmetic so that ties are exact and the order is deterministic.
pub(crate) fn allocated_ppm(l: &NodeLedger) -> u64 {
    allocated_ppm_of(
        [l.cpus_used() as u64, l.mem_used(), l.gpus_used_milli()],
        [l.cpus_total() as u64, l.mem_total(), l.topology().gpus.len() as u64 * 1000],
    )
}

/// [`allocated_ppm`] from `[CPUs, memory bytes, GPU thousandths]` used and in total.
pub(crate) fn allocated_ppm_of(used: [u64; 3], total: [u64; 3]) -> u64 {
    let share = |used: u64, total: u64| if total > 0 { (used as u128 * 1_000_000 / total as u128) as u64 } else { 0 };
    let sum: u64 = (0..3).map(|k| share(used[k], total[k])).sum();
    let count = total.iter().filter(|&&t| t > 0).count() as u64;
    sum.checked_div(count).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PendingJob;
    use crate::pool::Pool;
    use berth_model::{ResourceRequest, Topology};

    fn job(gpu_milli: u64, nodes: u32) -> PendingJob {
        let request = ResourceRequest { cpu_milli: 1000, mem_bytes: 1 << 30, gpu_milli };
        PendingJob { nodes, ..crate::test_support::pending(1, request) }
    }

    fn place(nodes: &mut [NodeLedger], j: &PendingJob, scoring: Scoring) -> Result<Vec<berth_model::Binding>, String> {
        let floors = (j.request.whole_cpus(), j.request.mem_bytes);
        let mut pool = Pool::new(nodes.iter().collect(), scoring, floors, crate::words::Words::All);
        let r = pool.place(j).map(|c| c.into_iter().map(|(_, b)| b).collect());
        let after: Vec<NodeLedger> = pool.nodes.iter().map(|c| c.clone().into_owned()).collect();
        nodes.clone_from_slice(&after);
        r
    }

    #[test]
    fn binpack_prefers_the_fuller_node_then_the_name() {
        let mut nodes: Vec<NodeLedger> =
            ["a", "b"].iter().map(|n| NodeLedger::new(*n, "q", Topology::synthetic(1, 4, 8 << 30, 2))).collect();
        let b = place(&mut nodes, &job(1000, 1), Scoring::Binpack).unwrap();
        assert_eq!(b[0].node, "a");
        // b is emptier now, so the next kernel goes to a again.
        let b = place(&mut nodes, &job(1000, 1), Scoring::Binpack).unwrap();
        assert_eq!(b[0].node, "a");
        assert!(allocated_ppm(&nodes[0]) > allocated_ppm(&nodes[1]));
    }

    #[test]
    fn spread_prefers_the_emptier_node() {
        let mut nodes: Vec<NodeLedger> =
            ["a", "b"].iter().map(|n| NodeLedger::new(*n, "q", Topology::synthetic(1, 4, 8 << 30, 2))).collect();
        let b = place(&mut nodes, &job(1000, 1), Scoring::Spread).unwrap();
        assert_eq!(b[0].node, "a");
        let b = place(&mut nodes, &job(1000, 1), Scoring::Spread).unwrap();
        assert_eq!(b[0].node, "b");
    }

    #[test]
    fn data_locality_beats_the_score_among_nodes_that_fit() {
        let mut nodes: Vec<NodeLedger> =
            ["a", "b", "c"].iter().map(|n| NodeLedger::new(*n, "q", Topology::synthetic(1, 4, 8 << 30, 1))).collect();
        let mut j = job(1000, 1);
        j.data_on = vec![("a".into(), 10), ("c".into(), 900), ("nowhere".into(), 5000)];
        // Binpack alone would take a: the node holding the most data wins.
        assert_eq!(place(&mut nodes, &j, Scoring::Binpack).unwrap()[0].node, "c");
        // c is full now: the next holder, then the score.
        assert_eq!(place(&mut nodes, &j, Scoring::Binpack).unwrap()[0].node, "a");
        assert_eq!(place(&mut nodes, &j, Scoring::Binpack).unwrap()[0].node, "b");
        // Two nodes: both holders ahead of the rest, most bytes first.
        let mut nodes: Vec<NodeLedger> =
            ["a", "b", "c"].iter().map(|n| NodeLedger::new(*n, "q", Topology::synthetic(1, 4, 8 << 30, 1))).collect();
        let mut j = job(1000, 2);
        j.data_on = vec![("b".into(), 1), ("c".into(), 2)];
        let b = place(&mut nodes, &j, Scoring::Binpack).unwrap();
        assert_eq!(b.iter().map(|b| b.node.as_str()).collect::<Vec<_>>(), ["c", "b"]);
    }

    #[test]
    fn avoided_nodes_are_taken_last() {
        // A serving endpoint's replicas spread: binpack would take a, which holds a sibling.
        let two = || -> Vec<NodeLedger> {
            ["a", "b"].iter().map(|n| NodeLedger::new(*n, "q", Topology::synthetic(1, 4, 8 << 30, 2))).collect()
        };
        let mut j = job(1000, 1);
        j.avoid = vec!["a".into()];
        let mut nodes = two();
        assert_eq!(place(&mut nodes, &j, Scoring::Binpack).unwrap()[0].node, "b");
        // Only a has room: it is taken after all.
        let mut nodes = two();
        let big =
            PendingJob { request: ResourceRequest { cpu_milli: 4000, mem_bytes: 1 << 30, gpu_milli: 0 }, ..job(0, 1) };
        assert_eq!(place(&mut nodes[1..], &big, Scoring::Binpack).unwrap()[0].node, "b");
        assert_eq!(place(&mut nodes, &j, Scoring::Binpack).unwrap()[0].node, "a");
    }

    #[test]
    fn gang_is_all_or_nothing() {
        let mut nodes: Vec<NodeLedger> =
            ["a", "b"].iter().map(|n| NodeLedger::new(*n, "q", Topology::synthetic(1, 4, 8 << 30, 1))).collect();
        let before = nodes.clone();
        let err = place(&mut nodes, &job(1000, 3), Scoring::Binpack).unwrap_err();
        assert_eq!(err, "needs 3 nodes with 1 GPU, 1 CPU and 1GiB memory free, 2 have");
        assert_eq!(nodes, before);
        let b = place(&mut nodes, &job(1000, 2), Scoring::Binpack).unwrap();
        assert_eq!(b.iter().map(|b| b.node.as_str()).collect::<Vec<_>>(), ["a", "b"]);
    }
}
