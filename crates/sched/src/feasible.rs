//! Submit-time feasibility: could a request ever run in its queue, on an empty cluster?
//! Refusing at submit beats a job that waits forever with a reason nobody reads.

use berth_model::{NumaPolicy, ResourceRequest, format_bytes, format_gpu_milli};

use crate::ledger::NodeLedger;
use crate::shortfall::{cpus_text, gpus_text, request_text};

/// [`check_feasible_with`] under the default NUMA policy (`prefer-local`).
pub fn check_feasible(
    req: &ResourceRequest,
    nodes_needed: u32,
    nodes: &[NodeLedger],
    queue: &str,
) -> Result<(), String> {
    check_feasible_with(req, nodes_needed, NumaPolicy::PreferLocal, nodes, queue)
}

/// Can `nodes_needed` kernels of `req` ever run at once in `queue`, with every node of the
/// queue (schedulable or not) empty? A queue without nodes passes: nodes may join later.
/// The error names the first resource that can never be had, e.g.
/// `no node can ever run this: needs 4 GPUs, the largest node in queue default has 1`.
pub fn check_feasible_with(
    req: &ResourceRequest,
    nodes_needed: u32,
    numa: NumaPolicy,
    nodes: &[NodeLedger],
    queue: &str,
) -> Result<(), String> {
    let empty: Vec<NodeLedger> = nodes
        .iter()
        .filter(|l| l.queue() == queue)
        .map(|l| NodeLedger::new(l.name(), queue, l.topology().clone()))
        .collect();
    if empty.is_empty() {
        return Ok(());
    }
    let want = nodes_needed.max(1) as usize;
    let capable = empty.iter().filter(|l| l.bind(req, numa).is_ok()).count();
    if capable >= want {
        return Ok(());
    }
    let never = |why: String| Err(format!("no node can ever run this: {why}"));
    if capable > 0 {
        let with = if capable == empty.len() { String::new() } else { format!(" with {}", request_text(req)) };
        return never(format!("needs {want} nodes{with}, queue {queue} has {capable}"));
    }
    let g = req.gpu_milli;
    let max_gpus = empty.iter().map(|l| l.topology().gpus.len() as u64).max().unwrap_or(0);
    if g > 0 && max_gpus == 0 {
        return never(format!("needs {}, no node in queue {queue} has a GPU", gpus_text(g)));
    }
    if g > max_gpus * 1000 {
        return never(format!(
            "needs {}, the largest node in queue {queue} has {}",
            gpus_text(g),
            format_gpu_milli(max_gpus * 1000)
        ));
    }
    let max_cpus = empty.iter().map(NodeLedger::cpus_total).max().unwrap_or(0);
    if req.whole_cpus() > max_cpus {
        return never(format!(
            "needs {}, the largest node in queue {queue} has {max_cpus}",
            cpus_text(req.whole_cpus())
        ));
    }
    let max_mem = empty.iter().map(NodeLedger::mem_total).max().unwrap_or(0);
    if req.mem_bytes > max_mem {
        return never(format!(
            "needs {} memory, the largest node in queue {queue} has {}",
            format_bytes(req.mem_bytes),
            format_bytes(max_mem)
        ));
    }
    if numa != NumaPolicy::PreferLocal && empty.iter().any(|l| l.bind(req, NumaPolicy::PreferLocal).is_ok()) {
        let policy = if numa == NumaPolicy::SingleNode { "single-node" } else { "require-local" };
        let mut r = *req;
        if numa != NumaPolicy::SingleNode {
            r.gpu_milli = 0;
        }
        return never(format!(
            "needs {} on one NUMA node ({policy}), no NUMA node in queue {queue} is that large",
            request_text(&r)
        ));
    }
    never(format!("needs {} on one node, no node in queue {queue} has all of them", request_text(req)))
}
