//! What a kernel learns about the dataset cache (docs/cache.md): `BERTH_CACHE_URL`, a cache
//! node to talk to (the one on the kernel's node when it has one, see `cache_members`), and
//! `BERTH_CACHE_TOKEN`, a token scoped to the job (its project, expiring with its time limit).
//! Tokens are minted, and member lists pushed to cache nodes, by functions the daemon hands
//! in (it holds the cache nodes' key and an HTTP client), so the manager depends neither on
//! the cache crate nor on an HTTP client.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use berth_model::api::CachePrefixUsage;

use crate::state::Job;

/// Mints a token: `(subject, projects, expiry in Unix seconds) → token`.
pub type MintToken = Arc<dyn Fn(&str, &[String], i64) -> String + Send + Sync>;

/// Mints an admin token expiring at the given Unix second (to push members and buckets).
pub type MintAdmin = Arc<dyn Fn(i64) -> String + Send + Sync>;

/// Why a cache node gave no answer to a push or a question, in the words of the daemon's
/// HTTP client (unreachable, an error status, an unreadable answer), which the manager does
/// not link: it only logs them, and compares them to say a failure once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct CacheCallError(pub String);

/// Sends `PUT /v1/members` to a cache node: `(base URL, admin token, JSON body) → Ok or why
/// not`. The daemon's client verifies `https://` nodes with berth's trust rules.
pub type PushMembers = Arc<
    dyn Fn(String, String, Vec<u8>) -> Pin<Box<dyn Future<Output = Result<(), CacheCallError>> + Send>> + Send + Sync,
>;

/// Asks a cache node what it holds of a bucket's keys under a prefix (`GET
/// /v1/buckets/{bucket}/usage`): `(base URL, admin token, bucket, key prefix) → usage or why
/// not`.
pub type PrefixUsage = Arc<
    dyn Fn(
            String,
            String,
            String,
            Vec<u8>,
        ) -> Pin<Box<dyn Future<Output = Result<CachePrefixUsage, CacheCallError>> + Send>>
        + Send
        + Sync,
>;

/// How long a job's token lives when the job has no time limit; a token outliving a job is
/// harmless beyond its bucket access, which the job's project had anyway.
const DEFAULT_TOKEN_SECS: u64 = 7 * 24 * 3600;
/// Slack past the time limit (a job may run a little longer while it is stopped).
const SLACK_SECS: u64 = 3600;

/// The cache the manager's jobs use.
#[derive(Clone)]
pub struct CacheEnv {
    /// A cache node's base URL for jobs on nodes without an up cache node of their own
    /// (`berth manager --cache-url`, `berth up`'s cache); `None`: only the nodes' caches.
    pub url: Option<String>,
    pub mint: MintToken,
    pub mint_admin: MintAdmin,
    pub push: PushMembers,
    pub usage: PrefixUsage,
}

impl std::fmt::Debug for CacheEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheEnv").field("url", &self.url).finish_non_exhaustive()
    }
}

pub(crate) fn unix_now() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0)
}

impl CacheEnv {
    /// Adds the cache variables for `job` to a kernel's environment, with `url` the cache node
    /// chosen for the kernel.
    pub fn add_to(&self, env: &mut BTreeMap<String, String>, job: &Job, url: &str) {
        let ttl = job.spec.time_limit_secs.map(|t| t + SLACK_SECS).unwrap_or(DEFAULT_TOKEN_SECS);
        let token = (self.mint)(
            &format!("job-{}", job.id),
            &job.spec.project.iter().cloned().collect::<Vec<_>>(),
            (unix_now() + ttl) as i64,
        );
        env.insert("BERTH_CACHE_URL".into(), url.to_string());
        env.insert("BERTH_CACHE_TOKEN".into(), token);
    }
}
