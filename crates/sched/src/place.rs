//! Choosing nodes for one job on the pass's working ledgers: node scoring and gang
//! (all-or-nothing) placement over the nodes of one queue.

use berth_model::Binding;

use crate::PendingJob;
use crate::ledger::NodeLedger;
use crate::shortfall::{Shortfall, request_text};

/// How nodes that can take a kernel are ranked. Only `binpack` exists today; `spread` (least
/// allocated first) is the obvious next variant, which is why the score is its own function.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Scoring {
    /// Most-allocated node first: fills nodes up and keeps whole nodes free for big jobs.
    #[default]
    Binpack,
}

impl Scoring {
    /// Higher is preferred; ties go to the node whose name sorts first.
    pub fn score(self, l: &NodeLedger) -> u64 {
        match self {
            Scoring::Binpack => allocated_ppm(l),
        }
    }
}

/// The node's mean allocated share over the resources it has (CPU, memory, GPU), in parts
/// per million. Integer arithmetic so that ties are exact and the order is deterministic.
pub(crate) fn allocated_ppm(l: &NodeLedger) -> u64 {
    let share = |used: u64, total: u64| if total > 0 { (used as u128 * 1_000_000 / total as u128) as u64 } else { 0 };
    let gpu_total = l.topology().gpus.len() as u64 * 1000;
    let (cpu_total, mem_total) = (l.cpus_total() as u64, l.mem_total());
    let sum =
        share(l.cpus_used() as u64, cpu_total) + share(l.mem_used(), mem_total) + share(l.gpus_used_milli(), gpu_total);
    let count = [cpu_total, mem_total, gpu_total].iter().filter(|&&t| t > 0).count() as u64;
    sum.checked_div(count).unwrap_or(0)
}

/// Places every kernel of `job` on distinct ready nodes of `nodes` (one queue's working
/// ledgers, sorted by name) and allocates them there, or changes nothing and says why.
///
/// Greedy is exact for gangs: every kernel asks the same, so a node either can hold one kernel
/// or not, and taking the best-scored capable nodes never blocks a later kernel.
pub(crate) fn place(nodes: &mut [NodeLedger], job: &PendingJob, scoring: Scoring) -> Result<Vec<Binding>, String> {
    let req = &job.request;
    let want = job.nodes.max(1) as usize;
    let ready = nodes.iter().filter(|l| l.schedulable()).count();
    let mut closest: Option<(usize, Shortfall)> = None;
    let mut note = |i: usize, s: Shortfall| {
        if closest.as_ref().is_none_or(|(_, c)| s.closeness() > c.closeness()) {
            closest = Some((i, s));
        }
    };
    let mut cands: Vec<(u64, usize)> = Vec::new();
    for (i, l) in nodes.iter().enumerate() {
        if !l.schedulable() {
            continue;
        }
        match l.quick_check(req) {
            Ok(()) => cands.push((scoring.score(l), i)),
            Err(s) => note(i, s),
        }
    }
    let mut placed: Vec<(usize, Binding)> = Vec::with_capacity(want);
    while placed.len() < want && !cands.is_empty() {
        let k = (0..cands.len()).max_by_key(|&k| (cands[k].0, std::cmp::Reverse(cands[k].1))).unwrap_or(0);
        let (_, i) = cands.swap_remove(k);
        match nodes[i].bind(req, job.numa) {
            Ok(b) => {
                // The binder only returns what fits, so this cannot fail; if it ever did, the
                // node is simply not used.
                if nodes[i].allocate(&b).is_ok() {
                    placed.push((i, b));
                } else {
                    debug_assert!(false, "binder produced a binding the ledger refuses");
                }
            }
            Err(s) => note(i, s),
        }
    }
    if placed.len() == want {
        return Ok(placed.into_iter().map(|(_, b)| b).collect());
    }
    for (i, b) in &placed {
        nodes[*i].release(b);
    }
    if want > 1 {
        let have = match placed.len() {
            0 => "none has".to_string(),
            1 => "1 has".to_string(),
            k => format!("{k} have"),
        };
        return Err(format!("needs {want} nodes with {} free, {have}", request_text(req)));
    }
    let (i, s) = closest.unwrap_or((0, Shortfall::NotReady));
    Err(if ready == 1 { s.on_node(nodes[i].name(), req) } else { s.best_of(nodes[i].name(), ready, req) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::{NumaPolicy, ResourceRequest, Topology};

    fn job(gpu_milli: u64, nodes: u32) -> PendingJob {
        PendingJob {
            id: 1,
            priority: 0,
            queue: "q".into(),
            request: ResourceRequest { cpu_milli: 1000, mem_bytes: 1 << 30, gpu_milli },
            nodes,
            numa: NumaPolicy::PreferLocal,
            blocked_passes: 0,
            user: "u".into(),
            project: "u".into(),
            submitted_at: 0,
            time_limit_ms: None,
        }
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
