//! What a node must be for a job besides having the free resources: offer the job's features
//! (Slurm's `--constraint`, matched against the node's labels by the rule of
//! `berth_model::constraint`), and, for an exclusive job (`--exclusive`), run nothing else.
//!
//! An exclusive kernel is bound to its whole node: every CPU, every NUMA node's memory and
//! every GPU. So no other rule keeps jobs off a node it holds: the ledger has nothing free
//! left, and every placement, backfill reservation and preemption plan (all of which go
//! through [`NodeLedger::bind_job`]) sees that. Its request is the least the node must have.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use berth_model::{Binding, Constraint, GpuShare, NumaPolicy, ResourceRequest};

use crate::PendingJob;
use crate::ledger::NodeLedger;
use crate::shortfall::Shortfall;

impl NodeLedger {
    /// Sets the node's labels (its features): jobs with a constraint are placed only where
    /// [`NodeLedger::offers`] holds.
    pub fn set_labels(&mut self, labels: BTreeMap<String, String>) {
        self.labels = Arc::new(labels);
    }

    /// The labels the node's agent reported.
    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.labels
    }

    /// Whether the node satisfies the job's constraint (any node does without one).
    pub fn offers(&self, job: &PendingJob) -> bool {
        job.constraint.as_ref().is_none_or(|c| c.matches(&self.labels))
    }

    /// The binding of an exclusive kernel: the whole node, if nothing else holds any of it
    /// and `req` fits it under `numa`.
    pub(crate) fn bind_whole(&self, req: &ResourceRequest, numa: NumaPolicy) -> Result<Binding, Shortfall> {
        if !self.schedulable() {
            return Err(Shortfall::NotReady);
        }
        if !self.is_empty() {
            return Err(Shortfall::Busy);
        }
        // The request must fit as a plain kernel would: it is what the job needs at least.
        self.bind(req, numa)?;
        let mut mems: Vec<u32> = self.numas.iter().map(|n| n.id).collect();
        mems.sort_unstable();
        Ok(Binding {
            node: self.name().to_string(),
            cpus: self.cpus.iter().map(|c| c.id).collect(),
            cpu_milli: self.cpus_total() as u64 * 1000,
            mems,
            mem_bytes: self.mem_total(),
            gpus: self
                .gpus
                .iter()
                .map(|g| GpuShare { uuid: g.uuid.to_string(), index: g.index, milli: 1000 })
                .collect(),
            port: None,
        })
    }
}

/// The most labels a refusal lists.
const MAX_LISTED: usize = 20;

/// No node of the job's queue offers its features (`--constraint`), refused at submit; the
/// text is the API's error body and names the labels the queue's nodes do have.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("no node in queue {queue} offers the features {constraint} (--constraint): {}", have_text(labels))]
pub struct NoNodeOffers {
    pub queue: String,
    /// The constraint as the user wrote it.
    pub constraint: String,
    /// Every `KEY=VALUE` label the queue's nodes have, sorted.
    pub labels: BTreeSet<String>,
}

/// `its nodes' labels are a=1, b=2 (…)`, listing at most [`MAX_LISTED`].
fn have_text(labels: &BTreeSet<String>) -> String {
    let listed: Vec<&str> = labels.iter().take(MAX_LISTED).map(String::as_str).collect();
    let more =
        if labels.len() > MAX_LISTED { format!(" and {} more", labels.len() - MAX_LISTED) } else { String::new() };
    if listed.is_empty() {
        "its nodes have no labels (berth agent --label KEY=VALUE)".to_string()
    } else {
        format!("its nodes' labels are {}{more} (a feature is a label's KEY, or KEY=VALUE)", listed.join(", "))
    }
}

