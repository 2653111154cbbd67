//! The per-node free map: which logical CPUs are taken, how much memory each NUMA node has
//! left and how many thousandths of each GPU are in use.
//!
//! The manager keeps one [`NodeLedger`] per node and updates it incrementally with
//! [`NodeLedger::allocate`] / [`NodeLedger::release`]; a scheduling pass works on clones. The
//! device binder itself (choosing CPUs, GPUs and memory nodes) lives in `bind.rs`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::slots::{Aggregates, CpuSlot, GpuSlot, NumaSlot};
use crate::water::water_fill;
use berth_model::{Binding, Topology, format_bytes, format_gpu_milli};

pub use crate::slots::LedgerError;

/// Identifies an allocated binding so that `release` undoes exactly what `allocate` did: its
/// CPUs, CPU thousandths, memory nodes, bytes and (GPU, thousandths), each list sorted,
/// packed with its length into one array (one allocation to build, none to share: a pass
/// copies ledgers by the thousand, and each copy shares its keys).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct AllocKey(Arc<[u64]>);

impl AllocKey {
    fn of(b: &Binding) -> Self {
        AllocKey(Arc::from(Self::packed(b)))
    }

    /// The key's array, to look a binding up without sharing it.
    fn packed(b: &Binding) -> Vec<u64> {
        let mut k = Vec::with_capacity(5 + b.cpus.len() + b.mems.len() + 2 * b.gpus.len());
        let sorted = |k: &mut Vec<u64>, from: usize| k[from..].sort_unstable();
        k.push(b.cpus.len() as u64);
        let from = k.len();
        k.extend(b.cpus.iter().map(|&c| c as u64));
        sorted(&mut k, from);
        k.push(b.cpu_milli);
        k.push(b.mems.len() as u64);
        let from = k.len();
        k.extend(b.mems.iter().map(|&m| m as u64));
        sorted(&mut k, from);
        k.push(b.mem_bytes);
        k.push(b.gpus.len() as u64);
        let mut gpus: Vec<(u32, u64)> = b.gpus.iter().map(|g| (g.index, g.milli)).collect();
        gpus.sort_unstable();
        k.extend(gpus.into_iter().flat_map(|(i, m)| [i as u64, m]));
        k
    }

    /// The CPUs of a packed key.
    fn cpus(k: &[u64]) -> &[u64] {
        &k[1..1 + k[0] as usize]
    }

    /// The (GPU index, thousandths) of a packed key.
    fn gpus(k: &[u64]) -> impl Iterator<Item = (u32, u64)> + '_ {
        let at = 1 + k[0] as usize + 1;
        let at = at + 1 + k[at] as usize + 1;
        k[at + 1..].chunks_exact(2).map(|g| (g[0] as u32, g[1]))
    }
}

/// The memory each NUMA node gave to each allocation of one binding (a multiset: identical
/// bindings without CPUs may coexist), the last one first to be released.
type Splits = Vec<Vec<(usize, u64)>>;

impl std::borrow::Borrow<[u64]> for AllocKey {
    fn borrow(&self) -> &[u64] {
        &self.0
    }
}

