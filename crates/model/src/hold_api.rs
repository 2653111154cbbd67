//! `POST /v1/jobs/{id}/hold` and `/release` (`berth hold`/`release`, Slurm's `scontrol
//! hold/uhold/release`, `sbatch --hold`): a pending job kept out of the scheduler until
//! released. Re-exported by `api`.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::{Hold, JobId};

/// `POST /v1/jobs/{id}/hold` body.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HoldRequest {
    /// `user` (the default for users, Slurm's `uhold`) or `admin` (the default for admins,
    /// Slurm's `hold`; only admins may ask it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<Hold>,
}

/// `POST /v1/jobs/{id}/hold` and `/release` answer: the jobs whose hold changed (the job,
/// or a job array and its pending tasks) and the hold they have now (none once released).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct HoldResult {
    pub id: JobId,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold: Option<Hold>,
    /// Every job changed: `id` and, for a job array, its pending tasks.
    pub jobs: Vec<JobId>,
}
