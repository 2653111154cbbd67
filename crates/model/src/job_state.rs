//! The states a job moves through (ARCHITECTURE.md) and which moves are allowed.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The states of ARCHITECTURE.md.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    ToSchema,
    strum::IntoStaticStr,
    strum::VariantArray,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Where every job starts (and what a partial job listing without `state` reads as).
    #[default]
    Pending,
    Scheduled,
    Preparing,
    Running,
    Terminating,
    Succeeded,
    Failed,
    Cancelled,
    Timeout,
    Lost,
}

impl JobState {
    /// Every state, in declaration order.
    pub const ALL: [JobState; 10] = match <JobState as strum::VariantArray>::VARIANTS.first_chunk() {
        Some(all) => *all,
        None => panic!("JobState has 10 variants"),
    };

    /// A final state: the job will never change again.
    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled | JobState::Timeout | JobState::Lost
        )
    }

    /// A state in which the job holds devices on a node.
    pub fn holds_resources(self) -> bool {
        matches!(self, JobState::Scheduled | JobState::Preparing | JobState::Running | JobState::Terminating)
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether the lifecycle allows `self → to`.
    pub fn can_become(self, to: JobState) -> bool {
        use JobState::*;
        if self.is_terminal() {
            return false;
        }
        match (self, to) {
            (Pending, Scheduled | Cancelled) => true,
            (Scheduled, Preparing | Running | Pending | Terminating) => true,
            (Preparing, Running | Pending | Terminating) => true,
            // Back to the queue when the node is lost and the job asked for `requeue`.
            (Running | Terminating, Pending) => true,
            (Running, Terminating) => true,
            // A job array ends from PENDING (it never runs itself) with its tasks' outcome.
            (Pending, Succeeded | Failed) => true,
            (_, Succeeded | Failed | Timeout | Lost | Cancelled) => self != Pending || to == Cancelled,
            _ => false,
        }
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for JobState {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        crate::names::parse_any_case(s).ok_or_else(|| format!("unknown job state `{s}`"))
    }
}
