//! The pass's working copy of one queue's nodes, indexed so that placing a job costs far less
//! than a scan of every node.
//!
//! - Ledgers are copy-on-write: a pass clones only the nodes it places something on.
//! - Ready nodes sit in buckets by GPU class (wholly free GPUs, or the largest free fraction
//!   in quarters when none is whole) and CPU class (free CPUs in powers of two), each bucket
//!   ordered by the queue's score (then name). A job looks only at the buckets that may hold
//!   it, merging them in score order, so it rarely visits a node that cannot take it.
//! - A node that cannot take even the smallest request of the queue (fewer free CPUs or less
//!   free memory than any pending job asks) leaves the index for the rest of the pass.
//! - Failures are memoised. Within a pass resources only shrink, so "fewer than n nodes pass
//!   the quick check for R" stays true, and also holds for any R' ≥ R (every dimension at
//!   least as large, GPU level ordered none < fraction < whole): such a job is refused
//!   without looking at any node, and its reason is computed on the node that came closest
//!   for R. A job whose quick check passed but whose NUMA binding failed is memoised by its
//!   exact shape.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::{BTreeMap, BTreeSet};

use berth_model::{Binding, NumaPolicy, ResourceRequest};
use rustc_hash::FxHashMap;

use crate::ledger::NodeLedger;
use crate::place::score_key;
use crate::shortfall::{Shortfall, request_text};
use crate::words::Words;
use crate::{PendingJob, Scoring};

/// GPU classes of a node without a wholly free GPU, by the largest fraction free on one GPU:
/// `[0, 0.25)`, `[0.25, 0.5)`, `[0.5, 0.75)`, `[0.75, 1)`.
const FRAC_CLASSES: usize = 4;
/// GPU classes in all: the fraction classes, then 1..=16 wholly free GPUs (more share the last).
const GPU_CLASSES: usize = FRAC_CLASSES + 16;

/// A node's GPU class (see [`GPU_CLASSES`]).
fn node_gpu_class(l: &NodeLedger) -> usize {
    match l.whole_gpus_free() as usize {
        0 => (l.max_gpu_free() as usize * FRAC_CLASSES / 1000).min(FRAC_CLASSES - 1),
        w => (FRAC_CLASSES + w - 1).min(GPU_CLASSES - 1),
    }
}

/// The lowest GPU class that may hold the request (the class itself may still fall short).
fn request_gpu_class(r: &ResourceRequest) -> usize {
    match r.gpu_milli {
        0 => 0,
        g if g < 1000 => g as usize * FRAC_CLASSES / 1000,
        g => (FRAC_CLASSES + g.div_ceil(1000) as usize - 1).min(GPU_CLASSES - 1),
    }
}
/// Classes of free CPUs: 0, 1, 2-3, 4-7, ... (`cpu_class`); larger counts share the last.
const CPU_CLASSES: usize = 12;

/// `⌊log2 n⌋ + 1` (0 for 0), capped: a node in class c has at least `2^(c-1)` free CPUs, so a
/// request for n CPUs needs only look at classes ≥ `cpu_class(n)`.
fn cpu_class(n: u32) -> usize {
    ((32 - n.leading_zeros()) as usize).min(CPU_CLASSES - 1)
}

/// A request's GPU ask as one monotone level: 0 none, 1..999 a fraction, 1000·k whole GPUs.
/// A node that lacks level L lacks every level above it (see the module doc).
fn gpu_level(r: &ResourceRequest) -> u64 {
    if r.gpu_milli >= 1000 { r.gpu_milli.div_ceil(1000) * 1000 } else { r.gpu_milli }
}

fn numa_code(p: NumaPolicy) -> u8 {
    match p {
        NumaPolicy::PreferLocal => 0,
        NumaPolicy::RequireLocal => 1,
        NumaPolicy::SingleNode => 2,
        NumaPolicy::Interleave => 3,
        NumaPolicy::None => 4,
    }
}

