//! `drf` (dominant resource fairness over users): a user's dominant share is
//! `max(cpu_u / cpu_T, mem_u / mem_T, gpu_u / gpu_T)`, where `x_u` is what the user's jobs of
//! this queue hold (running jobs' bindings, plus the requests of jobs started earlier in this
//! pass, times their node count) and `x_T` the queue's capacity (every node of the queue; a
//! resource the queue has none of is left out). Within a band, the next job is the oldest
//! (lowest id) pending job of the user with the smallest share; ties go to the lower job id.
//! Shares are exact integers (parts per billion), so the order is deterministic, and are
//! recomputed after every start of the pass. Indexed by user.

use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::ops::Bound::{Excluded, Unbounded};

use berth_model::{JobId, ResourceRequest};

use super::{Groups, Numbers, Policy, Running, Start, in_band, next_band};
use crate::PendingJob;
use crate::fairness::{binding_use, charge, dominant_share};
use crate::queue_set::QueueSet;
use crate::running_set::RunQueue;

pub(crate) struct Drf;

/// The current band, each user's holdings, and the users ready to pick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DrfCursor {
    band: Option<Reverse<i32>>,
    /// By user number (the set's): CPU thousandths, memory bytes, GPU thousandths.
    used: Vec<[u64; 3]>,
    totals: [u64; 3],
    /// (dominant share, head job id, user) of the current band's users.
    ready: BTreeSet<(u64, JobId, u32)>,
    /// The user and job `next` returned last, re-entered on the next call.
    last: Option<(u32, JobId)>,
}

impl Policy for Drf {
    type Cursor = Box<DrfCursor>;

    fn group(_: &PendingJob, numbers: Numbers) -> Option<u64> {
        Some(numbers.user as u64)
    }

    fn cursor(start: &Start) -> Box<DrfCursor> {
        let q = start.q;
        let mut d = DrfCursor {
            band: None,
            used: vec![[0; 3]; q.users.names.len()],
            totals: start.totals,
            ready: BTreeSet::new(),
            last: None,
        };
        // Holdings of users with nothing pending change no share that is compared.
        let pending = |user: &str| q.users.id(user).filter(|&u| q.users.count[u as usize] > 0);
        match start.running {
            Running::List(running) => {
                for r in running {
                    let Some(u) = pending(r.user.as_str()) else { continue };
                    for b in &r.bindings {
                        d.charge(u, &binding_use(b), 1);
                    }
                }
            }
            Running::Kept(kept) => {
                for (user, held) in kept.into_iter().flat_map(RunQueue::held) {
                    let Some(u) = pending(user) else { continue };
                    let used = &mut d.used[u as usize];
                    for k in 0..3 {
                        used[k] += held[k];
                    }
                }
            }
        }
        Box::new(d)
    }

    fn next(d: &mut Box<DrfCursor>, _: &QueueSet, index: &Groups) -> Option<JobId> {
        if let (Some((u, id)), Some(band)) = (d.last.take(), d.band)
            && let Some(&head) = index.get(&(band, u as u64)).and_then(|s| s.range((Excluded(id), Unbounded)).next())
        {
            d.ready.insert((d.share(u), head, u));
        }
        while d.ready.is_empty() {
            d.band = Some(next_band(index, d.band)?);
            for (u, ids) in in_band(index, d.band?) {
                let head = *ids.first().expect("empty sets are dropped");
                d.ready.insert((d.share(u as u32), head, u as u32));
            }
        }
        let (_, id, u) = d.ready.pop_first()?;
        d.last = Some((u, id));
        Some(id)
    }

    fn started(d: &mut Box<DrfCursor>, req: &ResourceRequest, times: u64) {
        if let Some((u, _)) = d.last {
            d.charge(u, req, times);
        }
    }
}

impl DrfCursor {
    fn charge(&mut self, u: u32, req: &ResourceRequest, times: u64) {
        charge(&mut self.used[u as usize], req, times);
    }

    fn share(&self, u: u32) -> u64 {
        dominant_share(&self.used[u as usize], &self.totals)
    }
}
