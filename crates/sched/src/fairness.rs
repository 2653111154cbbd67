//! The figures the fair orderings compare (`order.rs`, `set_order.rs`): Slurm's fair-share
//! factors of (project, user) pairs, and DRF's dominant shares as exact integers.

use std::collections::{BTreeMap, BTreeSet};

use berth_model::{Binding, ResourceRequest};

use crate::FairShare;

/// Slurm's fair-share factor `2^(−usage_share / shares_share)`: 1 for no usage, 0.5 for
/// usage equal to the share, towards 0 above it. 0 for a zero share; non-finite or negative
/// inputs count as 0.
pub fn fair_share_factor(usage_share: f64, shares_share: f64) -> f64 {
    let clean = |x: f64| if x.is_finite() && x > 0.0 { x } else { 0.0 };
    let (u, s) = (clean(usage_share), clean(shares_share));
    if s == 0.0 { 0.0 } else { (-u / s).exp2() }
}

/// `(F_project, F_user)` for every (project, user) with jobs in the queue (module doc).
pub fn fair_share_factors<'s>(
    pairs: &BTreeSet<(&'s str, &'s str)>,
    fs: &FairShare,
) -> BTreeMap<(&'s str, &'s str), (f64, f64)> {
    let clean = |x: Option<&f64>| x.copied().filter(|x| x.is_finite() && *x > 0.0).unwrap_or(0.0);
    let projects: BTreeSet<&str> = pairs.iter().map(|&(p, _)| p).collect();
    let w_sum: f64 = projects.iter().map(|p| fs.project_weights.get(*p).map_or(1.0, |w| clean(Some(w)))).sum();
    let u_sum: f64 = projects.iter().map(|p| clean(fs.usage_by_project.get(*p))).sum();
    let mut out = BTreeMap::new();
    for &p in &projects {
        let w = fs.project_weights.get(p).map_or(1.0, |w| clean(Some(w)));
        let s_p = if w_sum > 0.0 { w / w_sum } else { 0.0 };
        let u_p = if u_sum > 0.0 { clean(fs.usage_by_project.get(p)) / u_sum } else { 0.0 };
        let f_p = fair_share_factor(u_p, s_p);
        // The pairs are sorted by project: its users follow each other, from `(p, "")` on (a
        // scan of every pair for every project made a pass quadratic in the users).
        let users: Vec<&str> = pairs.range((p, "")..).take_while(|&&(q, _)| q == p).map(|&(_, u)| u).collect();
        let uu_sum: f64 = users.iter().map(|u| clean(fs.usage_by_user.get(*u))).sum();
        let s_u = 1.0 / users.len() as f64;
        for u in users {
            let u_u = if uu_sum > 0.0 { clean(fs.usage_by_user.get(u)) / uu_sum } else { 0.0 };
            out.insert((p, u), (f_p, fair_share_factor(u_u, s_u)));
        }
    }
    out
}

/// What a binding holds, as a request (DRF's holdings of running jobs).
pub(crate) fn binding_use(b: &Binding) -> ResourceRequest {
    ResourceRequest { cpu_milli: b.cpu_milli, mem_bytes: b.mem_bytes, gpu_milli: b.gpus.iter().map(|g| g.milli).sum() }
}

/// A dominant share in parts per billion: the largest of `used / totals` over the resources
/// the queue has.
pub(crate) fn dominant_share(used: &[u64; 3], totals: &[u64; 3]) -> u64 {
    (0..3)
        .filter(|&k| totals[k] > 0)
        .map(|k| (used[k] as u128 * 1_000_000_000 / totals[k] as u128).min(u64::MAX as u128) as u64)
        .max()
        .unwrap_or(0)
}

/// Adds `times` × `req` to a user's holdings (CPU thousandths, memory bytes, GPU thousandths).
pub(crate) fn charge(used: &mut [u64; 3], req: &ResourceRequest, times: u64) {
    used[0] += req.cpu_milli * times;
    used[1] += req.mem_bytes * times;
    used[2] += req.gpu_milli * times;
}
