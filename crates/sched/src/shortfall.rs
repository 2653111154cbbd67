//! Why a request does not fit on a node, kept as numbers while a pass compares nodes and
//! rendered into a sentence only for the one reason a user will read.

use berth_model::{NumaPolicy, ResourceRequest, format_bytes, format_gpu_milli};

/// The first thing a node lacks for a request (checked in the order GPU, CPU, memory, NUMA).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shortfall {
    /// The node takes no new work (lost or draining).
    NotReady,
    /// Other jobs hold some of the node, and the job takes whole nodes (`--exclusive`).
    Busy,
    /// GPU thousandths: for a fraction, the most free on one GPU; for whole GPUs, the wholly
    /// free GPUs plus the largest fraction left on a shared one.
    Gpu {
        need: u64,
        have: u64,
    },
    Cpu {
        need: u32,
        have: u32,
    },
    Mem {
        need: u64,
        have: u64,
    },
    /// The totals fit but the NUMA policy cannot be met.
    Numa {
        policy: NumaPolicy,
    },
}

/// `1 GPU`, `2 GPUs`, `0.5 GPU`.
pub(crate) fn gpus_text(milli: u64) -> String {
    let s = if milli > 1000 { "s" } else { "" };
    format!("{} GPU{s}", format_gpu_milli(milli))
}

/// `1 CPU`, `4 CPUs`.
pub(crate) fn cpus_text(n: u32) -> String {
    if n == 1 { "1 CPU".into() } else { format!("{n} CPUs") }
}

/// `1 GPU, 4 CPUs and 8GiB memory`: what one kernel asks for.
pub(crate) fn request_text(req: &ResourceRequest) -> String {
    let mut parts = Vec::new();
    if req.gpu_milli > 0 {
        parts.push(gpus_text(req.gpu_milli));
    }
    parts.push(cpus_text(req.whole_cpus()));
    let mem = format!("{} memory", format_bytes(req.mem_bytes));
    format!("{} and {mem}", parts.join(", "))
}

fn policy_name(p: NumaPolicy) -> &'static str {
    match p {
        NumaPolicy::PreferLocal => "prefer-local",
        NumaPolicy::RequireLocal => "require-local",
        NumaPolicy::SingleNode => "single-node",
        NumaPolicy::Interleave => "interleave",
        NumaPolicy::None => "none",
    }
}

impl Shortfall {
    /// What is needed, e.g. `2 GPUs` or `4 CPUs and 8GiB memory on one NUMA node (require-local)`.
    pub fn needs(&self, req: &ResourceRequest) -> String {
        match *self {
            Shortfall::NotReady => "a ready node".into(),
            Shortfall::Busy => format!("a whole node with at least {} (--exclusive)", request_text(req)),
            Shortfall::Gpu { need, .. } => gpus_text(need),
            Shortfall::Cpu { need, .. } => cpus_text(need),
            Shortfall::Mem { need, .. } => format!("{} memory", format_bytes(need)),
            Shortfall::Numa { policy } => {
                let mut r = *req;
                if policy != NumaPolicy::SingleNode {
                    r.gpu_milli = 0;
                }
                format!("{} on one NUMA node ({})", request_text(&r), policy_name(policy))
            }
        }
    }

    /// What the node has, e.g. `0.5 free`.
    pub fn has(&self) -> String {
        match *self {
            Shortfall::NotReady => "is not ready".into(),
            Shortfall::Busy => "other jobs running".into(),
            Shortfall::Gpu { have, .. } => format!("{} free", format_gpu_milli(have)),
            Shortfall::Cpu { have, .. } => format!("{have} free"),
            Shortfall::Mem { have, .. } => format!("{} free", format_bytes(have)),
            Shortfall::Numa { .. } => "no such NUMA node free".into(),
        }
    }

    /// The reason for one node: `needs 1 GPU, node n1 has 0.5 free`.
    pub fn on_node(&self, node: &str, req: &ResourceRequest) -> String {
        match self {
            Shortfall::NotReady => format!("node {node} is not ready"),
            _ => format!("needs {}, node {node} has {}", self.needs(req), self.has()),
        }
    }

    /// The reason summarised over a queue by its closest node:
    /// `needs 2 GPUs; best node n3 has 1 free (4 nodes in queue)`.
    pub fn best_of(&self, node: &str, nodes: usize, req: &ResourceRequest) -> String {
        format!("needs {}; best node {node} has {} ({nodes} nodes in queue)", self.needs(req), self.has())
    }

    /// Orders shortfalls by how close the node came: further through the checks first, then
    /// the larger share of the missing resource. Larger is closer.
    pub fn closeness(&self) -> (u8, u64) {
        let ratio = |have: u64, need: u64| {
            if need == 0 { u64::MAX } else { ((have as u128 * 1_000_000) / need as u128).min(u64::MAX as u128) as u64 }
        };
        match *self {
            Shortfall::NotReady => (0, 0),
            Shortfall::Busy => (0, 1),
            Shortfall::Gpu { need, have } => (1, ratio(have, need)),
            Shortfall::Cpu { need, have } => (2, ratio(have as u64, need as u64)),
            Shortfall::Mem { need, have } => (3, ratio(have, need)),
            Shortfall::Numa { .. } => (4, 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts() {
        assert_eq!(gpus_text(500), "0.5 GPU");
        assert_eq!(gpus_text(1000), "1 GPU");
        assert_eq!(gpus_text(2000), "2 GPUs");
        assert_eq!(cpus_text(1), "1 CPU");
        assert_eq!(cpus_text(3), "3 CPUs");
        let req = ResourceRequest { cpu_milli: 1500, mem_bytes: 8 << 30, gpu_milli: 1000 };
        assert_eq!(request_text(&req), "1 GPU, 2 CPUs and 8GiB memory");
        let s = Shortfall::Numa { policy: NumaPolicy::RequireLocal };
        assert_eq!(
            s.on_node("n1", &req),
            "needs 2 CPUs and 8GiB memory on one NUMA node (require-local), node n1 has no such NUMA node free"
        );
        let s = Shortfall::Gpu { need: 2000, have: 1000 };
        assert_eq!(s.best_of("n3", 4, &req), "needs 2 GPUs; best node n3 has 1 free (4 nodes in queue)");
    }

    #[test]
    fn closer_nodes_rank_higher() {
        let a = Shortfall::Gpu { need: 2000, have: 1000 };
        let b = Shortfall::Gpu { need: 2000, have: 0 };
        let c = Shortfall::Cpu { need: 4, have: 0 };
        assert!(a.closeness() > b.closeness());
        assert!(c.closeness() > a.closeness());
    }
}
