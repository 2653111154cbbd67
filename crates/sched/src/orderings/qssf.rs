//! `qssf` (quasi-shortest service first, like Helios' QSSF): within a band, by expected service
//! (`service::expected`: devices × the estimate, else the limit), then job id. Indexed by
//! expected service, which is fixed while a job is pending.

use std::cmp::Reverse;
use std::ops::Bound::{Excluded, Unbounded};

use berth_model::JobId;

use super::{Groups, Numbers, Policy, Start};
use crate::PendingJob;
use crate::queue_set::QueueSet;

pub(crate) struct Qssf;

impl Policy for Qssf {
    /// The last (band, expected service, id) returned.
    type Cursor = Option<(Reverse<i32>, u64, JobId)>;

    fn group(job: &PendingJob, _: Numbers) -> Option<u64> {
        Some(crate::service::expected(job))
    }

    fn cursor(_: &Start) -> Self::Cursor {
        None
    }

    fn next(last: &mut Self::Cursor, _: &QueueSet, index: &Groups) -> Option<JobId> {
        let (band, service, id) = match *last {
            None => index.iter().next().map(|(&(b, s), ids)| (b, s, *ids.first().expect("empty sets are dropped")))?,
            Some((b, s, id)) => match index.get(&(b, s)).and_then(|ids| ids.range((Excluded(id), Unbounded)).next()) {
                Some(&next) => (b, s, next),
                None => index
                    .range((Excluded((b, s)), Unbounded))
                    .next()
                    .map(|(&(b, s), ids)| (b, s, *ids.first().expect("empty sets are dropped")))?,
            },
        };
        *last = Some((band, service, id));
        Some(id)
    }
}
