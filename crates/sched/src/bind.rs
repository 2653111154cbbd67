//! The node-level allocator: turns a [`ResourceRequest`] and a [`NumaPolicy`] into the exact
//! [`Binding`] (CPUs, memory nodes, GPU shares) on one node, or a [`Shortfall`] saying why not.
//!
//! Choices, all deterministic (lowest ids break ties):
//! - a GPU fraction goes onto the already-shared GPU with the least room that still fits (best
//!   fit), so whole GPUs stay whole for whole-GPU jobs;
//! - whole GPUs come from one NUMA node when one has enough, preferring the node where the CPUs
//!   and memory also fit, and the node with the fewest free GPUs (again to keep big blocks);
//! - CPUs are taken as whole SMT cores (all siblings before a new core), near the GPUs.

use berth_model::{Binding, GpuShare, NumaPolicy, ResourceRequest};

use crate::ledger::NodeLedger;
use crate::shortfall::Shortfall;
use crate::water::water_fill;

/// Why [`NodeLedger::try_bind`] found no binding: the node, the request and the first thing
/// the node lacks, kept as numbers; the text (`needs 1 GPU, node n1 has 0.5 free`) is made
/// only when shown.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", shortfall.on_node(node, req))]
pub struct BindError {
    node: String,
    req: ResourceRequest,
    shortfall: Shortfall,
}

impl NodeLedger {
    /// The node-level allocator: the exact binding for `req` under `numa`, or a reason such as
    /// `needs 1 GPU, node n1 has 0.5 free`. The ledger is not changed; commit the binding with
    /// [`allocate`](Self::allocate).
    pub fn try_bind(&self, req: &ResourceRequest, numa: NumaPolicy) -> Result<Binding, BindError> {
        self.bind(req, numa).map_err(|shortfall| BindError { node: self.name().to_string(), req: *req, shortfall })
    }

    /// Checks the node's totals only (free CPUs, memory, whole GPUs, largest GPU fraction).
    /// Necessary but not sufficient: NUMA policies may still refuse. Cheap, so a pass runs it
    /// on every node before the full binder.
    pub(crate) fn quick_check(&self, req: &ResourceRequest) -> Result<(), Shortfall> {
        if !self.schedulable() {
            return Err(Shortfall::NotReady);
        }
        let g = req.gpu_milli;
        if g > 0 && g < 1000 {
            let have = self.max_gpu_free();
            if have < g {
                return Err(Shortfall::Gpu { need: g, have });
            }
        } else if g >= 1000 {
            let whole = self.whole_gpus_free() as u64;
            // Whole devices only; a malformed 1.5 (refused at submit) counts as 2.
            if whole < g.div_ceil(1000) {
                return Err(Shortfall::Gpu { need: g, have: whole * 1000 + self.max_partial_gpu_free() });
            }
        }
        let need = req.whole_cpus();
        if self.cpus_free() < need {
            return Err(Shortfall::Cpu { need, have: self.cpus_free() });
        }
        if self.mem_free() < req.mem_bytes {
            return Err(Shortfall::Mem { need: req.mem_bytes, have: self.mem_free() });
        }
        Ok(())
    }

    /// The full binder behind [`try_bind`](Self::try_bind).
    pub(crate) fn bind(&self, req: &ResourceRequest, policy: NumaPolicy) -> Result<Binding, Shortfall> {
        self.quick_check(req)?;
        let n = req.whole_cpus();
        let (gpus, cpus, mems) = match policy {
            NumaPolicy::SingleNode => self.place_single_node(req, n).ok_or(Shortfall::Numa { policy })?,
            _ => {
                let gpus = self.pick_gpus(req, n);
                let (cpus, mems) = match policy {
                    NumaPolicy::PreferLocal => self.place_prefer_local(&gpus, req, n, true),
                    NumaPolicy::RequireLocal => self.place_prefer_local(&gpus, req, n, false),
                    NumaPolicy::Interleave => self.place_interleave(n),
                    _ => self.place_anywhere(n),
                }
                .ok_or(Shortfall::Numa { policy })?;
                (gpus, cpus, mems)
            }
        };
        let milli = if req.gpu_milli < 1000 { req.gpu_milli } else { 1000 };
        let mut cpus: Vec<u32> = cpus.iter().map(|&i| self.cpus[i].id).collect();
        cpus.sort_unstable();
        let mut mems: Vec<u32> = mems.iter().map(|&i| self.numas[i].id).collect();
        mems.sort_unstable();
        let mut gpus: Vec<GpuShare> = gpus
            .iter()
            .map(|&i| GpuShare { uuid: self.gpus[i].uuid.to_string(), index: self.gpus[i].index, milli })
            .collect();
        gpus.sort_by_key(|g| g.index);
        Ok(Binding {
            node: self.name().to_string(),
            cpus,
            cpu_milli: req.cpu_milli,
            mems,
            mem_bytes: req.mem_bytes,
            gpus,
            port: None,
        })
    }

