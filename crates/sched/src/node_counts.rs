//! A node's use as plain counts (CPUs, memory, each GPU's thousandths), released binding by
//! binding. Backfill's timeline needs, for most nodes and most end times, only whether a
//! request could fit and how the node scores; counting that is far cheaper than copying the
//! node's ledger and releasing each binding on it, which `backfill.rs` then does only for the
//! few nodes it must check in detail.

use berth_model::{Binding, ResourceRequest};

use crate::ledger::NodeLedger;
use crate::{Scoring, place};

#[derive(Debug, Clone)]
pub(crate) struct NodeCounts {
    cpus_total: u32,
    cpus_used: u32,
    mem_cap: u64,
    mem_used: u64,
    /// (GPU index, thousandths used), by index: the first [`INLINE`] in place (a walk
    /// counts thousands of nodes, and most have no more), the rest in `more`.
    inline: [(u32, u64); INLINE],
    len: usize,
    more: Vec<(u32, u64)>,
}

/// GPUs a node's counts hold without allocating.
const INLINE: usize = 8;

impl NodeCounts {
    pub fn of(l: &NodeLedger) -> Self {
        let mut c = Self {
            cpus_total: l.cpus_total(),
            cpus_used: l.cpus_used(),
            mem_cap: l.mem_total(),
            mem_used: l.mem_used(),
            inline: [(0, 0); INLINE],
            len: l.gpus.len(),
            more: Vec::new(),
        };
        if c.len <= INLINE {
            for (slot, g) in c.inline.iter_mut().zip(&l.gpus) {
                *slot = (g.index, g.used);
            }
        } else {
            c.more = l.gpus.iter().map(|g| (g.index, g.used)).collect();
        }
        c
    }

    fn gpus(&self) -> &[(u32, u64)] {
        if self.len <= INLINE { &self.inline[..self.len] } else { &self.more }
    }

    fn gpus_mut(&mut self) -> &mut [(u32, u64)] {
        if self.len <= INLINE { &mut self.inline[..self.len] } else { &mut self.more }
    }

    /// As [`NodeLedger::release`] changes the ledger's totals (for a binding it holds).
    pub fn release(&mut self, b: &Binding) {
        self.cpus_used = self.cpus_used.saturating_sub(b.cpus.len() as u32);
        self.mem_used = self.mem_used.saturating_sub(b.mem_bytes);
        let gpus = self.gpus_mut();
        for g in &b.gpus {
            if let Ok(i) = gpus.binary_search_by_key(&g.index, |x| x.0) {
                gpus[i].1 = gpus[i].1.saturating_sub(g.milli);
            }
        }
    }

    /// Whether one kernel of `r` fits by the totals (the binder may still refuse: NUMA, SMT).
    pub fn fits(&self, r: &ResourceRequest) -> bool {
        let gpus_ok = if r.gpu_milli >= 1000 {
            self.gpus().iter().filter(|g| g.1 == 0).count() as u64 >= r.gpu_milli / 1000
        } else {
            self.gpus().iter().map(|g| 1000u64.saturating_sub(g.1)).max().unwrap_or(0) >= r.gpu_milli
        };
        gpus_ok
            && self.cpus_total.saturating_sub(self.cpus_used) >= r.whole_cpus()
            && self.mem_cap.saturating_sub(self.mem_used) >= r.mem_bytes
    }

    /// The node's [`place::score_key`] with these counts.
    pub fn score_key(&self, scoring: Scoring) -> u64 {
        let gpu_used = self.gpus().iter().map(|g| g.1).sum();
        place::score_of(
            scoring,
            place::allocated_ppm_of(
                [self.cpus_used as u64, self.mem_used, gpu_used],
                [self.cpus_total as u64, self.mem_cap, self.gpus().len() as u64 * 1000],
            ),
        )
    }

    /// Whether the counts are the ledger's (checked in debug builds when a ledger is rebuilt).
    pub fn agrees_with(&self, l: &NodeLedger) -> bool {
        let c = NodeCounts::of(l);
        (c.cpus_used, c.mem_used, c.gpus()) == (self.cpus_used, self.mem_used, self.gpus())
    }
}
