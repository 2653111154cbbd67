//! Quotas (docs/tenancy.md): what one user or one project may hold at once and have waiting.
//! Every limit is optional; a missing one does not limit.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The limits of one user or project.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct QuotaLimits {
    /// GPUs held by running jobs, in thousandths.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_milli: Option<u64>,
    /// CPUs held by running jobs, in millicores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_milli: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_bytes: Option<u64>,
    /// Jobs holding resources at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running_jobs: Option<u32>,
    /// Jobs waiting at once; a submit beyond it is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_jobs: Option<u32>,
    /// The highest priority a job may ask for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority: Option<i32>,
    /// Borrowing: how many GPUs (thousandths) beyond `gpu_milli` the jobs may hold while that
    /// capacity is idle. Borrowed work is preempted first: a job within its own quota stops it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_gpu_milli: Option<u64>,
    /// Borrowing beyond `cpu_milli`, like `borrow_gpu_milli`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub borrow_cpu_milli: Option<u64>,
}

impl QuotaLimits {
    pub fn is_empty(&self) -> bool {
        *self == QuotaLimits::default()
    }

    /// Whether any limit bounds what running jobs hold (checked by the scheduler).
    pub fn limits_running(&self) -> bool {
        self.gpu_milli.is_some() || self.cpu_milli.is_some() || self.mem_bytes.is_some() || self.running_jobs.is_some()
    }
}

/// Whose quota.
#[derive(
    Debug,
    Clone,
    Copy,
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
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum QuotaKind {
    User,
    Project,
}

impl QuotaKind {
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

impl std::str::FromStr for QuotaKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        crate::names::parse(s).ok_or_else(|| format!("unknown quota kind `{s}`: use `user` or `project`"))
    }
}

/// A quota as the API shows it, with what is in use now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QuotaView {
    pub kind: QuotaKind,
    pub name: String,
    pub limits: QuotaLimits,
    pub used_gpu_milli: u64,
    pub used_cpu_milli: u64,
    pub used_mem_bytes: u64,
    pub running_jobs: u32,
    pub pending_jobs: u32,
}
