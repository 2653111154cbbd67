//! Who sees which of `/metrics`' series.
//!
//! The cluster's series (queues, states, nodes, API routes) are for anyone who can reach the
//! port, as Prometheus scrapers expect. The series that name tenants' objects (serving
//! endpoints) are not: their names would tell a stranger which private endpoints exist, which
//! the serving router hides (an unknown endpoint and a private one answer alike). Those series
//! go to admins' API tokens, to the scrape token of `--metrics-token-file`, or to everyone when
//! the admin chose `--public-metrics`.

use crate::error::ApiError;
use crate::manager::Manager;

/// The manager's `/metrics` settings (`--public-metrics`, `--metrics-token-file`).
#[derive(Debug, Clone, Default)]
pub struct MetricsAccess {
    /// Anyone sees every series, tenants' included.
    pub public: bool,
    /// The sha256 (hex) of the scrape token, which sees every series.
    pub token_hash: Option<String>,
}

impl MetricsAccess {
    /// The settings for a scrape token read from a file (`--metrics-token-file`).
    pub fn with_token(mut self, token: &str) -> MetricsAccess {
        self.token_hash = Some(crate::token::hash_token(token));
        self
    }
}

/// What a scrape may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// The cluster's series only: no endpoint or other tenant's name.
    Cluster,
    /// Every series.
    All,
}

/// The view of a request with `bearer` (its token, if any). No token: the cluster's view.
/// A token that is neither the scrape token nor a valid API token is refused (401), and a
/// user's that is not an admin's (403), so that a misconfigured scraper shows as failing
/// instead of silently losing series.
pub async fn view(m: &Manager, bearer: Option<&str>) -> Result<View, ApiError> {
    let access = &m.metrics_access;
    if access.public {
        return Ok(View::All);
    }
    let Some(token) = bearer else { return Ok(View::Cluster) };
    if let Some(want) = &access.token_hash {
        let got = crate::token::hash_token(token);
        if crate::token::ct_eq(got.as_bytes(), want.as_bytes()) {
            return Ok(View::All);
        }
    }
    let user = m.tenancy.authenticate(token).await?;
    if user.is_admin() {
        Ok(View::All)
    } else {
        Err(ApiError::forbidden(format!(
            "only admins and the scrape token (--metrics-token-file) see every metric; {} is a {}: \
             scrape without a token for the cluster's series",
            user.name, user.role
        )))
    }
}