/// The free map of one node. Cheap to clone: the topology is shared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeLedger {
    /// Shared, like the topology: a pass copies ledgers by the thousand.
    name: Arc<str>,
    queue: Arc<str>,
    topology: Arc<Topology>,
    schedulable: bool,
    /// Sorted by CPU id.
    pub(crate) cpus: Vec<CpuSlot>,
    /// SMT cores: indices into `cpus`, siblings ordered by id; cores ordered by lowest id.
    /// Shared, like the topology: a pass clones ledgers and this never changes.
    pub(crate) cores: Arc<Vec<Vec<usize>>>,
    /// Sorted by NUMA id.
    pub(crate) numas: Vec<NumaSlot>,
    /// Sorted by GPU index.
    pub(crate) gpus: Vec<GpuSlot>,
    cpus_used: u32,
    /// Totals kept up to date by `allocate`/`release`, because a pass reads them for every
    /// node and every job (the quick check and the score) and they rarely change.
    agg: Aggregates,
    /// Memory per NUMA node that each allocated binding took (a multiset: identical bindings
    /// without CPUs may coexist). A binding names its memory nodes but not how much it took
    /// from each, and the split `allocate` chose depends on what was free then, so it is
    /// remembered rather than recomputed.
    /// Shared with the copies a pass makes until one of them changes the binding's entry.
    splits: BTreeMap<AllocKey, Arc<Splits>>,
    /// Container images the node has (`berth_model::job::image_key` form); `*` means it
    /// pulls any. Shared: a pass clones ledgers and this changes only when the agent reports.
    images: Arc<BTreeSet<String>>,
    /// Host paths the node lets containers mount (`berth agent --allow-mount`), as the agent
    /// reported them; `None` until it has (see `mounts.rs`).
    pub(crate) allowed_mounts: Option<Arc<[String]>>,
    /// Whether process kernels here can get data folders (a root agent; see `mounts.rs`);
    /// `None` until the agent has said.
    pub(crate) folder_mounts: Option<bool>,
    /// The agent's labels, which are also the node's features (`--constraint`,
    /// `node_match.rs`). Shared like `images`.
    pub(crate) labels: Arc<BTreeMap<String, String>>,
}

impl NodeLedger {
    /// Sets the container images the node has (see the field); jobs that name an image are
    /// placed only where [`NodeLedger::has_image`] holds.
    pub fn set_images(&mut self, images: impl IntoIterator<Item = String>) {
        self.images = Arc::new(images.into_iter().collect());
    }

    /// Whether the node can run a container of `image` (an `image_key`).
    pub fn has_image(&self, image: &str) -> bool {
        self.images.contains(image) || self.images.contains(berth_model::protocol::ANY_IMAGE)
    }

    /// The container images the node reported.
    pub fn images(&self) -> &BTreeSet<String> {
        &self.images
    }

    /// An empty ledger for a node of `queue` with this topology. A topology without NUMA nodes
    /// is treated as one NUMA node 0 holding all CPUs and `mem_bytes`; CPUs that name a NUMA
    /// node the topology does not list get a memory-less NUMA node of that id.
    pub fn new(name: impl Into<String>, queue: impl Into<String>, topology: Topology) -> Self {
        let mut numa_mem: BTreeMap<u32, u64> = BTreeMap::new();
        if topology.numa_nodes.is_empty() {
            numa_mem.insert(0, topology.mem_bytes);
        } else {
            for n in &topology.numa_nodes {
                *numa_mem.entry(n.id).or_default() += n.mem_bytes;
            }
        }
        let single = topology.numa_nodes.is_empty();
        let mut topo_cpus = topology.cpus.clone();
        topo_cpus.sort_by_key(|c| c.id);
        topo_cpus.dedup_by_key(|c| c.id);
        for c in &topo_cpus {
            numa_mem.entry(if single { 0 } else { c.numa }).or_default();
        }
        let numa_index: BTreeMap<u32, usize> = numa_mem.keys().enumerate().map(|(i, &id)| (id, i)).collect();
        let mut numas: Vec<NumaSlot> = numa_mem
            .iter()
            .map(|(&id, &mem)| NumaSlot {
                id,
                mem_cap: mem,
                mem_used: 0,
                cpu_total: 0,
                cpu_free: 0,
                cores: Arc::from([]),
            })
            .collect();
        let cpus: Vec<CpuSlot> = topo_cpus
            .iter()
            .map(|c| CpuSlot { id: c.id, numa: numa_index[&if single { 0 } else { c.numa }], taken: false })
            .collect();
        // Group SMT siblings: same package, same core id. Cores are ordered by their lowest
        // CPU id because `cpus` is sorted and a core is created at its first CPU.
        let mut core_of: BTreeMap<(u32, u32, usize), usize> = BTreeMap::new();
        let mut cores: Vec<Vec<usize>> = Vec::new();
        for (i, c) in topo_cpus.iter().enumerate() {
            let key = (c.package, c.core, cpus[i].numa);
            let ci = *core_of.entry(key).or_insert_with(|| {
                cores.push(Vec::new());
                cores.len() - 1
            });
            cores[ci].push(i);
        }
        let mut numa_cores: Vec<Vec<usize>> = vec![Vec::new(); numas.len()];
        for (ci, core) in cores.iter().enumerate() {
            let n = cpus[core[0]].numa;
            numa_cores[n].push(ci);
            numas[n].cpu_total += core.len() as u32;
            numas[n].cpu_free += core.len() as u32;
        }
        for (numa, cores) in numas.iter_mut().zip(numa_cores) {
            numa.cores = cores.into();
        }
        let mut gpus: Vec<GpuSlot> = topology
            .gpus
            .iter()
            .map(|g| GpuSlot {
                uuid: Arc::from(g.uuid.as_str()),
                index: g.index,
                numa: if numas.len() == 1 { Some(0) } else { g.numa.and_then(|n| numa_index.get(&n).copied()) },
                used: 0,
            })
            .collect();
        gpus.sort_by_key(|g| g.index);
        gpus.dedup_by_key(|g| g.index);
        let mut l = NodeLedger {
            name: Arc::from(name.into()),
            queue: Arc::from(queue.into()),
            topology: Arc::new(topology),
            schedulable: true,
            cpus,
            cores: Arc::new(cores),
            numas,
            gpus,
            cpus_used: 0,
            agg: Aggregates::default(),
            splits: BTreeMap::new(),
            images: Arc::default(),
            allowed_mounts: None,
            folder_mounts: None,
            labels: Arc::default(),
        };
        l.refresh();
        l
    }

