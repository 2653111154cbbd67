//! `lifo`: within a band, newest first (job id descending): each band of the set's (band, id)
//! order walked from its highest id down.

use std::ops::Bound::{Excluded, Included, Unbounded};

use berth_model::JobId;

use super::{Groups, Policy, Start};
use crate::queue_set::{Key, QueueSet};

pub(crate) struct Lifo;

impl Policy for Lifo {
    /// The last key returned.
    type Cursor = Option<Key>;

    fn cursor(_: &Start) -> Option<Key> {
        None
    }

    fn next(last: &mut Option<Key>, q: &QueueSet, _: &Groups) -> Option<JobId> {
        let lower_in_band = last.and_then(|(b, id)| q.order.range((b, JobId::MIN)..(b, id)).next_back());
        let k = match lower_in_band {
            Some(k) => *k,
            None => {
                // The highest id of the next band.
                let after = match *last {
                    None => q.order.first(),
                    Some((b, _)) => q.order.range((Excluded((b, JobId::MAX)), Unbounded)).next(),
                }?;
                let b = after.0;
                *q.order.range((Included((b, JobId::MIN)), Included((b, JobId::MAX)))).next_back()?
            }
        };
        *last = Some(k);
        Some(k.1)
    }
}
