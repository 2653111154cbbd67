//! Why a job waits: a machine-readable kind and a sentence for people.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The category of a pending reason, stable for scripts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PendingKind {
    /// Not yet looked at by the scheduler.
    Queued,
    /// No node has the free resources now.
    Resources,
    /// A job ahead of it in the queue is blocked and the policy keeps order.
    Priority,
    /// The queue has no ready node.
    NoNodes,
    /// The queue the job names does not exist.
    Queue,
    /// The job could start now but would delay the reserved start of a job ahead (EASY
    /// backfill).
    Backfill,
    /// Running lower-priority jobs are being stopped to make room for this one.
    Preempting,
    /// Starting it would exceed its user's or project's quota.
    Quota,
    /// No ready node of the queue has the job's container image (or a running Docker daemon).
    Image,
    /// No ready node of the queue allows the job's host mounts (`berth agent --allow-mount`),
    /// or, for a process job with data folders, can mount them (a root agent).
    Mount,
    /// It waits for other jobs (`--dependency`).
    Dependency,
    /// Its dependency can never be met and the manager keeps such jobs (`kill_invalid_depend =
    /// false`): it waits until someone cancels it.
    DependencyNeverSatisfied,
    /// Its begin time (`--begin`) has not come yet.
    BeginTime,
    /// A job array: its tasks are made as jobs of their own, up to its throttle; the message
    /// says how many.
    ArrayTasks,
    /// Held by its owner (`berth hold`, `scontrol uhold`, `sbatch --hold`) until released.
    HeldUser,
    /// Held by an admin (`scontrol hold` as an admin) until an admin releases it.
    HeldAdmin,
}

/// Who holds a pending job back from the scheduler (Slurm's user and admin holds): it stays
/// PENDING, takes no place in its queue, and runs only once released.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema, strum::EnumString, strum::Display,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Hold {
    /// Its owner's (or an admin's user hold): its owner or an admin may release it.
    User,
    /// An admin's: only an admin may release it.
    Admin,
}

impl Hold {
    /// The pending reason a job held so shows.
    pub fn reason(self) -> PendingReason {
        match self {
            Hold::User => PendingReason::new(PendingKind::HeldUser, "held by its user: release it to let it run"),
            Hold::Admin => PendingReason::new(PendingKind::HeldAdmin, "held by an admin: only an admin can release it"),
        }
    }
}

/// Why a job is still pending, e.g. `resources: needs 1 GPU, node n1 has 0.5 free`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PendingReason {
    pub kind: PendingKind,
    pub message: String,
}

impl PendingReason {
    pub fn new(kind: PendingKind, message: impl Into<String>) -> Self {
        Self { kind, message: message.into() }
    }
}

impl std::fmt::Display for PendingReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}