    /// Recomputes the totals from the slots (after every change; O(NUMA nodes + GPUs)).
    fn refresh(&mut self) {
        let g = &self.gpus;
        self.agg = Aggregates {
            mem_cap: self.numas.iter().map(|n| n.mem_cap).sum(),
            mem_used: self.numas.iter().map(|n| n.mem_used).sum(),
            gpu_used: g.iter().map(|g| g.used).sum(),
            whole_gpus_free: g.iter().filter(|g| g.used == 0).count() as u32,
            max_gpu_free: g.iter().map(|g| g.free()).max().unwrap_or(0),
            max_partial_gpu_free: g.iter().filter(|g| g.used > 0).map(|g| g.free()).max().unwrap_or(0),
        };
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn queue(&self) -> &str {
        &self.queue
    }

    /// Moves the node to another queue (a queue's node selector changed); allocations stay.
    pub fn set_queue(&mut self, queue: impl Into<String>) {
        self.queue = Arc::from(queue.into());
    }

    pub fn topology(&self) -> &Topology {
        &self.topology
    }

    /// False when the node is lost or draining: it keeps its allocations but takes no new ones.
    pub fn schedulable(&self) -> bool {
        self.schedulable
    }

    pub fn set_schedulable(&mut self, schedulable: bool) {
        self.schedulable = schedulable;
    }

    /// Logical CPUs taken by bindings.
    pub fn cpus_used(&self) -> u32 {
        self.cpus_used
    }

    /// Logical CPUs on the node.
    pub fn cpus_total(&self) -> u32 {
        self.cpus.len() as u32
    }

    pub(crate) fn cpus_free(&self) -> u32 {
        self.cpus_total() - self.cpus_used
    }

    /// Bytes of memory taken by bindings.
    pub fn mem_used(&self) -> u64 {
        self.agg.mem_used
    }

    /// Bytes of memory the ledger manages (the sum over NUMA nodes).
    pub fn mem_total(&self) -> u64 {
        self.agg.mem_cap
    }

    pub(crate) fn mem_free(&self) -> u64 {
        self.agg.mem_cap.saturating_sub(self.agg.mem_used)
    }

    /// Thousandths of GPU `gpu_index` in use; 0 for an unknown index.
    pub fn gpu_used_milli(&self, gpu_index: u32) -> u64 {
        self.gpu_slot(gpu_index).map_or(0, |i| self.gpus[i].used)
    }

    /// Thousandths of all GPUs in use.
    pub fn gpus_used_milli(&self) -> u64 {
        self.agg.gpu_used
    }

    /// GPUs with nothing allocated on them.
    pub(crate) fn whole_gpus_free(&self) -> u32 {
        self.agg.whole_gpus_free
    }

    /// The most thousandths free on any single GPU.
    pub(crate) fn max_gpu_free(&self) -> u64 {
        self.agg.max_gpu_free
    }

    /// The largest fraction free on a GPU that is already shared (0 if none is).
    pub(crate) fn max_partial_gpu_free(&self) -> u64 {
        self.agg.max_partial_gpu_free
    }

    fn gpu_slot(&self, index: u32) -> Option<usize> {
        self.gpus.binary_search_by_key(&index, |g| g.index).ok()
    }

    fn cpu_slot(&self, id: u32) -> Option<usize> {
        self.cpus.binary_search_by_key(&id, |c| c.id).ok()
    }

    fn numa_slot(&self, id: u32) -> Option<usize> {
        self.numas.binary_search_by_key(&id, |n| n.id).ok()
    }

    /// Records a binding: when the manager restores running jobs after a restart, and when a
    /// pass's starts are committed. Rejects anything that would double-book a device or exceed
    /// a capacity, and then leaves the ledger unchanged.
    pub fn allocate(&mut self, b: &Binding) -> Result<(), LedgerError> {
        self.allocate_split(b, None)
    }

    /// Records `b` with the per-NUMA memory split that `other` (a ledger of the same node)
    /// chose for it, falling back to a fresh split when `other` does not hold it or its split
    /// does not fit here. A backfill reservation's copy of a node at the reserved start uses
    /// this: a job started now keeps the split it got now, whatever is freed before then, so
    /// the copy must not split it afresh against memory that is not free yet.
    pub(crate) fn allocate_like(&mut self, b: &Binding, other: &NodeLedger) -> Result<(), LedgerError> {
        let split = other.splits.get(&AllocKey::packed(b)[..]).and_then(|l| l.last()).cloned();
        self.allocate_split(b, split)
    }

    fn allocate_split(&mut self, b: &Binding, given: Option<Vec<(usize, u64)>>) -> Result<(), LedgerError> {
        let node = || self.name.to_string();
        if b.node != *self.name {
            return Err(LedgerError::WrongNode { binding: b.node.clone(), node: node() });
        }
        // Validate everything first so that a refusal changes nothing.
        let mut cpu_slots = Vec::with_capacity(b.cpus.len());
        for &cpu in &b.cpus {
            let i = self.cpu_slot(cpu).ok_or_else(|| LedgerError::UnknownCpu { node: node(), cpu })?;
            if self.cpus[i].taken || cpu_slots.contains(&i) {
                return Err(LedgerError::CpuTaken { node: node(), cpu });
            }
            cpu_slots.push(i);
        }
        let mut gpu_want: BTreeMap<usize, u64> = BTreeMap::new();
        for g in &b.gpus {
            let i = self.gpu_slot(g.index).ok_or_else(|| LedgerError::UnknownGpu { node: node(), index: g.index })?;
            if *self.gpus[i].uuid != *g.uuid {
                return Err(LedgerError::GpuUuidMismatch {
                    node: node(),
                    index: g.index,
                    uuid: g.uuid.clone(),
                    actual: self.gpus[i].uuid.to_string(),
                });
            }
            *gpu_want.entry(i).or_default() += g.milli;
        }
        for (&i, &want) in &gpu_want {
            if want > self.gpus[i].free() {
                return Err(LedgerError::GpuOverbooked {
                    node: node(),
                    index: self.gpus[i].index,
                    free: format_gpu_milli(self.gpus[i].free()),
                    want: format_gpu_milli(want),
                });
            }
        }
        // A binding without memory nodes (an older agent) may use any of them.
        let mut mem_slots = Vec::new();
        if b.mems.is_empty() {
            mem_slots.extend(0..self.numas.len());
        } else {
            for &m in &b.mems {
                let i = self.numa_slot(m).ok_or_else(|| LedgerError::UnknownNuma { node: node(), numa: m })?;
                if !mem_slots.contains(&i) {
                    mem_slots.push(i);
                }
            }
        }
        mem_slots.sort_unstable();
        let free: Vec<u64> = mem_slots.iter().map(|&i| self.numas[i].mem_free()).collect();
        let given = given.filter(|g| {
            g.iter().map(|&(_, s)| s).sum::<u64>() == b.mem_bytes
                && g.iter().all(|&(i, s)| mem_slots.iter().position(|&m| m == i).is_some_and(|k| s <= free[k]))
        });
        let shares =
            given.map(|g| mem_slots.iter().map(|&i| g.iter().find(|&&(j, _)| j == i).map_or(0, |&(_, s)| s)).collect());
        let Some(shares) = shares.or_else(|| water_fill(&free, b.mem_bytes)) else {
            return Err(LedgerError::MemoryOver {
                node: node(),
                want: format_bytes(b.mem_bytes),
                free: format_bytes(free.iter().sum()),
                mems: berth_model::binding::list_to_ranges(
                    &mem_slots.iter().map(|&i| self.numas[i].id).collect::<Vec<_>>(),
                ),
            });
        };

        for &i in &cpu_slots {
            self.cpus[i].taken = true;
            self.numas[self.cpus[i].numa].cpu_free -= 1;
        }
        self.cpus_used += cpu_slots.len() as u32;
        for (&i, &want) in &gpu_want {
            self.gpus[i].used += want;
        }
        let split: Vec<(usize, u64)> = mem_slots.iter().copied().zip(shares).filter(|&(_, s)| s > 0).collect();
        for &(i, s) in &split {
            self.numas[i].mem_used += s;
        }
        Arc::make_mut(self.splits.entry(AllocKey::of(b)).or_default()).push(split);
        self.refresh();
        Ok(())
    }

    /// Frees a binding recorded by [`allocate`](Self::allocate). Releasing a binding the
    /// ledger does not hold (twice, or never allocated) does nothing, so it can never free
    /// devices that another binding owns.
    pub fn release(&mut self, b: &Binding) {
        if b.node != *self.name {
            return;
        }
        let key = AllocKey::packed(b);
        let Some(list) = self.splits.get(&key[..]) else { return };
        for &(i, s) in list.last().into_iter().flatten() {
            self.numas[i].mem_used = self.numas[i].mem_used.saturating_sub(s);
        }
        // The last entry of a binding leaves the book without copying the list it may share.
        if list.len() == 1 {
            self.splits.remove(&key[..]);
        } else if let Some(list) = self.splits.get_mut(&key[..]) {
            Arc::make_mut(list).pop();
        }
        for &cpu in AllocKey::cpus(&key) {
            match self.cpu_slot(cpu as u32) {
                Some(i) if self.cpus[i].taken => {
                    self.cpus[i].taken = false;
                    self.numas[self.cpus[i].numa].cpu_free += 1;
                    self.cpus_used -= 1;
                }
                _ => {}
            }
        }
        for (index, milli) in AllocKey::gpus(&key) {
            if let Some(i) = self.gpu_slot(index) {
                self.gpus[i].used = self.gpus[i].used.saturating_sub(milli);
            }
        }
        self.refresh();
    }

    /// Nothing allocated: the ledger is as [`NodeLedger::new`] made it (schedulable aside).
    pub(crate) fn is_empty(&self) -> bool {
        self.splits.is_empty() && self.cpus_used == 0
    }

    /// Bindings currently recorded (for diagnostics and tests).
    pub fn allocations(&self) -> usize {
        self.splits.values().map(|l| l.len()).sum()
    }
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