    /// Whether [`bind`](Self::bind) would find a binding, without making it: the same checks,
    /// but `none` counts free CPUs instead of choosing them, and no binding's lists and GPU
    /// names are built. Backfill asks this of every node it considers at every end it
    /// reaches, and needs only the answer.
    pub(crate) fn fits(&self, req: &ResourceRequest, policy: NumaPolicy) -> bool {
        if self.quick_check(req).is_err() {
            return false;
        }
        let n = req.whole_cpus();
        let fits = match policy {
            NumaPolicy::SingleNode => self.place_single_node(req, n).is_some(),
            // `pick_gpus` cannot fail once the quick check passed.
            NumaPolicy::PreferLocal => self.place_prefer_local(&self.pick_gpus(req, n), req, n, true).is_some(),
            NumaPolicy::RequireLocal => self.place_prefer_local(&self.pick_gpus(req, n), req, n, false).is_some(),
            NumaPolicy::Interleave => self.place_interleave(n).is_some(),
            _ => self.can_pick_from(0..self.cores.len(), n),
        };
        debug_assert_eq!(fits, self.bind(req, policy).is_ok(), "fits and bind disagree on {}", self.name());
        fits
    }

    /// Whether [`pick_from_cores`](Self::pick_from_cores) finds `n` CPUs in these cores: it
    /// takes whole cores while one fits in what is left, then part of one, so it fails only
    /// once every free CPU of them is taken, that is when they have fewer than `n`.
    fn can_pick_from(&self, cores: impl Iterator<Item = usize>, n: u32) -> bool {
        let free = cores.map(|c| self.cores[c].iter().filter(|&&i| !self.cpus[i].taken).count()).sum::<usize>();
        n == 0 || free >= n as usize
    }

    /// True when NUMA node `x` alone has the CPUs and memory.
    fn numa_fits(&self, x: usize, n: u32, mem: u64) -> bool {
        self.numas[x].cpu_free >= n && self.numas[x].mem_free() >= mem
    }

    /// GPU slots for every policy but `single-node` (which picks GPUs per NUMA node). The quick
    /// check guarantees enough are free.
    fn pick_gpus(&self, req: &ResourceRequest, n: u32) -> Vec<usize> {
        let g = req.gpu_milli;
        let local_fit = |numa: Option<usize>| numa.is_some_and(|x| self.numa_fits(x, n, req.mem_bytes));
        if g == 0 {
            return vec![];
        }
        if g < 1000 {
            // Best fit first; among equals, a GPU whose NUMA node can also hold the CPUs.
            let best = (0..self.gpus.len())
                .filter(|&i| self.gpus[i].free() >= g)
                .min_by_key(|&i| (self.gpus[i].free(), !local_fit(self.gpus[i].numa), self.gpus[i].index));
            return best.into_iter().collect();
        }
        let k = g.div_ceil(1000) as usize;
        let free: Vec<usize> = (0..self.gpus.len()).filter(|&i| self.gpus[i].used == 0).collect();
        let on = |x: usize| free.iter().copied().filter(move |&i| self.gpus[i].numa == Some(x));
        let home = (0..self.numas.len())
            .filter(|&x| on(x).count() >= k)
            .min_by_key(|&x| (!self.numa_fits(x, n, req.mem_bytes), on(x).count(), x));
        match home {
            Some(x) => on(x).take(k).collect(),
            // No NUMA node has enough: span nodes, lowest indices.
            None => free.into_iter().take(k).collect(),
        }
    }

