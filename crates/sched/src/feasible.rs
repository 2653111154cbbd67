//! Submit-time feasibility: could a request ever run in its queue, on an empty cluster?
//! Refusing at submit beats a job that waits forever with a reason nobody reads.

use std::borrow::Cow;
use std::hash::{Hash, Hasher};

use berth_model::{NumaPolicy, ResourceRequest, Topology, format_bytes, format_gpu_milli};
use rustc_hash::{FxHashMap, FxHasher};

use crate::ledger::NodeLedger;
use crate::shortfall::{cpus_text, gpus_text, request_text};

/// Why no node of a queue can ever run a request, even with every node empty: the first
/// resource that can never be had, with the largest node's figure. Its text starts `no node
/// can ever run this:` (the manager answers it with 422).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no node can ever run this: {}", self.why())]
pub enum Infeasible {
    /// Fewer nodes can hold a kernel than the job spans (`request`: set when only some of
    /// the queue's nodes can, so the text says with what).
    Nodes {
        want: usize,
        capable: usize,
        request: Option<ResourceRequest>,
        queue: String,
    },
    /// Each kernel fits a node alone, but not `kernels` of them side by side; the roomiest
    /// node holds `most`.
    Kernels {
        kernels: u32,
        request: ResourceRequest,
        most: u32,
        queue: String,
    },
    /// A GPU job in a queue without a GPU anywhere.
    NoGpu {
        gpu_milli: u64,
        queue: String,
    },
    /// More GPUs than the largest node has (`largest`: devices).
    Gpus {
        gpu_milli: u64,
        largest: u64,
        queue: String,
    },
    Cpus {
        cpus: u32,
        largest: u32,
        queue: String,
    },
    Memory {
        bytes: u64,
        largest: u64,
        queue: String,
    },
    /// A local NUMA policy (`require-local`, `single-node`) that no NUMA node is large
    /// enough for; `request` is what must fit one NUMA node.
    Numa {
        request: ResourceRequest,
        policy: NumaPolicy,
        queue: String,
    },
    /// Each resource is there, but no node has all of them at once.
    Together {
        request: ResourceRequest,
        queue: String,
    },
}

impl Infeasible {
    /// The words after `no node can ever run this: `.
    fn why(&self) -> String {
        match self {
            Infeasible::Nodes { want, capable, request, queue } => {
                let with = request.as_ref().map(|r| format!(" with {}", request_text(r))).unwrap_or_default();
                format!("needs {want} nodes{with}, queue {queue} has {capable}")
            }
            Infeasible::Kernels { kernels, request, most, queue } => format!(
                "needs {kernels} kernels with {} each on one node, the largest node in queue {queue} holds {most}",
                request_text(request)
            ),
            // The first GPU job on a machine without one is often someone trying berth out:
            // say how GPUs come to a node, and how to pretend.
            Infeasible::NoGpu { gpu_milli, queue } => format!(
                "needs {}, no node in queue {queue} has a GPU (`berth nodes` lists what each node has; to try GPU \
                 jobs on a machine without one, start `berth up --fake-gpus 2`)",
                gpus_text(*gpu_milli)
            ),
            Infeasible::Gpus { gpu_milli, largest, queue } => format!(
                "needs {}, the largest node in queue {queue} has {}",
                gpus_text(*gpu_milli),
                format_gpu_milli(largest * 1000)
            ),
            Infeasible::Cpus { cpus, largest, queue } => {
                format!("needs {}, the largest node in queue {queue} has {largest}", cpus_text(*cpus))
            }
            Infeasible::Memory { bytes, largest, queue } => format!(
                "needs {} memory, the largest node in queue {queue} has {}",
                format_bytes(*bytes),
                format_bytes(*largest)
            ),
            Infeasible::Numa { request, policy, queue } => {
                let policy = if *policy == NumaPolicy::SingleNode { "single-node" } else { "require-local" };
                format!(
                    "needs {} on one NUMA node ({policy}), no NUMA node in queue {queue} is that large",
                    request_text(request)
                )
            }
            Infeasible::Together { request, queue } => {
                format!("needs {} on one node, no node in queue {queue} has all of them", request_text(request))
            }
        }
    }
}

