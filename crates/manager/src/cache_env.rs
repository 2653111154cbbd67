//! What a kernel learns about the dataset cache (DESIGN.md §10): `BERTH_CACHE_URL`, a cache
//! node to talk to, and `BERTH_CACHE_TOKEN`, a token scoped to the job (its project, expiring
//! with its time limit). Tokens are minted by a function the daemon hands in (it holds the
//! cache nodes' key), so the manager does not depend on the cache crate.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::state::Job;

/// Mints a token: `(subject, projects, expiry in Unix seconds) → token`.
pub type MintToken = Arc<dyn Fn(&str, &[String], i64) -> String + Send + Sync>;

/// How long a job's token lives when the job has no time limit; a token outliving a job is
/// harmless beyond its bucket access, which the job's project had anyway.
const DEFAULT_TOKEN_SECS: u64 = 7 * 24 * 3600;
/// Slack past the time limit (a job may run a little longer while it is stopped).
const SLACK_SECS: u64 = 3600;

/// The cache the manager's jobs use.
#[derive(Clone)]
pub struct CacheEnv {
    /// A cache node's base URL, e.g. `http://127.0.0.1:7171`.
    pub url: String,
    pub mint: MintToken,
}

impl std::fmt::Debug for CacheEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheEnv").field("url", &self.url).finish_non_exhaustive()
    }
}

impl CacheEnv {
    /// Adds the cache variables for `job` to a kernel's environment.
    pub fn add_to(&self, env: &mut BTreeMap<String, String>, job: &Job) {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let ttl = job.spec.time_limit_secs.map(|t| t + SLACK_SECS).unwrap_or(DEFAULT_TOKEN_SECS);
        let token = (self.mint)(&format!("job-{}", job.id), &[job.project().to_string()], (now + ttl) as i64);
        env.insert("BERTH_CACHE_URL".into(), self.url.clone());
        env.insert("BERTH_CACHE_TOKEN".into(), token);
    }
}
