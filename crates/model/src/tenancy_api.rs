//! REST bodies of tenancy (docs/tenancy.md): users, projects, API tokens, the audit log.
//! Re-exported by the `api` module, their public path.

use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

/// A user as admins list them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct UserView {
    pub name: String,
    pub role: String,
    pub disabled: bool,
    pub created_at: jiff::Timestamp,
    pub projects: Vec<String>,
}

/// `POST /v1/admin/projects`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreateProjectRequest {
    pub name: String,
}

/// `POST /v1/admin/projects/{name}/members`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct MemberRequest {
    pub user: String,
}

/// A project with its members.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct ProjectView {
    pub name: String,
    pub created_at: jiff::Timestamp,
    pub members: Vec<String>,
}

/// `POST /v1/tokens`: a new API token for the caller.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CreateTokenRequest {
    /// What the token is for (`laptop`, `ci`); shown in `berth token list`.
    #[serde(default)]
    pub label: Option<String>,
    /// Lifetime, e.g. `30d`, `12h`; none: until revoked.
    #[serde(default)]
    pub expires_in: Option<String>,
}

/// The new token: shown once, only its hash is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenCreated {
    pub id: String,
    pub token: String,
    pub expires_at: Option<jiff::Timestamp>,
}

/// A token as `berth token list` shows it (never the secret).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TokenView {
    /// The first 12 hex digits of the token's hash: what `berth token revoke` takes.
    pub id: String,
    pub user: String,
    pub label: String,
    pub created_at: jiff::Timestamp,
    pub expires_at: Option<jiff::Timestamp>,
    pub revoked_at: Option<jiff::Timestamp>,
    /// Updated at most once a minute.
    pub last_used_at: Option<jiff::Timestamp>,
    /// Whether this is the token of the request listing it.
    pub current: bool,
}

/// `GET /v1/tokens`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
pub struct TokenListQuery {
    /// Admins only: every user's tokens.
    #[serde(default)]
    pub all: bool,
}

/// One audit log entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct AuditView {
    pub id: i64,
    pub at: jiff::Timestamp,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub detail: String,
}

/// `GET /v1/admin/audit`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
pub struct AuditQuery {
    /// Only entries newer than this long ago (`7d`, `12h`).
    #[serde(default)]
    pub since: Option<String>,
    /// At most this many (default 100, at most 10,000).
    #[serde(default)]
    #[param(minimum = 1, maximum = 10000)]
    pub limit: Option<u32>,
}

/// `GET /v1/usage`: who to group by and from when.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
pub struct UsageQuery {
    /// `user` (default) or `project`.
    #[serde(default)]
    pub by: Option<String>,
    /// How far back, e.g. `7d` (default `30d`).
    #[serde(default)]
    pub since: Option<String>,
}

/// `GET /v1/usage/timeline`: usage per period, for charts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, IntoParams)]
pub struct TimelineQuery {
    /// `user` (default) or `project`.
    #[serde(default)]
    pub by: Option<String>,
    /// How far back, e.g. `7d` (default `7d`).
    #[serde(default)]
    pub since: Option<String>,
    /// The length of one period, e.g. `1h` (default: a 48th of `since`, at least a minute).
    /// At most 1,000 periods.
    #[serde(default)]
    pub step: Option<String>,
}

/// Usage per period: each user's or project's GPU- and CPU-hours, and the whole cluster's
/// beside its capacity (so a chart can show utilisation).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageTimeline {
    /// When the first period starts.
    pub start: jiff::Timestamp,
    pub step_secs: u64,
    /// Per period, in order.
    pub periods: Vec<UsagePeriod>,
    /// GPUs and CPUs of the nodes known now (utilisation is used ÷ capacity × period).
    pub gpus_total: f64,
    pub cpus_total: f64,
}

/// One period of a [`UsageTimeline`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsagePeriod {
    pub start: jiff::Timestamp,
    /// The whole cluster's allocated GPU- and CPU-hours in the period (admins: every job;
    /// others: only what `by` lets them see, so this is their own share).
    pub gpu_hours: f64,
    pub cpu_hours: f64,
    /// Per user or project with any use in the period.
    pub by: std::collections::BTreeMap<String, UsageHours>,
}

/// GPU- and CPU-hours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageHours {
    pub gpu_hours: f64,
    pub cpu_hours: f64,
}

/// One line of `berth usage` (like `sreport cluster AccountUtilizationByUser`): what one user or
/// project used in the period. Resources count what jobs asked for, over the part of their
/// run inside the period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct UsageLine {
    pub name: String,
    /// Jobs submitted, running or ended in the period.
    pub jobs: u32,
    pub succeeded: u32,
    pub failed: u32,
    pub cancelled: u32,
    pub timeout: u32,
    pub lost: u32,
    /// Not finished yet (pending or running).
    pub unfinished: u32,
    /// Hours allocated: GPUs and CPUs given, times how long they were held.
    pub gpu_hours: f64,
    pub cpu_hours: f64,
    /// Hours used, as the nodes measured them (GPU busy time, CPU time), for the jobs that
    /// were measured; none when no job of the line was. A job's use counts in the period in
    /// proportion to the share of its run inside it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_hours_used: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_hours_used: Option<f64>,
    /// Mean time from submit to start of the jobs that started, in seconds.
    pub mean_wait_secs: Option<f64>,
}