/// Submit-time check of a job's features: the nodes of `queue` that offer them, for the
/// feasibility check to judge the job's resources on. Like Slurm ("Requested node
/// configuration is not available"), a constraint that no node of the queue offers is
/// refused; a queue without nodes passes, since nodes may join it later.
pub fn nodes_offering<'a>(
    constraint: Option<&Constraint>,
    nodes: &'a [NodeLedger],
    queue: &str,
) -> Result<Cow<'a, [NodeLedger]>, NoNodeOffers> {
    let Some(c) = constraint else { return Ok(Cow::Borrowed(nodes)) };
    let in_queue = || nodes.iter().filter(|l| l.queue() == queue);
    let offering: Vec<NodeLedger> = in_queue().filter(|l| c.matches(l.labels())).cloned().collect();
    if !offering.is_empty() || in_queue().next().is_none() {
        return Ok(Cow::Owned(offering));
    }
    let labels: BTreeSet<String> =
        in_queue().flat_map(|l| l.labels().iter().map(|(k, v)| format!("{k}={v}"))).collect();
    Err(NoNodeOffers { queue: queue.to_string(), constraint: c.to_string(), labels })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{pending, smt};

    const GIB: u64 = 1 << 30;

    #[test]
    fn an_exclusive_kernel_takes_the_whole_node_or_waits_for_it() {
        // 2 NUMA nodes × 2 cores × 2 threads, 4 GiB each, 1 GPU each.
        let mut l = NodeLedger::new("n1", "q", smt(2, 2, 4 * GIB, 1));
        let mut job = pending(1, ResourceRequest { cpu_milli: 1000, mem_bytes: GIB, gpu_milli: 0 });
        job.exclusive = true;
        let b = l.bind_job(&job).unwrap().remove(0);
        assert_eq!((b.cpus.len(), b.cpu_milli, b.mem_bytes), (8, 8000, 8 * GIB));
        assert_eq!((b.mems.as_slice(), b.gpus.len()), ([0, 1].as_slice(), 2));
        assert!(b.gpus.iter().all(|g| g.milli == 1000));
        l.allocate(&b).expect("the whole node fits an empty ledger");
        // Nothing else fits beside it, not even the smallest job.
        let small = pending(2, ResourceRequest { cpu_milli: 1, mem_bytes: 1, gpu_milli: 0 });
        assert!(l.bind_job(&small).is_err());
        l.release(&b);
        // A plain kernel on the node keeps an exclusive job off it.
        let b = l.bind_job(&small).unwrap().remove(0);
        l.allocate(&b).unwrap();
        assert_eq!(l.bind_job(&job), Err(Shortfall::Busy));
        l.release(&b);
        // The request is the least the node must have.
        job.request.gpu_milli = 3000;
        assert!(matches!(l.bind_job(&job), Err(Shortfall::Gpu { .. })));
        l.set_schedulable(false);
        assert_eq!(l.bind_job(&job), Err(Shortfall::NotReady));
    }

    #[test]
    fn a_constraint_no_node_of_the_queue_offers_is_refused_at_submit() {
        let mut a = NodeLedger::new("a", "q", smt(1, 1, GIB, 0));
        a.set_labels([("gpu".to_string(), "v100".to_string())].into());
        let mut b = NodeLedger::new("b", "q", smt(1, 1, GIB, 0));
        b.set_labels([("a100".to_string(), "yes".to_string())].into());
        let nodes = [a, b, NodeLedger::new("c", "other", smt(1, 1, GIB, 0))];
        let c = |s: &str| s.parse::<Constraint>().unwrap();
        assert_eq!(nodes_offering(None, &nodes, "q").unwrap().len(), 3, "no constraint: every node");
        let found = nodes_offering(Some(&c("a100|h100")), &nodes, "q").unwrap();
        assert_eq!(found.iter().map(|l| l.name()).collect::<Vec<_>>(), ["b"]);
        assert_eq!(
            nodes_offering(Some(&c("h100")), &nodes, "q").unwrap_err().to_string(),
            "no node in queue q offers the features h100 (--constraint): its nodes' labels are a100=yes, gpu=v100 \
             (a feature is a label's KEY, or KEY=VALUE)"
        );
        let e = nodes_offering(Some(&c("h100")), &nodes, "other").unwrap_err().to_string();
        assert!(e.ends_with("its nodes have no labels (berth agent --label KEY=VALUE)"), "{e}");
        assert!(nodes_offering(Some(&c("h100")), &nodes, "empty").unwrap().is_empty(), "nodes may join later");
    }

    #[test]
    fn a_node_offers_the_features_of_its_labels() {
        let mut l = NodeLedger::new("n1", "q", smt(1, 1, GIB, 0));
        let mut job = pending(1, ResourceRequest::default());
        assert!(l.offers(&job), "no constraint: every node");
        job.constraint = Some("a100&ib".parse().unwrap());
        assert!(!l.offers(&job));
        l.set_labels([("a100".to_string(), "yes".to_string()), ("ib".to_string(), "hdr".to_string())].into());
        assert!(l.offers(&job));
        assert_eq!(l.clone().labels(), l.labels(), "shared by clones");
    }
}