/// "Fewer than `want` nodes pass the quick check for this request", and the closest node.
#[derive(Debug, Clone, Copy)]
struct Dominated {
    gpu: u64,
    cpus: u32,
    mem: u64,
    want: u32,
    closest: Option<usize>,
}

pub(crate) type ShapeKey = (u64, u64, u64, u8, u32);

pub(crate) struct Pool<'a> {
    /// One queue's nodes, sorted by name.
    pub nodes: Vec<Cow<'a, NodeLedger>>,
    scoring: Scoring,
    /// `buckets[g * CPU_CLASSES + c]`: indexed nodes of GPU class g and CPU class c, by key.
    buckets: Vec<BTreeSet<(u64, u32)>>,
    /// Each node's place in `buckets`, `None` when it is not indexed.
    slot: Vec<Option<(usize, u64)>>,
    /// Nodes held for a job that is preempting: nothing else may start there this pass.
    held: Vec<bool>,
    ready: usize,
    floor_cpus: u32,
    floor_mem: u64,
    dominated: Vec<Dominated>,
    exact: BTreeMap<ShapeKey, String>,
    /// Node indices by name, built on first use (`index_of`).
    by_name: OnceCell<FxHashMap<&'a str, usize>>,
    /// The nodes' names, borrowed from the caller's ledgers (`index_of`'s keys).
    names: Vec<&'a str>,
    /// Whether refusals are written out ([`Words`]; else they are empty, memoised the same).
    words: Words,
}

impl<'a> Pool<'a> {
    /// Indexes `nodes` (one queue's, sorted by name) for placing jobs whose smallest
    /// whole-CPU and memory requests are `floors` (`order::Source::floors`).
    pub fn new(nodes: Vec<&'a NodeLedger>, scoring: Scoring, floors: (u32, u64), words: Words) -> Self {
        let n = nodes.len();
        let (floor_cpus, floor_mem) = floors;
        let names = nodes.iter().map(|l| l.name()).collect();
        let mut p = Pool {
            ready: nodes.iter().filter(|l| l.schedulable()).count(),
            nodes: nodes.into_iter().map(Cow::Borrowed).collect(),
            scoring,
            buckets: vec![BTreeSet::new(); GPU_CLASSES * CPU_CLASSES],
            slot: vec![None; n],
            held: vec![false; n],
            floor_cpus,
            floor_mem,
            dominated: Vec::new(),
            exact: BTreeMap::new(),
            by_name: OnceCell::new(),
            names,
            words,
        };
        for i in 0..n {
            p.reindex(i);
        }
        p
    }

    pub fn scoring(&self) -> Scoring {
        self.scoring
    }

    /// Number of schedulable nodes (for reason texts).
    pub fn ready(&self) -> usize {
        self.ready
    }

    /// The nodes' names, by index.
    pub fn names(&self) -> &[&'a str] {
        &self.names
    }