    /// NUMA nodes in the order CPUs and memory should come from: the chosen GPUs' nodes first
    /// (most GPUs first), then the nearest (SLIT distance), then the fullest that fits (best
    /// fit). Without GPUs, nodes with fewer free GPUs come first, so CPU-only work leaves the
    /// CPUs next to idle GPUs for the GPU jobs that will want them.
    /// When `spill` is set the order is for spreading one request over several nodes, and
    /// the emptiest come first after the GPUs' nodes, so that it spans as few as possible.
    fn numa_order(&self, gpus: &[usize], spill: bool) -> Vec<usize> {
        let mut home: Vec<(usize, usize)> = Vec::new();
        for &g in gpus {
            if let Some(x) = self.gpus[g].numa {
                match home.iter_mut().find(|(y, _)| *y == x) {
                    Some((_, c)) => *c += 1,
                    None => home.push((x, 1)),
                }
            }
        }
        home.sort_by_key(|&(x, c)| (std::cmp::Reverse(c), x));
        let mut order: Vec<usize> = home.iter().map(|&(x, _)| x).collect();
        let first_id = order.first().map(|&x| self.numas[x].id as usize);
        let distance = |x: usize| -> u32 {
            let d = &self.topology().numa_nodes;
            first_id
                .and_then(|f| d.iter().find(|nn| nn.id == self.numas[x].id).and_then(|nn| nn.distances.get(f).copied()))
                .unwrap_or(0)
        };
        let idle_gpus = |x: usize| self.gpus.iter().filter(|g| g.numa == Some(x) && g.used == 0).count() as u32;
        let mut rest: Vec<usize> = (0..self.numas.len()).filter(|x| !order.contains(x)).collect();
        rest.sort_by_key(|&x| {
            let gpu_key = if gpus.is_empty() { idle_gpus(x) } else { 0 };
            let free = self.numas[x].cpu_free;
            (distance(x), gpu_key, if spill { u32::MAX - free } else { free }, x)
        });
        order.extend(rest);
        order
    }

    /// `prefer-local` (`spill`) and `require-local` (no spill): one NUMA node in [`numa_order`]
    /// that holds CPUs and memory; else CPUs from nodes in that order and memory from those
    /// nodes (plus more nodes, in order, until the memory fits).
    fn place_prefer_local(
        &self,
        gpus: &[usize],
        req: &ResourceRequest,
        n: u32,
        spill: bool,
    ) -> Option<(Vec<usize>, Vec<usize>)> {
        let order = self.numa_order(gpus, false);
        if let Some(&x) = order.iter().find(|&&x| self.numa_fits(x, n, req.mem_bytes)) {
            return Some((self.pick_from_cores(&self.numas[x].cores, n)?, vec![x]));
        }
        if !spill {
            return None;
        }
        let order = self.numa_order(gpus, true);
        let (mut cpus, mut mems, mut left) = (Vec::new(), Vec::new(), n);
        for &x in &order {
            if left == 0 {
                break;
            }
            let take = left.min(self.numas[x].cpu_free);
            if take > 0 {
                cpus.extend(self.pick_from_cores(&self.numas[x].cores, take)?);
                mems.push(x);
                left -= take;
            }
        }
        for &x in &order {
            if mems.iter().map(|&m| self.numas[m].mem_free()).sum::<u64>() >= req.mem_bytes && !mems.is_empty() {
                break;
            }
            if !mems.contains(&x) {
                mems.push(x);
            }
        }
        (left == 0).then_some((cpus, mems))
    }

