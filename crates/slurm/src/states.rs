//! berth's job states, pending reasons and node states in Slurm's words, and Slurm's state
//! names (`-t PD,R`, `--state=COMPLETED`) read back into berth's, for squeue, sacct, scancel
//! and sinfo. Scripts written for Slurm compare these words, so they are Slurm's exactly.

use berth_model::api::{JobView, NodeState, NodeView};
use berth_model::{EndCause, JobState, PendingKind, StopCause};

/// A job's state as squeue shows it: compact (`%t`: `PD`) and long (`%T`: `PENDING`).
pub fn job_state(j: &JobView) -> (&'static str, &'static str) {
    match (j.state, j.end_cause) {
        (JobState::Pending, _) => ("PD", "PENDING"),
        // Placed, its kernels being set up or started: Slurm's nodes booting.
        (JobState::Scheduled | JobState::Preparing, _) => ("CF", "CONFIGURING"),
        (JobState::Running, _) => ("R", "RUNNING"),
        (JobState::Terminating, _) => ("CG", "COMPLETING"),
        (JobState::Succeeded, _) => ("CD", "COMPLETED"),
        (JobState::Failed, Some(EndCause::OutOfMemory)) => ("OOM", "OUT_OF_MEMORY"),
        (JobState::Failed, _) => ("F", "FAILED"),
        (JobState::Cancelled, Some(EndCause::Preempted)) => ("PR", "PREEMPTED"),
        (JobState::Cancelled, _) => ("CA", "CANCELLED"),
        (JobState::Timeout, _) => ("TO", "TIMEOUT"),
        (JobState::Lost, _) => ("NF", "NODE_FAIL"),
    }
}

/// A job's state as sacct shows it: squeue's long word, and `CANCELLED by NAME` when a user
/// cancelled it (Slurm gives a uid there; berth knows the user's name). The first word is
/// always the state alone, which is what submitit and others split off.
///
/// A placed job being set up is `RUNNING` here, not squeue's `CONFIGURING`: in Slurm that is a
/// flag on a running job, which sacct leaves out, and tools that read sacct take a state they
/// do not know for an ended one (submitit then never looks again).
pub fn sacct_state(j: &JobView) -> String {
    let word = match j.state {
        JobState::Scheduled | JobState::Preparing => "RUNNING",
        _ => job_state(j).1,
    };
    match (j.state, &j.stop) {
        (JobState::Cancelled, Some(StopCause::Cancelled { by })) => format!("{word} by {by}"),
        _ => word.to_string(),
    }
}

/// Slurm's state names and compact codes, any case, and berth's own names.
const NAMES: &[(&str, &str, &[JobState])] = &[
    ("PENDING", "PD", &[JobState::Pending]),
    ("CONFIGURING", "CF", &[JobState::Scheduled, JobState::Preparing]),
    ("RUNNING", "R", &[JobState::Running]),
    ("COMPLETING", "CG", &[JobState::Terminating]),
    ("COMPLETED", "CD", &[JobState::Succeeded]),
    ("FAILED", "F", &[JobState::Failed]),
    ("OUT_OF_MEMORY", "OOM", &[JobState::Failed]),
    ("CANCELLED", "CA", &[JobState::Cancelled]),
    ("PREEMPTED", "PR", &[JobState::Cancelled]),
    ("TIMEOUT", "TO", &[JobState::Timeout]),
    ("NODE_FAIL", "NF", &[JobState::Lost]),
];

/// Slurm states berth jobs are never in, and their codes: valid in a filter, matching nothing.
const NEVER: &str = "SUSPENDED S BOOT_FAIL BF DEADLINE DL REQUEUED RQ REQUEUE_FED RF REQUEUE_HOLD RH \
    RESV_DEL_HOLD RD RESIZING RS REVOKED RV SIGNALING SI SPECIAL_EXIT SE STAGE_OUT SO STOPPED ST";

/// The berth states a `-t`/`--state` list names (`PD,R`, `running`, `all`), without repeats;
/// `Ok(None)` for `all`. A name Slurm does not know is an error naming it.
pub fn parse_states(list: &str) -> Result<Option<Vec<JobState>>, String> {
    let mut out: Vec<JobState> = Vec::new();
    for name in list.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        if name.eq_ignore_ascii_case("all") {
            return Ok(None);
        }
        let named =
            NAMES.iter().find(|(long, short, _)| long.eq_ignore_ascii_case(name) || short.eq_ignore_ascii_case(name));
        let states: Vec<JobState> = match named {
            Some((_, _, s)) => s.to_vec(),
            None if NEVER.split_whitespace().any(|n| n.eq_ignore_ascii_case(name)) => Vec::new(),
            None => vec![name.parse::<JobState>().map_err(|_| format!("invalid job state specified: {name}"))?],
        };
        for s in states {
            if !out.contains(&s) {
                out.push(s);
            }
        }
    }
    Ok(Some(out))
}

