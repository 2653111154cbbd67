//! The dataset cache's member list, kept by the manager (DESIGN.md §10). An agent started
//! with `--cache-url` (or `berth up`'s agent, with its in-process cache) reports the cache
//! node on its machine when it registers; the manager keeps those URLs (in the store, so a
//! restart keeps the set) and the buckets' settings, and pushes both to every cache node
//! (`PUT /v1/members` with an admin token it mints) whenever they change, and again every
//! [`RECONCILE`] so that a restarted cache node gets them back.
//!
//! A member is `down` while its node is lost (no heartbeat within the timeout, or not back
//! after a manager restart once the timeout has passed); the cache nodes then hand its slots
//! to the others, so its keys read as misses, never as errors. A drained node stays `up`: its
//! cache still serves, only new jobs stay off it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_model::api::{CacheBucket, CacheMemberView};
use berth_store::{CacheBucketRow, Store, StoreError};
use serde_json::json;

use crate::cache_env::unix_now;
use crate::manager::Manager;
use crate::state::State;

/// How often every cache node is sent the list again, changed or not.
pub const RECONCILE: Duration = Duration::from_secs(10);

/// What the manager knows about the cache nodes and buckets.
#[derive(Debug, Default)]
pub struct CacheMembers {
    /// node → its cache URL, as its agent last reported it.
    urls: Mutex<BTreeMap<String, String>>,
    buckets: Mutex<BTreeMap<String, CacheBucket>>,
    /// Wakes the pusher: a member registered or was lost, a bucket changed.
    pub changed: tokio::sync::Notify,
}

/// Whether a node's cache counts as up: its agent is registered, or it was before a manager
/// restart and the heartbeat timeout has not yet passed since.
fn is_up(st: &State, node: &str) -> bool {
    st.nodes.get(node).is_some_and(|n| n.ready || n.orphan_deadline.is_some())
}

impl CacheMembers {
    /// Loads the nodes' cache URLs and the buckets from the store (at start).
    pub async fn load(&self, store: &dyn Store) -> Result<(), StoreError> {
        let nodes = store.cache_nodes().await?;
        *self.urls.lock().expect("cache urls") = nodes.into_iter().map(|r| (r.node, r.url)).collect();
        let buckets = store.cache_buckets().await?;
        *self.buckets.lock().expect("cache buckets") = buckets
            .into_iter()
            .map(|b| {
                (b.name.clone(), CacheBucket { name: b.name, public: b.public, quota: b.quota, projects: b.projects })
            })
            .collect();
        Ok(())
    }

    /// Records the cache URL an agent reported at registration (`None`: keeps what was known,
    /// an agent restarted without `--cache-url` does not drop its node's cache from the list).
    pub async fn reported(&self, store: &dyn Store, node: &str, url: Option<&str>) -> Result<(), StoreError> {
        let Some(url) = url.map(|u| u.trim_end_matches('/')) else { return Ok(()) };
        if !url.starts_with("http://") && !url.starts_with("https://") {
            // one bad name would make every cache node refuse the whole list
            tracing::warn!(node, url, "ignoring a cache URL that is not http:// or https://");
            return Ok(());
        }
        if self.urls.lock().expect("cache urls").get(node).map(String::as_str) == Some(url) {
            return Ok(());
        }
        store.put_cache_node(node, url, jiff::Timestamp::now()).await?;
        self.urls.lock().expect("cache urls").insert(node.to_string(), url.to_string());
        Ok(())
    }

    /// Every node's cache with its state, by node name.
    pub fn views(&self, st: &State) -> Vec<CacheMemberView> {
        let urls = self.urls.lock().expect("cache urls");
        urls.iter()
            .map(|(node, url)| CacheMemberView {
                node: node.clone(),
                url: url.clone(),
                state: if is_up(st, node) { "up" } else { "down" }.to_string(),
            })
            .collect()
    }

    /// The cache node a kernel of job `job_id` on `node` should use: its node's own when up,
    /// else one of the up members (spread by job), else `None`.
    pub fn url_for(&self, st: &State, node: &str, job_id: i64) -> Option<String> {
        let urls = self.urls.lock().expect("cache urls");
        if let Some(u) = urls.get(node).filter(|_| is_up(st, node)) {
            return Some(u.clone());
        }
        let up: Vec<&String> = urls.iter().filter(|(n, _)| is_up(st, n)).map(|(_, u)| u).collect();
        (!up.is_empty()).then(|| up[job_id.unsigned_abs() as usize % up.len()].clone())
    }

    pub fn buckets(&self) -> Vec<CacheBucket> {
        self.buckets.lock().expect("cache buckets").values().cloned().collect()
    }

    /// Creates or replaces a bucket (stored first), then wakes the pusher.
    pub async fn put_bucket(&self, store: &dyn Store, b: CacheBucket) -> Result<(), StoreError> {
        let row = CacheBucketRow {
            name: b.name.clone(),
            public: b.public,
            quota: b.quota,
            projects: b.projects.clone(),
            updated_at: jiff::Timestamp::now(),
        };
        store.put_cache_bucket(&row).await?;
        self.buckets.lock().expect("cache buckets").insert(b.name.clone(), b);
        self.changed.notify_one();
        Ok(())
    }

    /// The URLs to push to and the body: the members (a URL reported by several nodes is up
    /// when any of them is) and every bucket.
    fn desired(&self, st: &State) -> (Vec<String>, Vec<u8>) {
        let mut members: BTreeMap<String, bool> = BTreeMap::new();
        for v in self.views(st) {
            *members.entry(v.url).or_default() |= v.state == "up";
        }
        let list: Vec<_> = members
            .iter()
            .map(|(url, up)| json!({"name": url, "weight": 1, "state": if *up { "up" } else { "down" }}))
            .collect();
        let body = json!({"members": list, "buckets": self.buckets()});
        (members.into_keys().collect(), serde_json::to_vec(&body).expect("json"))
    }
}

/// Pushes the member list and buckets to every cache node when they change and every
/// [`RECONCILE`]. Runs only when the daemon handed in a [`crate::cache_env::CacheEnv`].
pub async fn run(m: Arc<Manager>) {
    let Some(env) = m.cache.get().cloned() else { return };
    let mut shutdown = m.shutdown.clone();
    let mut last: Option<Vec<u8>> = None;
    let mut failing: BTreeMap<String, String> = BTreeMap::new();
    loop {
        let changed = tokio::select! {
            _ = tokio::time::sleep(RECONCILE) => false,
            _ = m.cache_members.changed.notified() => true,
            _ = shutdown.changed() => break,
        };
        let (urls, body) = {
            let st = m.lock_state().await;
            m.cache_members.desired(&st)
        };
        if urls.is_empty() || (changed && last.as_ref() == Some(&body)) {
            continue;
        }
        let token = (env.mint_admin)((unix_now() + 3600) as i64);
        let pushes = urls.iter().map(|u| (env.push)(u.clone(), token.clone(), body.clone()));
        let results = futures_util::future::join_all(pushes).await;
        for (url, r) in urls.iter().zip(results) {
            match r {
                // said once per failure, not every reconcile
                Err(e) if failing.get(url) != Some(&e) => {
                    tracing::warn!(cache = %url, "cannot send the cache member list: {e}");
                    failing.insert(url.clone(), e);
                }
                Err(_) => {}
                Ok(()) => {
                    if failing.remove(url).is_some() {
                        tracing::info!(cache = %url, "cache node has the member list again");
                    }
                }
            }
        }
        last = Some(body);
    }
}
