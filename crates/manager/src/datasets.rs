//! Datasets of jobs (`datasets = ["BUCKET/PREFIX"]`, docs/datasets.md): checked at submit
//! against the cache buckets the manager keeps (the bucket exists, has an origin, and the
//! job's project may use it), resolved to their origins for the agent's prefetch, and
//! measured for cache-aware placement: how many bytes of a job's datasets each up cache node
//! holds (`GET /v1/buckets/{b}/usage` on each), at submit and every [`REFRESH`] while the job
//! waits. Only `node`-placement buckets count: a `spread` bucket's keys are spread over all
//! nodes by hash, so no node is nearer to them than another.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use berth_model::JobSpec;
use berth_model::api::{BucketPlacement, CacheBucket};
use berth_model::dataset::DatasetFetch;

use futures_util::StreamExt;

use crate::cache_env::{CacheEnv, unix_now};
use crate::error::ApiError;
use crate::manager::Manager;

/// How often the holdings of waiting jobs' datasets are measured again.
pub const REFRESH: Duration = Duration::from_secs(10);

/// Whether a job of `project` may read `bucket` through the cache.
fn may_use(bucket: &CacheBucket, project: Option<&str>) -> bool {
    bucket.public || project.is_some_and(|p| bucket.projects.iter().any(|b| b == p))
}

/// Checks a submitted job's datasets: a 400 that says what to fix for the first bad one.
pub fn check(m: &Manager, spec: &JobSpec) -> Result<(), ApiError> {
    if spec.datasets.is_empty() {
        return Ok(());
    }
    if m.cache.as_ref().is_none() {
        return Err(ApiError::bad_request(
            "this cluster has no dataset cache, so datasets cannot be prefetched: drop --dataset, or start the \
             manager with a cache (berth up without --no-cache, berth manager --cache-key-file)",
        ));
    }
    for d in &spec.datasets {
        let Some(b) = m.cache_members.bucket(&d.bucket) else {
            return Err(ApiError::bad_request(format!(
                "dataset `{d}`: there is no cache bucket `{}` (see berth cache bucket list)",
                d.bucket
            )));
        };
        if b.origin.is_none() {
            return Err(ApiError::bad_request(format!(
                "dataset `{d}`: bucket `{}` has no origin to prefetch from: an admin sets one with \
                 `berth cache bucket create {} --origin DIR`",
                d.bucket, d.bucket
            )));
        }
        if !may_use(&b, spec.project.as_deref()) {
            return Err(ApiError::bad_request(format!(
                "dataset `{d}`: bucket `{}` is private to projects {}: submit with --project set to one of them",
                d.bucket,
                if b.projects.is_empty() { "(none)".to_string() } else { b.projects.join(", ") }
            )));
        }
    }
    Ok(())
}

/// How long a prefetch token lives: long enough for a big copy, short enough that a token
/// seen on the wire is soon worthless.
const PREFETCH_TOKEN_SECS: u64 = 24 * 3600;

/// The job's datasets with their buckets' current origins and a token to fill each bucket:
/// one naming the bucket's projects, or an admin token for a bucket without projects (only
/// admins write to those). A bucket deleted or stripped of its origin since the submit is
/// left out: the job reads from wherever it would anyway.
pub fn fetches(m: &Manager, job_id: i64, spec: &JobSpec) -> Vec<DatasetFetch> {
    let Some(env) = m.cache.as_ref() else { return Vec::new() };
    let exp = (unix_now() + PREFETCH_TOKEN_SECS) as i64;
    spec.datasets
        .iter()
        .filter_map(|d| {
            let b = m.cache_members.bucket(&d.bucket)?;
            let origin = b.origin?;
            let token = if b.projects.is_empty() {
                (env.mint_admin)(exp)
            } else {
                (env.mint)(&format!("prefetch-job-{job_id}"), &b.projects, exp)
            };
            Some(DatasetFetch { dataset: d.clone(), origin, token })
        })
        .collect()
}

/// The (bucket, key prefix) pairs of a job's datasets in `node`-placement buckets.
fn local_prefixes(m: &Manager, spec: &JobSpec) -> Vec<(String, Vec<u8>)> {
    spec.datasets
        .iter()
        .filter_map(|d| {
            let b = m.cache_members.bucket(&d.bucket)?;
            let origin = b.origin.as_deref()?;
            (b.placement == BucketPlacement::Node).then(|| (d.bucket.clone(), d.key_prefix(origin)))
        })
        .collect()
}

/// Cache nodes asked at once for one dataset (a thousand-node site must not open a thousand
/// connections per submit).
const ASKS_AT_ONCE: usize = 64;

/// What each of `nodes` holds of `bucket`'s keys under `prefix` (0 for a node that does not
/// answer), asking at most [`ASKS_AT_ONCE`] at a time.
async fn measure(env: &CacheEnv, nodes: &[(String, String)], bucket: &str, prefix: &[u8]) -> Vec<(String, u64)> {
    let token = (env.mint_admin)((unix_now() + 600) as i64);
    let asks: Vec<_> = nodes
        .iter()
        .map(|(node, url)| {
            let ask = (env.usage)(url.clone(), token.clone(), bucket.to_string(), prefix.to_vec());
            let node = node.clone();
            async move {
                match ask.await {
                    Ok(u) => (node, u.bytes),
                    Err(e) => {
                        tracing::debug!(node, "cannot measure a dataset in its cache: {e}");
                        (node, 0)
                    }
                }
            }
        })
        .collect();
    futures_util::stream::iter(asks).buffer_unordered(ASKS_AT_ONCE).collect().await
}

/// Bytes of `spec`'s datasets each up cache node holds, every up node listed (0 when it
/// holds none or does not answer); empty for a job without datasets in `node` buckets.
pub async fn holdings(m: &Manager, spec: &JobSpec) -> Vec<(String, u64)> {
    let prefixes = local_prefixes(m, spec);
    let Some(env) = m.cache.as_ref() else { return Vec::new() };
    if prefixes.is_empty() {
        return Vec::new();
    }
    let nodes = {
        let st = m.jobs.lock().await;
        m.cache_members.up_nodes(&st)
    };
    let mut out: BTreeMap<String, u64> = nodes.iter().map(|(n, _)| (n.clone(), 0)).collect();
    for key in prefixes {
        let held = match m.dataset_holdings.fresh(&key) {
            Some(v) => v,
            None => {
                let v = Arc::new(measure(env, &nodes, &key.0, &key.1).await);
                m.dataset_holdings.remember(key, v.clone());
                v
            }
        };
        for (node, bytes) in held.iter() {
            if let Some(b) = out.get_mut(node) {
                *b += bytes;
            }
        }
    }
    out.into_iter().collect()
}

/// Measures again, every [`REFRESH`], what the caches hold of each waiting job's datasets
/// (a prefetch for another job, an eviction), for the next passes.
pub async fn run(m: Arc<Manager>) {
    if m.cache.as_ref().is_none() {
        return;
    }
    let mut shutdown = m.shutdown.clone();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(REFRESH) => {}
            _ = shutdown.changed() => break,
        }
        let waiting: Vec<(i64, Arc<JobSpec>)> = {
            let st = m.jobs.lock().await;
            st.pending()
                .iter()
                .filter_map(|p| st.job(p.id))
                .filter(|j| !j.spec.datasets.is_empty())
                .map(|j| (j.id, j.spec.clone()))
                .collect()
        };
        for (id, spec) in waiting {
            let data_on = holdings(&m, &spec).await;
            let mut st = m.jobs.lock().await;
            st.set_data_on(id, data_on);
        }
    }
}
