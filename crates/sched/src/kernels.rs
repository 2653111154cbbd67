//! Several kernels of one job on one node (`berth submit --kernels N`): the request is per
//! kernel (like Backend.AI's cluster sessions), each kernel gets its own exact binding, and
//! the bindings of one node are disjoint because each is allocated on a working copy of the
//! ledger before the next is chosen. All of a node's kernels fit, or none is placed there.

use berth_model::{Binding, NumaPolicy, ResourceRequest};

use crate::PendingJob;
use crate::ledger::NodeLedger;
use crate::shortfall::Shortfall;

impl PendingJob {
    /// Kernels on each node (at least 1).
    pub fn kernels_per_node(&self) -> u32 {
        self.kernels.max(1)
    }

    /// Kernels of the job in all: nodes × kernels per node.
    pub fn kernel_count(&self) -> u32 {
        self.nodes.max(1).saturating_mul(self.kernels_per_node())
    }
}

impl NodeLedger {
    /// Bindings for `k` kernels of `req` on this node, disjoint, or the shortfall of the first
    /// kernel that does not fit (measured with the earlier ones allocated). The ledger is not
    /// changed.
    pub(crate) fn bind_kernels(
        &self,
        req: &ResourceRequest,
        numa: NumaPolicy,
        k: u32,
    ) -> Result<Vec<Binding>, Shortfall> {
        if k <= 1 {
            return self.bind(req, numa).map(|b| vec![b]);
        }
        let mut work = self.clone();
        let mut out = Vec::with_capacity(k as usize);
        for _ in 0..k {
            let b = work.bind(req, numa)?;
            let ok = work.allocate(&b).is_ok();
            debug_assert!(ok, "binder produced a binding the ledger refuses");
            out.push(b);
        }
        Ok(out)
    }

    /// [`bind_kernels`](Self::bind_kernels) for a job's kernels on one node; an exclusive
    /// job's one kernel takes the whole node ([`bind_whole`](Self::bind_whole)).
    pub(crate) fn bind_job(&self, job: &PendingJob) -> Result<Vec<Binding>, Shortfall> {
        if job.exclusive {
            return self.bind_whole(&job.request, job.numa).map(|b| vec![b]);
        }
        self.bind_kernels(&job.request, job.numa, job.kernels_per_node())
    }

    /// Whether [`bind_job`](Self::bind_job) would succeed, without making the bindings (see
    /// [`fits`](Self::fits)); several kernels are still bound one after another.
    pub(crate) fn fits_job(&self, job: &PendingJob) -> bool {
        if job.exclusive {
            return self.schedulable() && self.is_empty() && self.fits(&job.request, job.numa);
        }
        match job.kernels_per_node() {
            1 => self.fits(&job.request, job.numa),
            k => self.bind_kernels(&job.request, job.numa, k).is_ok(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::Topology;

    #[test]
    fn kernels_get_disjoint_bindings_or_none() {
        // 2 NUMA nodes, each with 4 CPUs, 4 GiB and 1 GPU.
        let l = NodeLedger::new("n1", "q", Topology::synthetic(2, 4, 4 << 30, 1));
        let req = ResourceRequest { cpu_milli: 2000, mem_bytes: 1 << 30, gpu_milli: 1000 };
        let bs = l.bind_kernels(&req, NumaPolicy::PreferLocal, 2).unwrap();
        assert_eq!(bs.len(), 2);
        assert!(bs[0].cpus.iter().all(|c| !bs[1].cpus.contains(c)), "{bs:?}");
        assert_ne!(bs[0].gpus[0].index, bs[1].gpus[0].index);
        let mut after = l.clone();
        for b in &bs {
            after.allocate(b).expect("the bindings fit together");
        }
        assert_eq!(l.allocations(), 0, "the ledger itself is untouched");
        // A third kernel would need a third GPU.
        assert!(matches!(l.bind_kernels(&req, NumaPolicy::PreferLocal, 3), Err(Shortfall::Gpu { .. })));
        // Fractions: four kernels of half a GPU share the two GPUs.
        let half = ResourceRequest { cpu_milli: 1000, mem_bytes: 1 << 30, gpu_milli: 500 };
        let bs = l.bind_kernels(&half, NumaPolicy::PreferLocal, 4).unwrap();
        let per_gpu = |i: u32| bs.iter().filter(|b| b.gpus[0].index == i).count();
        assert_eq!((per_gpu(0), per_gpu(1)), (2, 2));
    }
}
