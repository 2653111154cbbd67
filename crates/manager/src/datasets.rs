//! Datasets of jobs (`datasets = ["BUCKET/PREFIX"]`, docs/datasets.md): checked at submit
//! against the cache buckets the manager keeps (the bucket exists, has an origin, and the
//! job's project may use it), and resolved to their origins for the agent's prefetch.

use berth_model::JobSpec;
use berth_model::api::CacheBucket;
use berth_model::dataset::DatasetFetch;

use crate::error::ApiError;
use crate::manager::Manager;

/// Whether a job of `project` may read `bucket` through the cache.
fn may_use(bucket: &CacheBucket, project: Option<&str>) -> bool {
    bucket.public || project.is_some_and(|p| bucket.projects.iter().any(|b| b == p))
}

/// Checks a submitted job's datasets: a 400 that says what to fix for the first bad one.
pub fn check(m: &Manager, spec: &JobSpec) -> Result<(), ApiError> {
    if spec.datasets.is_empty() {
        return Ok(());
    }
    if m.cache.get().is_none() {
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

/// The job's datasets with their buckets' current origins (a bucket deleted or stripped of
/// its origin since the submit is left out: the job reads from wherever it would anyway).
pub fn fetches(m: &Manager, spec: &JobSpec) -> Vec<DatasetFetch> {
    spec.datasets
        .iter()
        .filter_map(|d| {
            let origin = m.cache_members.bucket(&d.bucket)?.origin?;
            Some(DatasetFetch { dataset: d.clone(), origin })
        })
        .collect()
}
