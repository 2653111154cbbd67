//! The queue orderings (`ordering = "…"` of a queue), each written once, in its own file, as a
//! [`Policy`]: the group a pending job is indexed under in the pending set, and the cursor
//! that walks that index in queue order. Priority bands always come first (higher priority
//! first); within a band the ordering decides. The [`Ordering`] name table (`FromStr`,
//! `Display`, serde, the list of names) is what the config file, the API and `berth sim` read.
//!
//! **Adding a policy** takes one file here: `NAME.rs` with a unit struct implementing
//! [`Policy`] (its index group and its cursor), and one line in the `policies!` table below,
//! which gives it its name (kebab-case) and its place in [`Ordering`] and [`Cursor`]. The
//! property tests walk every ordering against a naive sort of the same jobs
//! (`order_oracle.rs`, test only): give the new one its arm there.
//!
//! Cursors are owned (no borrow of the set) so that where a walk stops, a clone of one stands
//! for every untried job behind it ([`crate::UntriedRest`]).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound::{Excluded, Unbounded};

use berth_model::{JobId, ResourceRequest};

pub(crate) use crate::queue_set::Groups;
use crate::queue_set::{QueueSet, SLOTS};
use crate::running_set::RunQueue;
use crate::{FairShare, PendingJob, RunningJob};

mod drf;
mod fair_share;
mod fifo;
mod las;
mod lifo;
mod qssf;

/// The numbers the set gave a pending job's user and (project, user) pair (numbered when first
/// seen in the queue), for orderings that group by them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Numbers {
    pub user: u32,
    pub pair: u32,
}

/// What the fair orderings read of a queue's running jobs: the jobs, or the sums the
/// caller's running set keeps of them (the same figures, without reading every job).
#[derive(Clone, Copy)]
pub(crate) enum Running<'r, 'a> {
    List(&'r [&'a RunningJob]),
    Kept(Option<&'a RunQueue>),
}

/// What a cursor starts from: the queue's set, its running jobs (or the caller's sums of them),
/// the fair-share input, the queue's capacity (CPU thousandths, memory bytes, GPU thousandths)
/// and its `las` thresholds.
pub(crate) struct Start<'r, 'a> {
    pub q: &'r QueueSet,
    pub running: Running<'r, 'a>,
    pub fs: &'r FairShare,
    pub totals: [u64; 3],
    pub las_thresholds: &'r [u64],
}

/// One queue ordering (module doc).
pub(crate) trait Policy {
    /// Where a walk stands; a clone resumes it.
    type Cursor: Clone + std::fmt::Debug + PartialEq + Eq;

    /// The group `job` is indexed under within its band (the jobs of one group are walked by
    /// id); `None` (the default): the ordering walks the set's (band, id) order and keeps no
    /// index.
    fn group(_job: &PendingJob, _numbers: Numbers) -> Option<u64> {
        None
    }

    /// A cursor at the start of the queue.
    fn cursor(start: &Start) -> Self::Cursor;

    /// The next job's id in queue order; `index`: this ordering's [`Groups`] in `q`.
    fn next(cursor: &mut Self::Cursor, q: &QueueSet, index: &Groups) -> Option<JobId>;

    /// The job `next` returned last started (`times` kernels of `req`): orderings that depend
    /// on what starts in the pass (DRF) charge it.
    fn started(_cursor: &mut Self::Cursor, _req: &ResourceRequest, _times: u64) {}
}