/// Why a pending job waits, in Slurm's reason words where Slurm has one.
pub fn reason_word(kind: PendingKind) -> &'static str {
    match kind {
        PendingKind::Queued => "None",
        PendingKind::Resources => "Resources",
        PendingKind::Priority | PendingKind::Backfill => "Priority",
        PendingKind::NoNodes => "ReqNodeNotAvail",
        PendingKind::Queue => "PartitionDown",
        PendingKind::Preempting => "Preempting",
        PendingKind::Quota => "QOSResourceLimit",
        PendingKind::Image => "ImageNotAvail",
        PendingKind::Mount => "MountNotAvail",
        PendingKind::Dependency => "Dependency",
        PendingKind::DependencyNeverSatisfied => "DependencyNeverSatisfied",
        PendingKind::BeginTime => "BeginTime",
        PendingKind::ArrayTasks => "JobArrayTaskLimit",
        PendingKind::HeldUser => "JobHeldUser",
        PendingKind::HeldAdmin => "JobHeldAdmin",
    }
}

/// `%R`: the nodes of a job that has some, `(Reason)` otherwise.
pub fn nodes_or_reason(j: &JobView) -> String {
    if !j.nodes.is_empty() {
        return super::format::hostlist(&j.nodes);
    }
    format!("({})", j.pending_reason.as_ref().map_or("None", |r| reason_word(r.kind)))
}

/// A node's state in sinfo's words: compact (`%t`: `mix`) and long (`%T`: `mixed`). A ready
/// node whose agent is not connected is marked `*`, Slurm's "not responding".
pub fn node_state(n: &NodeView) -> (String, String) {
    let gpus_used: u64 = n.gpus.iter().map(|g| g.used_milli).sum();
    let gpus_total: u64 = n.gpus.iter().map(|g| g.total_milli).sum();
    let busy = n.cpus_used > 0 || gpus_used > 0 || n.running_jobs > 0;
    let full = (n.cpus_total > 0 && n.cpus_used >= n.cpus_total) || (gpus_total > 0 && gpus_used >= gpus_total);
    let (short, long) = match n.state {
        NodeState::Ready if full => ("alloc", "allocated"),
        NodeState::Ready if busy => ("mix", "mixed"),
        NodeState::Ready => ("idle", "idle"),
        NodeState::Draining => ("drng", "draining"),
        NodeState::Drained => ("drain", "drained"),
        NodeState::Lost => ("down", "down"),
    };
    let star = if !n.connected || n.state == NodeState::Lost { "*" } else { "" };
    (format!("{short}{star}"), format!("{long}{star}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixtures::job;

    #[test]
    fn state_lists() {
        assert_eq!(parse_states("PD,r").unwrap(), Some(vec![JobState::Pending, JobState::Running]));
        assert_eq!(parse_states("configuring").unwrap(), Some(vec![JobState::Scheduled, JobState::Preparing]));
        assert_eq!(parse_states("CD,SUCCEEDED").unwrap(), Some(vec![JobState::Succeeded]), "berth's names too");
        assert_eq!(parse_states("pending,all").unwrap(), None);
        assert_eq!(parse_states("suspended").unwrap(), Some(vec![]));
        assert_eq!(parse_states("PD,bogus").unwrap_err(), "invalid job state specified: bogus");
    }

    #[test]
    fn every_state_has_slurm_words() {
        for s in JobState::ALL {
            let j = job(s);
            let (short, long) = job_state(&j);
            assert!(parse_states(short).unwrap().unwrap().contains(&s), "{s}");
            let configuring = matches!(s, JobState::Scheduled | JobState::Preparing);
            assert!(sacct_state(&j).starts_with(if configuring { "RUNNING" } else { long }));
        }
        // Regression (submitit saw a job being set up as CONFIGURING, took it for ended and
        // never asked again): sacct says RUNNING, squeue CONFIGURING.
        for s in [JobState::Scheduled, JobState::Preparing] {
            assert_eq!((sacct_state(&job(s)).as_str(), job_state(&job(s)).1), ("RUNNING", "CONFIGURING"));
        }
        let mut j = job(JobState::Cancelled);
        j.stop = Some(StopCause::Cancelled { by: "alice".into() });
        assert_eq!(sacct_state(&j), "CANCELLED by alice");
        j.end_cause = Some(EndCause::Preempted);
        j.stop = None;
        assert_eq!(job_state(&j), ("PR", "PREEMPTED"));
    }

    #[test]
    fn reasons_in_parentheses() {
        let mut j = job(JobState::Pending);
        j.pending_reason = Some(berth_model::PendingReason::new(PendingKind::Resources, "resources: needs 1 GPU"));
        assert_eq!(nodes_or_reason(&j), "(Resources)");
        j.pending_reason = None;
        assert_eq!(nodes_or_reason(&j), "(None)");
        j.nodes = vec!["n1".into(), "n2".into()];
        assert_eq!(nodes_or_reason(&j), "n[1-2]");
    }
}