    /// `single-node`: GPUs, CPUs and memory all on one NUMA node. Among the nodes that can,
    /// the best GPU fit wins, then the fullest CPUs, then the lowest id.
    fn place_single_node(&self, req: &ResourceRequest, n: u32) -> Option<(Vec<usize>, Vec<usize>, Vec<usize>)> {
        let g = req.gpu_milli;
        let mut best: Option<((u64, u32, usize), Vec<usize>)> = None;
        for x in 0..self.numas.len() {
            if !self.numa_fits(x, n, req.mem_bytes) {
                continue;
            }
            let local = (0..self.gpus.len()).filter(|&i| self.gpus[i].numa == Some(x));
            let (gpu_key, gpus) = if g == 0 {
                (0, vec![])
            } else if g < 1000 {
                match local.filter(|&i| self.gpus[i].free() >= g).min_by_key(|&i| (self.gpus[i].free(), i)) {
                    Some(i) => (self.gpus[i].free(), vec![i]),
                    None => continue,
                }
            } else {
                let free: Vec<usize> = local.filter(|&i| self.gpus[i].used == 0).collect();
                if (free.len() as u64) < g.div_ceil(1000) {
                    continue;
                }
                (free.len() as u64, free[..g.div_ceil(1000) as usize].to_vec())
            };
            let key = (gpu_key, self.numas[x].cpu_free, x);
            if best.as_ref().is_none_or(|(k, _)| key < *k) {
                best = Some((key, gpus));
            }
        }
        let ((_, _, x), gpus) = best?;
        Some((gpus, self.pick_from_cores(&self.numas[x].cores, n)?, vec![x]))
    }

    /// `interleave`: CPUs spread evenly over the NUMA nodes that have CPUs, memory from all.
    fn place_interleave(&self, n: u32) -> Option<(Vec<usize>, Vec<usize>)> {
        let with_cpus: Vec<usize> = (0..self.numas.len()).filter(|&x| self.numas[x].cpu_total > 0).collect();
        let free: Vec<u64> = with_cpus.iter().map(|&x| self.numas[x].cpu_free as u64).collect();
        let quotas = water_fill(&free, n as u64)?;
        let mut cpus = Vec::new();
        for (&x, &q) in with_cpus.iter().zip(&quotas) {
            cpus.extend(self.pick_from_cores(&self.numas[x].cores, q as u32)?);
        }
        Some((cpus, (0..self.numas.len()).collect()))
    }

    /// `none`: any CPUs (lowest ids, whole cores), memory from all NUMA nodes.
    fn place_anywhere(&self, n: u32) -> Option<(Vec<usize>, Vec<usize>)> {
        let all: Vec<usize> = (0..self.cores.len()).collect();
        Some((self.pick_from_cores(&all, n)?, (0..self.numas.len()).collect()))
    }

    /// Takes `n` free CPUs from these cores, whole SMT cores first: at each step the core with
    /// the most free siblings that does not overshoot; when every core would overshoot, the
    /// one with the fewest free siblings (lowest ids of it). So an odd CPU comes from an
    /// already-split core rather than splitting a fresh one. Returns CPU slots.
    fn pick_from_cores(&self, cores: &[usize], n: u32) -> Option<Vec<usize>> {
        if n == 0 {
            return Some(vec![]);
        }
        // Free CPU slots of every core with any, flattened (one allocation, not one per core:
        // this runs for every node a pass or a reservation tries).
        let mut flat: Vec<usize> = Vec::with_capacity(self.cpus.len());
        let mut spans: Vec<(usize, usize)> = Vec::with_capacity(cores.len()); // (start in flat, free count)
        for &c in cores {
            let start = flat.len();
            flat.extend(self.cores[c].iter().copied().filter(|&i| !self.cpus[i].taken));
            if flat.len() > start {
                spans.push((start, flat.len() - start));
            }
        }
        let maxc = spans.iter().map(|s| s.1).max()?;
        // buckets[c]: cores (indices into spans, in order) with exactly c free CPUs, taken from
        // the front (cursor) so the lowest ids go first.
        let mut buckets: Vec<Vec<usize>> = vec![Vec::new(); maxc + 1];
        for (i, s) in spans.iter().enumerate() {
            buckets[s.1].push(i);
        }
        let mut cursor = vec![0usize; maxc + 1];
        let mut out = Vec::with_capacity(n as usize);
        let mut left = n as usize;
        while left > 0 {
            let has = |c: usize| cursor[c] < buckets[c].len();
            let (c, take) = match (1..=left.min(maxc)).rev().find(|&c| has(c)) {
                Some(c) => (c, c),
                None => ((left + 1..=maxc).find(|&c| has(c))?, left),
            };
            let (start, _) = spans[buckets[c][cursor[c]]];
            cursor[c] += 1;
            out.extend_from_slice(&flat[start..start + take]);
            left -= take;
        }
        out.sort_unstable();
        Some(out)
    }
}

#[cfg(test)]
#[path = "bind_tests.rs"]
mod tests;