/// The table of orderings: `Variant => module::Type`, in the order of [`Ordering`].
macro_rules! policies {
    ($($(#[$attr:meta])* $variant:ident => $module:ident::$ty:ident,)*) => {
        /// How a queue orders jobs of the same priority band; its names are kebab-case
        /// (`fifo`, `fair-share`, …) everywhere: config file, API, `berth sim`.
        #[derive(
            Debug,
            Clone,
            Copy,
            PartialEq,
            Eq,
            Hash,
            Default,
            serde::Serialize,
            serde::Deserialize,
            strum::EnumString,
            strum::Display,
            strum::IntoStaticStr,
            strum::VariantArray,
        )]
        #[serde(rename_all = "kebab-case")]
        #[strum(serialize_all = "kebab-case")]
        pub enum Ordering {
            $($(#[$attr])* $variant,)*
        }

        /// A walk over a queue set under one ordering.
        #[derive(Debug, Clone, PartialEq, Eq)]
        pub(crate) enum Cursor {
            $($variant(<$module::$ty as Policy>::Cursor),)*
        }

        impl Ordering {
            /// [`Policy::group`] of this ordering.
            pub(crate) fn group(self, job: &PendingJob, numbers: Numbers) -> Option<u64> {
                match self {
                    $(Ordering::$variant => <$module::$ty as Policy>::group(job, numbers),)*
                }
            }

            /// [`Policy::cursor`] of this ordering.
            pub(crate) fn cursor(self, start: &Start) -> Cursor {
                match self {
                    $(Ordering::$variant => Cursor::$variant(<$module::$ty as Policy>::cursor(start)),)*
                }
            }
        }

        impl Cursor {
            /// The next job's id, in queue order.
            pub fn next(&mut self, q: &QueueSet) -> Option<JobId> {
                match self {
                    $(Cursor::$variant(c) => <$module::$ty as Policy>::next(c, q, q.index(Ordering::$variant as usize)),)*
                }
            }

            /// The job last returned started.
            pub fn started(&mut self, req: &ResourceRequest, times: u64) {
                match self {
                    $(Cursor::$variant(c) => <$module::$ty as Policy>::started(c, req, times),)*
                }
            }
        }

    };
}

policies! {
    /// Oldest first (by job id).
    #[default]
    Fifo => fifo::Fifo,
    /// Newest first.
    Lifo => lifo::Lifo,
    /// Dominant resource fairness over users: the user with the smallest dominant share of the
    /// queue's capacity (counting running jobs and this pass's starts) goes next.
    Drf => drf::Drf,
    /// Slurm-style fair share: users of projects that used less than their weight's share of
    /// decayed past usage go first ([`crate::FairShare`]).
    FairShare => fair_share::FairShareOrder,
    /// Least attained service with discretised levels (Tiresias' 2D-LAS): jobs that have
    /// received less service (devices × time run so far, [`PendingJob::attained`]) go first,
    /// level by level ([`crate::QueueConfig::las_thresholds`]), oldest first within a level.
    /// With preemption on, a job preempts running jobs of a higher level (`preempt.rs`).
    Las => las::Las,
    /// Quasi-shortest service first (like Helios' QSSF): the job with the least expected
    /// service (devices × expected run time: [`PendingJob::estimate_ms`], else its limit)
    /// goes first.
    Qssf => qssf::Qssf,
}

// The set keeps one index slot per ordering.
const _: () = assert!(Ordering::ALL.len() <= SLOTS, "raise queue_set::SLOTS to the number of orderings");

impl Ordering {
    /// Every ordering, in table order.
    pub const ALL: &'static [Ordering] = <Ordering as strum::VariantArray>::VARIANTS;

    /// The names, as a user should read them in an error: `"fifo", "lifo", … or "qssf"`.
    pub fn names_quoted() -> String {
        let names: Vec<String> = Self::ALL.iter().map(|o| format!("\"{o}\"")).collect();
        match names.split_last() {
            Some((last, [])) => last.clone(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

/// The key after `last` in `keys` (the first when none), which becomes `last`.
pub(crate) fn step<K: Ord + Copy>(keys: &BTreeSet<K>, last: &mut Option<K>) -> Option<K> {
    let k = match *last {
        None => keys.first().copied(),
        Some(k) => keys.range((Excluded(k), Unbounded)).next().copied(),
    }?;
    *last = Some(k);
    Some(k)
}

/// The first band after `band` (or the first band) that has a group.
pub(crate) fn next_band<V>(m: &BTreeMap<(Reverse<i32>, u64), V>, band: Option<Reverse<i32>>) -> Option<Reverse<i32>> {
    match band {
        None => m.keys().next().map(|k| k.0),
        Some(b) => m.range((Excluded((b, u64::MAX)), Unbounded)).next().map(|(k, _)| k.0),
    }
}

/// The groups of `band`, with the set of their ids there.
pub(crate) fn in_band<V>(m: &BTreeMap<(Reverse<i32>, u64), V>, band: Reverse<i32>) -> impl Iterator<Item = (u64, &V)> {
    m.range((band, 0)..=(band, u64::MAX)).map(|(k, v)| (k.1, v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_ordering_has_one_name_for_the_file_the_api_and_the_sim() {
        for &o in Ordering::ALL {
            let name = o.to_string();
            assert_eq!(name.parse::<Ordering>(), Ok(o));
            assert_eq!(serde_json::to_value(o).unwrap(), serde_json::Value::String(name));
        }
        assert_eq!(Ordering::FairShare.to_string(), "fair-share");
        assert_eq!(Ordering::names_quoted(), r#""fifo", "lifo", "drf", "fair-share", "las" or "qssf""#);
    }
}
