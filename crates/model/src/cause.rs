//! Why a job stops and how it ended, typed: what the store keeps in columns, the API returns
//! and the manager acts on after a restart. The job's `reason` says the same in words for
//! people; nothing reads it back.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::job::JobId;
use crate::job::JobState;

/// What happens to a preempted job once its kernels stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PreemptAction {
    /// Back to PENDING, a new attempt.
    Requeue,
    /// CANCELLED.
    Cancel,
}

impl PreemptAction {
    pub fn as_str(self) -> &'static str {
        match self {
            PreemptAction::Requeue => "requeue",
            PreemptAction::Cancel => "cancel",
        }
    }

    pub fn parse(s: &str) -> Option<PreemptAction> {
        match s {
            "requeue" => Some(PreemptAction::Requeue),
            "cancel" => Some(PreemptAction::Cancel),
            _ => None,
        }
    }
}

/// Who asked a job to stop before its end: kept while it is TERMINATING (so a restarted
/// manager finishes the stop the same way) and after it ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StopCause {
    /// A user (the owner or an admin) cancelled it.
    Cancelled { by: String },
    /// A higher-priority job preempted it; it is then requeued or cancelled.
    Preempted { by_job: JobId, action: PreemptAction },
    /// An interactive session had no client attached and no app traffic for `idle_secs`, its
    /// queue's `idle_timeout`.
    Idle { idle_secs: u64 },
    /// A user (the owner, an admin, or the job itself with its step token) asked for it to
    /// run again (`berth requeue`, Slurm's `scontrol requeue`): back to PENDING once its
    /// kernels stopped, as a new attempt.
    Requeued { by: String },
    /// The serving controller stopped a replica its endpoint no longer wants: the endpoint
    /// was scaled down (`berth serve scale`, the autoscaler) or a rolling update replaced it.
    /// `endpoint` is the endpoint's name, `wants` how many replicas it wanted then. Not a
    /// failure: the replica ends [`EndCause::ScaledDown`].
    ScaledDown { endpoint: String, wants: u32 },
}

/// How a job's run ended (set with its final state).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum EndCause {
    /// Its main kernel exited by itself (any exit code; see `exit_code`).
    Exited,
    /// A kernel could not be started (program or image missing, no permission, ...).
    LaunchFailed,
    /// A kernel was killed for exceeding its memory.
    OutOfMemory,
    /// It reached its time limit.
    TimeLimit,
    /// A user cancelled it ([`StopCause::Cancelled`] says who).
    Cancelled,
    /// A higher-priority job preempted it and the queue cancels victims.
    Preempted,
    /// Its agent stopped it on its own (the agent was shut down with `--stop-jobs`).
    StoppedByAgent,
    /// Its node stopped answering, or fenced itself off after losing the manager.
    NodeLost,
    /// Its node answered but no longer had the kernel.
    KernelLost,
    /// An interactive session stayed idle past its queue's `idle_timeout` ([`StopCause::Idle`]).
    Idle,
    /// Cancelled by the scheduler: its dependency can never be satisfied.
    Dependency,
    /// A serving replica its endpoint no longer wanted ([`StopCause::ScaledDown`]): its state
    /// is CANCELLED (stopped before its own end), which people see as `SCALED-DOWN`
    /// ([`state_label`]), since it is no failure.
    ScaledDown,
}

impl EndCause {
    pub const ALL: [EndCause; 12] = [
        EndCause::Exited,
        EndCause::LaunchFailed,
        EndCause::OutOfMemory,
        EndCause::TimeLimit,
        EndCause::Cancelled,
        EndCause::Preempted,
        EndCause::StoppedByAgent,
        EndCause::NodeLost,
        EndCause::KernelLost,
        EndCause::Idle,
        EndCause::Dependency,
        EndCause::ScaledDown,
    ];

    /// The stored and serialised name.
    pub fn as_str(self) -> &'static str {
        match self {
            EndCause::Exited => "exited",
            EndCause::LaunchFailed => "launch_failed",
            EndCause::OutOfMemory => "out_of_memory",
            EndCause::TimeLimit => "time_limit",
            EndCause::Cancelled => "cancelled",
            EndCause::Preempted => "preempted",
            EndCause::StoppedByAgent => "stopped_by_agent",
            EndCause::NodeLost => "node_lost",
            EndCause::KernelLost => "kernel_lost",
            EndCause::Idle => "idle",
            EndCause::Dependency => "dependency",
            EndCause::ScaledDown => "scaled_down",
        }
    }

    pub fn parse(s: &str) -> Option<EndCause> {
        EndCause::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// A job's state as people read it (`berth ps`, `berth show`): its state, except that a
/// serving replica stopped by a scale-down reads `SCALED-DOWN`, not `CANCELLED`, which looks
/// like a failure (Kubernetes likewise shows a container's end, `Completed`, not the pod's
/// phase). The API's `state` stays CANCELLED, and `--state CANCELLED` finds it.
pub fn state_label(state: JobState, end: Option<EndCause>) -> &'static str {
    match (state, end) {
        (JobState::Cancelled, Some(EndCause::ScaledDown)) => "SCALED-DOWN",
        (s, _) => s.as_str(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_names_are_the_serde_names() {
        for c in EndCause::ALL {
            assert_eq!(serde_json::to_string(&c).unwrap(), format!("\"{}\"", c.as_str()));
            assert_eq!(EndCause::parse(c.as_str()), Some(c));
        }
        for a in [PreemptAction::Requeue, PreemptAction::Cancel] {
            assert_eq!(serde_json::to_string(&a).unwrap(), format!("\"{}\"", a.as_str()));
            assert_eq!(PreemptAction::parse(a.as_str()), Some(a));
        }
        let s = StopCause::Preempted { by_job: 6, action: PreemptAction::Requeue };
        assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"kind":"preempted","by_job":6,"action":"requeue"}"#);
    }

    #[test]
    fn scaled_down_replicas_do_not_read_as_failures() {
        assert_eq!(state_label(JobState::Cancelled, Some(EndCause::ScaledDown)), "SCALED-DOWN");
        assert_eq!(state_label(JobState::Cancelled, Some(EndCause::Cancelled)), "CANCELLED");
        assert_eq!(state_label(JobState::Running, None), "RUNNING");
        let s = StopCause::ScaledDown { endpoint: "llm".into(), wants: 1 };
        assert_eq!(serde_json::to_string(&s).unwrap(), r#"{"kind":"scaled_down","endpoint":"llm","wants":1}"#);
    }
}