/// [`check_feasible_with`] under the default NUMA policy (`prefer-local`).
pub fn check_feasible(
    req: &ResourceRequest,
    nodes_needed: u32,
    nodes: &[NodeLedger],
    queue: &str,
) -> Result<(), Infeasible> {
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
) -> Result<(), Infeasible> {
    check_feasible_kernels(req, nodes_needed, 1, numa, nodes, queue)
}

/// [`check_feasible_with`] for a job with `kernels` kernels of `req` on each node
/// (`berth submit --kernels N`): can that many fit on one empty node, side by side?
/// Looks at every node; [`NodeShapes::check_kernels`] gives the same answers once per shape.
pub fn check_feasible_kernels(
    req: &ResourceRequest,
    nodes_needed: u32,
    kernels: u32,
    numa: NumaPolicy,
    nodes: &[NodeLedger],
    queue: &str,
) -> Result<(), Infeasible> {
    // Callers usually pass empty ledgers already: those are used as they are, only a ledger
    // with allocations or not schedulable is rebuilt empty.
    let empty: Vec<(Cow<'_, NodeLedger>, usize)> = nodes
        .iter()
        .filter(|l| l.queue() == queue)
        .map(|l| {
            if l.schedulable() && l.is_empty() {
                (Cow::Borrowed(l), 1)
            } else {
                (Cow::Owned(NodeLedger::new(l.name(), queue, l.topology().clone())), 1)
            }
        })
        .collect();
    check_shapes(req, nodes_needed, kernels, numa, &empty, queue)
}

/// The nodes grouped by what feasibility depends on: their queue and their topology, less
/// the GPUs' UUIDs (two machines of one model differ only there). Built when a node joins or
/// changes shape, so a submit checks once per distinct shape instead of once per node: with
/// 500 nodes the per-node check was 11 % of a loaded manager's CPU.
#[derive(Debug, Clone, Default)]
pub struct NodeShapes {
    groups: Vec<ShapeGroup>,
}

#[derive(Debug, Clone)]
struct ShapeGroup {
    /// An empty, schedulable ledger of the shape (named after its first node).
    ledger: NodeLedger,
    nodes: usize,
}

impl NodeShapes {
    /// Groups `nodes` (allocations and the schedulable flag do not matter: feasibility asks
    /// about empty nodes). O(nodes).
    pub fn new(nodes: &[NodeLedger]) -> NodeShapes {
        let mut groups: Vec<ShapeGroup> = Vec::new();
        let mut by_print: FxHashMap<u64, Vec<usize>> = FxHashMap::default();
        for l in nodes {
            let t = l.topology();
            let candidates = by_print.entry(fingerprint(l.queue(), t)).or_default();
            let same = |g: &ShapeGroup| g.ledger.queue() == l.queue() && same_shape(g.ledger.topology(), t);
            match candidates.iter().find(|&&i| same(&groups[i])) {
                Some(&i) => groups[i].nodes += 1,
                None => {
                    candidates.push(groups.len());
                    let ledger = NodeLedger::new(l.name(), l.queue(), l.topology().clone());
                    groups.push(ShapeGroup { ledger, nodes: 1 });
                }
            }
        }
        NodeShapes { groups }
    }

    /// How many distinct (queue, shape) pairs there are.
    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }

    /// [`check_feasible_kernels`] over the grouped nodes: the same answers and texts, in
    /// O(distinct shapes).
    pub fn check_kernels(
        &self,
        req: &ResourceRequest,
        nodes_needed: u32,
        kernels: u32,
        numa: NumaPolicy,
        queue: &str,
    ) -> Result<(), Infeasible> {
        let shapes: Vec<(Cow<'_, NodeLedger>, usize)> = self
            .groups
            .iter()
            .filter(|g| g.ledger.queue() == queue)
            .map(|g| (Cow::Borrowed(&g.ledger), g.nodes))
            .collect();
        check_shapes(req, nodes_needed, kernels, numa, &shapes, queue)
    }
}

/// Equal topologies but for the GPUs' UUIDs, which name a device and do not size it.
fn same_shape(a: &Topology, b: &Topology) -> bool {
    let gpu = |x: &berth_model::Gpu, y: &berth_model::Gpu| {
        (x.index, x.mem_bytes, x.numa) == (y.index, y.mem_bytes, y.numa) && x.model == y.model
    };
    a.mem_bytes == b.mem_bytes
        && a.cpus == b.cpus
        && a.numa_nodes == b.numa_nodes
        && a.gpus.len() == b.gpus.len()
        && a.gpus.iter().zip(&b.gpus).all(|(x, y)| gpu(x, y))
}

/// A hash of a topology (less GPU UUIDs) and its queue, so grouping compares topologies
/// only on a match. Cheaper than cloning a topology per node: a rebuild reads every node.
fn fingerprint(queue: &str, t: &Topology) -> u64 {
    let mut h = FxHasher::default();
    queue.hash(&mut h);
    t.mem_bytes.hash(&mut h);
    for c in &t.cpus {
        (c.id, c.core, c.package, c.numa).hash(&mut h);
    }
    for n in &t.numa_nodes {
        (n.id, &n.cpus, n.mem_bytes, &n.distances).hash(&mut h);
    }
    for g in &t.gpus {
        (g.index, &g.model, g.mem_bytes, g.numa).hash(&mut h);
    }
    h.finish()
}

/// The check itself, over empty schedulable ledgers of `queue`, each standing for `.1` nodes
/// of its shape (1 each when called per node).
fn check_shapes(
    req: &ResourceRequest,
    nodes_needed: u32,
    kernels: u32,
    numa: NumaPolicy,
    empty: &[(Cow<'_, NodeLedger>, usize)],
    queue: &str,
) -> Result<(), Infeasible> {
    let k = kernels.max(1);
    if empty.is_empty() {
        return Ok(());
    }
    let total: usize = empty.iter().map(|(_, n)| n).sum();
    let want = nodes_needed.max(1) as usize;
    let fits = |l: &NodeLedger| l.bind_kernels(req, numa, k).is_ok();
    // The common case stops at the first shapes that hold `want` nodes that fit.
    let mut capable = 0;
    for (l, n) in empty {
        if fits(l) {
            capable += n;
            if capable >= want {
                return Ok(());
            }
        }
    }
    let queue = queue.to_string();
    if capable > 0 {
        let request = (capable != total).then_some(*req);
        return Err(Infeasible::Nodes { want, capable, request, queue });
    }
    if k > 1 {
        // How many kernels the roomiest node holds side by side.
        let most =
            empty.iter().map(|(l, _)| (1..k).rev().find(|&j| l.bind_kernels(req, numa, j).is_ok()).unwrap_or(0)).max();
        if let Some(most) = most.filter(|&m| m > 0) {
            return Err(Infeasible::Kernels { kernels: k, request: *req, most, queue });
        }
    }
    let g = req.gpu_milli;
    let max_gpus = empty.iter().map(|(l, _)| l.topology().gpus.len() as u64).max().unwrap_or(0);
    if g > 0 && max_gpus == 0 {
        return Err(Infeasible::NoGpu { gpu_milli: g, queue });
    }
    if g > max_gpus * 1000 {
        return Err(Infeasible::Gpus { gpu_milli: g, largest: max_gpus, queue });
    }
    let max_cpus = empty.iter().map(|(l, _)| l.cpus_total()).max().unwrap_or(0);
    if req.whole_cpus() > max_cpus {
        return Err(Infeasible::Cpus { cpus: req.whole_cpus(), largest: max_cpus, queue });
    }
    let max_mem = empty.iter().map(|(l, _)| l.mem_total()).max().unwrap_or(0);
    if req.mem_bytes > max_mem {
        return Err(Infeasible::Memory { bytes: req.mem_bytes, largest: max_mem, queue });
    }
    if numa != NumaPolicy::PreferLocal && empty.iter().any(|(l, _)| l.bind(req, NumaPolicy::PreferLocal).is_ok()) {
        let mut request = *req;
        if numa != NumaPolicy::SingleNode {
            request.gpu_milli = 0;
        }
        return Err(Infeasible::Numa { request, policy: numa, queue });
    }
    Err(Infeasible::Together { request: *req, queue })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::test_support::smt;

    const GIB: u64 = 1 << 30;

    fn req(cpus: u64, mem_gib: u64, gpu_milli: u64) -> ResourceRequest {
        ResourceRequest { cpu_milli: cpus * 1000, mem_bytes: mem_gib * GIB, gpu_milli }
    }

    /// n1: 2 NUMA × 4 cores × 2 threads, 16GiB each, 1 GPU each; n2: CPU only, one NUMA node.
    /// n1 is drained and full: feasibility looks at empty nodes, schedulable or not.
    fn cluster() -> Vec<NodeLedger> {
        let mut n1 = NodeLedger::new("n1", "default", smt(2, 4, 16 * GIB, 1));
        let b = n1.try_bind(&req(16, 32, 2000), NumaPolicy::PreferLocal).unwrap();
        n1.allocate(&b).unwrap();
        n1.set_schedulable(false);
        vec![
            n1,
            NodeLedger::new("n2", "default", smt(1, 16, 64 * GIB, 0)),
            NodeLedger::new("x", "other", smt(1, 1, GIB, 0)),
        ]
    }

    fn check(r: ResourceRequest, nodes: u32, numa: NumaPolicy) -> Result<(), Infeasible> {
        check_feasible_with(&r, nodes, numa, &cluster(), "default")
    }

    #[test]
    fn kernels_must_fit_side_by_side_on_one_node() {
        let nodes = cluster();
        // n1 (empty) has 16 CPUs and 2 GPUs: two kernels of 1 GPU and 4 CPUs fit, three do not.
        let r = req(4, 4, 1000);
        assert!(check_feasible_kernels(&r, 1, 2, NumaPolicy::PreferLocal, &nodes, "default").is_ok());
        let e = check_feasible_kernels(&r, 1, 3, NumaPolicy::PreferLocal, &nodes, "default").unwrap_err().to_string();
        assert_eq!(
            e,
            "no node can ever run this: needs 3 kernels with 1 GPU, 4 CPUs and 4GiB memory each on one node, \
             the largest node in queue default holds 2"
        );
    }

    #[test]
    fn what_fits_an_empty_node_is_feasible() {
        assert_eq!(check(req(16, 32, 2000), 1, NumaPolicy::PreferLocal), Ok(()));
        assert_eq!(check(req(32, 64, 0), 1, NumaPolicy::PreferLocal), Ok(()));
        assert_eq!(check(req(1, 1, 0), 2, NumaPolicy::PreferLocal), Ok(()));
        assert_eq!(check_feasible(&req(99, 1, 0), 1, &cluster(), "empty"), Ok(()), "no nodes yet: accept");
    }

    #[test]
    fn each_resource_names_the_largest_node() {
        let never = |r, n, p| check(r, n, p).unwrap_err().to_string();
        assert_eq!(
            never(req(1, 1, 4000), 1, NumaPolicy::PreferLocal),
            "no node can ever run this: needs 4 GPUs, the largest node in queue default has 2"
        );
        assert_eq!(
            never(req(64, 1, 0), 1, NumaPolicy::PreferLocal),
            "no node can ever run this: needs 64 CPUs, the largest node in queue default has 32"
        );
        assert_eq!(
            never(req(1, 65, 0), 1, NumaPolicy::PreferLocal),
            "no node can ever run this: needs 65GiB memory, the largest node in queue default has 64GiB"
        );
        assert_eq!(
            never(req(20, 1, 1000), 1, NumaPolicy::PreferLocal),
            "no node can ever run this: needs 1 GPU, 20 CPUs and 1GiB memory on one node, no node in queue default has all of them"
        );
        assert_eq!(
            never(req(1, 1, 0), 3, NumaPolicy::PreferLocal),
            "no node can ever run this: needs 3 nodes, queue default has 2"
        );
        assert_eq!(
            never(req(1, 1, 1000), 2, NumaPolicy::PreferLocal),
            "no node can ever run this: needs 2 nodes with 1 GPU, 1 CPU and 1GiB memory, queue default has 1"
        );
    }

    #[test]
    fn fractions_need_a_node_with_a_gpu() {
        let cpu_only = vec![NodeLedger::new("n2", "default", smt(1, 16, 64 * GIB, 0))];
        assert_eq!(
            check_feasible(&req(1, 1, 500), 1, &cpu_only, "default").unwrap_err().to_string(),
            "no node can ever run this: needs 0.5 GPU, no node in queue default has a GPU (`berth nodes` lists \
             what each node has; to try GPU jobs on a machine without one, start `berth up --fake-gpus 2`)"
        );
    }

    #[test]
    fn local_policies_need_a_numa_node_that_large() {
        assert_eq!(check(req(10, 1, 1000), 1, NumaPolicy::PreferLocal), Ok(()));
        assert_eq!(
            check(req(10, 1, 1000), 1, NumaPolicy::RequireLocal).unwrap_err().to_string(),
            "no node can ever run this: needs 10 CPUs and 1GiB memory on one NUMA node (require-local), no NUMA node in queue default is that large"
        );
        assert_eq!(
            check(req(1, 1, 2000), 1, NumaPolicy::SingleNode).unwrap_err().to_string(),
            "no node can ever run this: needs 2 GPUs, 1 CPU and 1GiB memory on one NUMA node (single-node), no NUMA node in queue default is that large"
        );
    }

    /// A random cluster of a few shapes in two queues; some nodes drained or partly full, and
    /// each node's GPUs named apart (as real machines' are).
    fn random_cluster() -> impl Strategy<Value = Vec<NodeLedger>> {
        let node = (0usize..4, 0usize..2, any::<bool>(), any::<bool>());
        proptest::collection::vec(node, 0..40).prop_map(|spec| {
            let shapes =
                [smt(1, 2, 8 * GIB, 0), smt(2, 2, 16 * GIB, 1), smt(2, 4, 32 * GIB, 2), smt(1, 8, 64 * GIB, 4)];
            spec.into_iter()
                .enumerate()
                .map(|(i, (shape, queue, drained, busy))| {
                    let mut t = shapes[shape].clone();
                    for g in &mut t.gpus {
                        g.uuid = format!("GPU-{i}-{}", g.index);
                    }
                    let mut l = NodeLedger::new(format!("n{i}"), ["a", "b"][queue], t);
                    if busy && let Ok(b) = l.try_bind(&req(1, 1, 0), NumaPolicy::PreferLocal) {
                        l.allocate(&b).unwrap();
                    }
                    l.set_schedulable(!drained);
                    l
                })
                .collect()
        })
    }

    proptest! {
        #[test]
        fn checking_once_per_node_shape_answers_as_checking_every_node(
            nodes in random_cluster(),
            cpus in 0u64..40,
            mem_gib in 0u64..130,
            gpu_milli in prop_oneof![Just(0u64), Just(500), Just(1000), Just(2000), Just(4000), Just(8000)],
            nodes_needed in 1u32..12,
            kernels in 1u32..5,
            numa in prop_oneof![
                Just(NumaPolicy::PreferLocal), Just(NumaPolicy::RequireLocal), Just(NumaPolicy::SingleNode)
            ],
            queue in prop_oneof![Just("a"), Just("b"), Just("c")],
        ) {
            let r = ResourceRequest { cpu_milli: cpus * 1000, mem_bytes: mem_gib * GIB, gpu_milli };
            let shapes = NodeShapes::new(&nodes);
            prop_assert!(shapes.len() <= 8, "4 shapes × 2 queues, whatever the GPUs are called");
            prop_assert_eq!(
                shapes.check_kernels(&r, nodes_needed, kernels, numa, queue),
                check_feasible_kernels(&r, nodes_needed, kernels, numa, &nodes, queue)
            );
        }
    }
}