    /// The index of node `name`. Backfill asks it for every binding its timeline releases,
    /// so the names are hashed once per pass (on the first call) instead of compared.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        let by_name = self.by_name.get_or_init(|| {
            let mut m = FxHashMap::with_capacity_and_hasher(self.names.len(), Default::default());
            m.extend(self.names.iter().enumerate().map(|(i, &name)| (name, i)));
            m
        });
        by_name.get(name).copied()
    }

    /// Whether node `i` may take new work in this pass.
    pub fn usable(&self, i: usize) -> bool {
        self.nodes[i].schedulable() && !self.held[i]
    }

    /// Whether node `i` may take this job in this pass: usable, offering its features and,
    /// for a container job, holding its image and allowing its mounts; for a process job with
    /// data folders, able to bind them.
    pub fn eligible(&self, i: usize, job: &PendingJob) -> bool {
        self.usable(i)
            && self.nodes[i].offers(job)
            && job.image.as_deref().is_none_or(|img| self.nodes[i].has_image(img))
            && self.nodes[i].allows_mounts(&job.mounts)
            && (!job.folders || self.nodes[i].mounts_folders())
    }

    /// Whether some usable node can bind data folders into process kernels.
    pub fn any_mounts_folders(&self) -> bool {
        (0..self.nodes.len()).any(|i| self.usable(i) && self.nodes[i].mounts_folders())
    }

    /// Whether some usable node offers the job's features.
    pub fn any_offers(&self, job: &PendingJob) -> bool {
        (0..self.nodes.len()).any(|i| self.usable(i) && self.nodes[i].offers(job))
    }

    /// Why no usable node holding the job's image allows its mounts, if none does.
    pub fn mounts_refused(&self, job: &PendingJob) -> Option<crate::mounts::MountRefusal> {
        let with_image = (0..self.nodes.len())
            .filter(|&i| self.usable(i) && job.image.as_deref().is_none_or(|img| self.nodes[i].has_image(img)))
            .map(|i| &*self.nodes[i]);
        crate::mounts::mounts_refused(&job.mounts, with_image)
    }

    /// How many usable nodes a process job with data folders may not take (agents not root).
    fn cannot_mount_folders(&self, job: &PendingJob) -> usize {
        let cannot = |i: usize| self.usable(i) && !self.nodes[i].mounts_folders();
        if job.folders { (0..self.nodes.len()).filter(|&i| cannot(i)).count() } else { 0 }
    }

    /// Whether some usable node has the image.
    pub fn any_has_image(&self, image: &str) -> bool {
        (0..self.nodes.len()).any(|i| self.usable(i) && self.nodes[i].has_image(image))
    }

    /// Puts node `i` back in the right bucket after a change (or takes it out).
    fn reindex(&mut self, i: usize) {
        if let Some((b, k)) = self.slot[i].take() {
            self.buckets[b].remove(&(k, i as u32));
        }
        let l = &self.nodes[i];
        let alive = l.cpus_free() >= self.floor_cpus && l.mem_free() >= self.floor_mem;
        if self.usable(i) && alive {
            let b = node_gpu_class(l) * CPU_CLASSES + cpu_class(l.cpus_free());
            let k = score_key(self.scoring, l);
            self.buckets[b].insert((k, i as u32));
            self.slot[i] = Some((b, k));
        }
    }

    /// Keeps every job off node `i` for the rest of the pass.
    pub fn hold(&mut self, i: usize) {
        self.held[i] = true;
        self.reindex(i);
    }

    /// Allocates bindings chosen by [`find`](Self::find) on the working ledgers.
    pub fn commit(&mut self, chosen: &[(usize, Binding)]) {
        for (i, b) in chosen {
            let ok = self.nodes[*i].to_mut().allocate(b).is_ok();
            debug_assert!(ok, "binder produced a binding the ledger refuses");
            self.reindex(*i);
        }
    }

    /// Undoes [`commit`](Self::commit) (a backfill candidate that would delay the reservation).
    pub fn uncommit(&mut self, chosen: &[(usize, Binding)]) {
        for (i, b) in chosen {
            self.nodes[*i].to_mut().release(b);
            self.reindex(*i);
        }
    }

    /// The best `want` distinct nodes for the job in score order, with their bindings (the
    /// job's kernels per node on each, one after the other), not yet allocated; `avoid`
    /// nodes are skipped. Returns what it found, possibly too few.
    pub fn find(&self, job: &PendingJob, avoid: &[usize]) -> Vec<(usize, Binding)> {
        let req = &job.request;
        let want = job.nodes.max(1) as usize;
        let mut found = 0;
        let lo = request_gpu_class(req);
        let c = cpu_class(req.whole_cpus());
        let mut iters: Vec<_> = (lo..GPU_CLASSES)
            .flat_map(|w| (c..CPU_CLASSES).map(move |c| w * CPU_CLASSES + c))
            .filter(|&b| !self.buckets[b].is_empty())
            .map(|b| self.buckets[b].iter().peekable())
            .collect();
        let mut out = Vec::with_capacity(job.kernel_count() as usize);
        // Nodes holding the job's data first, most bytes first (then name).
        let mut taken: Vec<usize> = Vec::new();
        let mut later: Vec<usize> = Vec::new();
        if !job.data_on.is_empty() {
            let mut holders: Vec<(u64, usize)> =
                job.data_on.iter().filter(|(_, b)| *b > 0).filter_map(|(n, b)| Some((*b, self.index_of(n)?))).collect();
            holders.sort_by(|a, b| b.0.cmp(&a.0).then(self.names[a.1].cmp(self.names[b.1])));
            for (_, i) in holders {
                if found == want {
                    break;
                }
                if avoid.contains(&i) || !self.eligible(i, job) {
                    continue;
                }
                if let Ok(bindings) = self.nodes[i].bind_job(job) {
                    out.extend(bindings.into_iter().map(|b| (i, b)));
                    taken.push(i);
                    found += 1;
                }
            }
        }
        while found < want {
            // The smallest head over the buckets: a k-way merge in score order.
            let mut best: Option<(usize, (u64, u32))> = None;
            for (b, it) in iters.iter_mut().enumerate() {
                if let Some(&&h) = it.peek()
                    && best.is_none_or(|(_, x)| h < x)
                {
                    best = Some((b, h));
                }
            }
            let Some((b, (_, i))) = best else { break };
            iters[b].next();
            let i = i as usize;
            if avoid.contains(&i) || taken.contains(&i) || !self.eligible(i, job) {
                continue;
            }
            if job.avoid.iter().any(|n| n == self.names[i]) {
                // Taken only if no other node will do, in score order still.
                later.push(i);
                continue;
            }
            if let Ok(bindings) = self.nodes[i].bind_job(job) {
                out.extend(bindings.into_iter().map(|b| (i, b)));
                found += 1;
            }
        }
        for i in later {
            if found == want {
                break;
            }
            if let Ok(bindings) = self.nodes[i].bind_job(job) {
                out.extend(bindings.into_iter().map(|b| (i, b)));
                found += 1;
            }
        }
        out
    }

    /// Places the job (allocating on the working ledgers) or says why it cannot start now.
    pub fn place(&mut self, job: &PendingJob) -> Result<Vec<(usize, Binding)>, String> {
        if let Some(why) = self.memo(job) {
            return Err(why);
        }
        let chosen = self.find(job, &[]);
        if chosen.len() == job.kernel_count() as usize {
            self.commit(&chosen);
            return Ok(chosen);
        }
        Err(self.refuse(job, chosen.len() / job.kernels_per_node() as usize))
    }

    /// A memoised refusal for this job, if one applies.
    fn memo(&self, job: &PendingJob) -> Option<String> {
        let r = &job.request;
        let want = job.nodes.max(1);
        if narrow(job) {
            return None;
        }
        if let Some(why) = self.exact.get(&shape(job)) {
            return Some(why.clone());
        }
        if want != 1 {
            return None;
        }
        let (g, c) = (gpu_level(r), r.whole_cpus());
        let d = self.dominated.iter().find(|d| d.want == 1 && g >= d.gpu && c >= d.cpus && r.mem_bytes >= d.mem)?;
        if self.words == Words::KindsOnly {
            return Some(String::new());
        }
        Some(match d.closest {
            Some(i) => {
                let s = self.nodes[i].quick_check(r).err().unwrap_or(Shortfall::Numa { policy: job.numa });
                self.render(i, s, r)
            }
            None => self.none_usable(r),
        })
    }

    fn render(&self, i: usize, s: Shortfall, req: &ResourceRequest) -> String {
        let name = self.nodes[i].name();
        if self.ready == 1 { s.on_node(name, req) } else { s.best_of(name, self.ready, req) }
    }

    /// The reason when every ready node is held for preempting jobs.
    fn none_usable(&self, req: &ResourceRequest) -> String {
        format!("needs {}; every ready node is held for a job that is preempting", request_text(req))
    }

    /// Builds the reason for a job that found only `capable` nodes, and memoises it.
    fn refuse(&mut self, job: &PendingJob, capable: usize) -> String {
        let req = &job.request;
        let want = job.nodes.max(1);
        // The closest node over every usable one, first in name order among equals, as
        // the reason a user reads names it; and how many pass the quick check.
        let mut closest: Option<(usize, Shortfall)> = None;
        let mut quick = 0u32;
        for i in (0..self.nodes.len()).filter(|&i| self.eligible(i, job)) {
            let s = match self.nodes[i].quick_check(req) {
                Ok(()) => {
                    quick += 1;
                    Shortfall::Numa { policy: job.numa }
                }
                Err(s) => s,
            };
            if closest.as_ref().is_none_or(|(_, c)| s.closeness() > c.closeness()) {
                closest = Some((i, s));
            }
        }
        let why = if self.words == Words::KindsOnly {
            String::new()
        } else if job.exclusive {
            let eligible = (0..self.nodes.len()).filter(|&i| self.eligible(i, job)).count();
            let s = if want == 1 { "" } else { "s" };
            format!(
                "needs {want} whole node{s} (--exclusive) with at least {}, {capable} of {eligible} ready nodes can \
                 take it",
                request_text(req)
            )
        } else if job.kernels_per_node() > 1 {
            let k = job.kernels_per_node();
            let of = if want > 1 { format!("each of {want} nodes") } else { "one node".to_string() };
            format!(
                "needs {k} kernels with {} each free on {of}, {capable} of {} ready nodes can take them",
                request_text(req),
                self.ready
            )
        } else if want > 1 {
            let have = match capable {
                0 => "none has".to_string(),
                1 => "1 has".to_string(),
                k => format!("{k} have"),
            };
            format!("needs {want} nodes with {} free, {have}", request_text(req))
        } else {
            match closest {
                Some((i, s)) => self.render(i, s, req),
                None => self.none_usable(req),
            }
        };
        if narrow(job) {
            if self.words == Words::KindsOnly {
                return why;
            }
            return match self.cannot_mount_folders(job) {
                0 => why,
                k => format!(
                    "{why}; {k} of {} ready nodes cannot mount data folders (their agents are not root)",
                    self.ready
                ),
            };
        }
        if quick < want {
            let d = Dominated {
                gpu: gpu_level(req),
                cpus: req.whole_cpus(),
                mem: req.mem_bytes,
                want,
                closest: closest.map(|(i, _)| i),
            };
            // Keep only the minimal entries: a new one replaces those it is below.
            self.dominated.retain(|e| !(e.want == d.want && e.gpu >= d.gpu && e.cpus >= d.cpus && e.mem >= d.mem));
            self.dominated.push(d);
        }
        self.exact.insert(shape(job), why.clone());
        why
    }
}

/// Whether the job sees only some nodes (its image, its mounts or folders, its features),
/// takes whole nodes, or several kernels per node: the memos, which hold for one kernel on
/// every node, do not apply to it: its placement depends on more than its [`shape`].
pub(crate) fn narrow(job: &PendingJob) -> bool {
    job.image.is_some()
        || !job.mounts.is_empty()
        || job.folders
        || job.kernels_per_node() > 1
        || job.constraint.is_some()
        || job.exclusive
}

/// What a plain job's placement depends on: its request, NUMA policy and node count.
pub(crate) fn shape(job: &PendingJob) -> ShapeKey {
    let r = &job.request;
    (r.cpu_milli, r.mem_bytes, r.gpu_milli, numa_code(job.numa), job.nodes.max(1))
}
