//! `fifo`: within a band, oldest first (job id ascending), over the set's (band, id) order.

use berth_model::JobId;

use super::{Groups, Policy, Start, step};
use crate::queue_set::{Key, QueueSet};

pub(crate) struct Fifo;

impl Policy for Fifo {
    /// The last key returned.
    type Cursor = Option<Key>;

    fn cursor(_: &Start) -> Option<Key> {
        None
    }

    fn next(last: &mut Option<Key>, q: &QueueSet, _: &Groups) -> Option<JobId> {
        step(&q.order, last).map(|k| k.1)
    }
}
