//! The dataset cache's member list, kept by the manager (docs/cache.md). An agent started
//! with `--cache-url` (or `berth up`'s agent, with its in-process cache) reports the cache
//! node on its machine when it registers; the manager keeps those URLs (in the store, so a
//! restart keeps the set) and the buckets' settings, and pushes both to every cache node
//! (`PUT /v1/members` with an admin token it mints, `cache_push.rs`) whenever they change,
//! and again every [`RECONCILE`] so that a restarted cache node gets them back.
//!
//! A member is `down` while its node is lost (no heartbeat within the timeout, or not back
//! after a manager restart once the timeout has passed); the cache nodes then hand its slots
//! to the others, so its keys read as misses, never as errors. A drained node stays `up`: its
//! cache still serves, only new jobs stay off it.
//!
//! Admins weigh members (`berth cache member set NODE --weight W`, over the agent's
//! `--cache-weight`) and remove them for good (`berth cache member remove`: its agent
//! reporting the cache again does not bring it back, `berth cache member add` does; it stays
//! in the pushed list as `removed`, so that only its own keys move). Each
//! member is pushed with its join sequence number `seq` (given by the store when its URL is
//! first seen; kept when it is added back), which the cache nodes order the members by, and
//! the list is sent in that order. Deleted buckets are pushed by name (`deleted_buckets`,
//! tombstones in the store until a bucket of that name is created again): a cache node
//! deletes those, objects and all, and nothing else, so a manager that merely does not know
//! a bucket (a fresh database, a bucket made on a node alone) never deletes data.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Mutex;
use std::time::Duration;

use berth_model::api::{CacheBucket, CacheMemberView, MAX_CACHE_WEIGHT, cache_weight_error};
use berth_store::{CacheBucketRow, CacheNodeRow, Store, StoreError};
use serde_json::json;

use crate::clock::Clock;
use crate::jobs::Jobs;
use crate::state::State;

/// How often every cache node is sent the list again, changed or not.
pub const RECONCILE: Duration = Duration::from_secs(10);

/// What the manager knows about the cache nodes and buckets.
#[derive(Debug, Default)]
pub struct CacheMembers {
    /// node → its cache, as the store has it (URL and weight its agent last reported, the
    /// admin's weight and removal, its seq).
    nodes: Mutex<BTreeMap<String, CacheNodeRow>>,
    buckets: Mutex<BTreeMap<String, CacheBucket>>,
    /// Buckets deleted (and not created again): the cache nodes are told to delete them.
    deleted: Mutex<BTreeSet<String>>,
    /// Removed members whose agents reported their cache again, warned about once.
    warned: Mutex<BTreeSet<String>>,
    /// Wakes the pusher: a member registered, was lost or was changed by an admin, a bucket
    /// changed.
    pub changed: tokio::sync::Notify,
    /// The manager's clock (when a member's or bucket's row changed).
    clock: Clock,
}

/// Whether a node's cache counts as up: its agent is registered, or it was before a manager
/// restart and the heartbeat timeout has not yet passed since.
fn is_up(st: &State, node: &str) -> bool {
    st.node(node).is_some_and(|n| n.ready || n.orphan_deadline.is_some())
}

fn view(st: &State, r: &CacheNodeRow) -> CacheMemberView {
    let state = if r.removed {
        "removed"
    } else if is_up(st, &r.node) {
        "up"
    } else {
        "down"
    };
    CacheMemberView {
        node: r.node.clone(),
        url: r.url.clone(),
        state: state.to_string(),
        weight: r.effective_weight(),
        weight_set: r.weight.is_some(),
        seq: r.seq,
    }
}

impl CacheMembers {
    /// No members or buckets yet (`load` reads them), rows timed by `clock`.
    pub fn new(clock: Clock) -> CacheMembers {
        CacheMembers { clock, ..CacheMembers::default() }
    }

    /// Loads the nodes' caches and the buckets from the store (at start).
    pub async fn load(&self, store: &dyn Store) -> Result<(), StoreError> {
        let nodes = store.cache_nodes().await?;
        *self.nodes.lock().expect("cache nodes") = nodes.into_iter().map(|r| (r.node.clone(), r)).collect();
        let buckets = store.cache_buckets().await?;
        *self.buckets.lock().expect("cache buckets") = buckets
            .into_iter()
            .map(|b| {
                let bucket = CacheBucket {
                    name: b.name.clone(),
                    public: b.public,
                    quota: b.quota,
                    projects: b.projects,
                    origin: b.origin,
                    placement: b.placement,
                };
                (b.name, bucket)
            })
            .collect();
        *self.deleted.lock().expect("deleted buckets") = store.deleted_cache_buckets().await?.into_iter().collect();
        Ok(())
    }

    /// A bucket's settings as the manager last stored them.
    pub fn bucket(&self, name: &str) -> Option<CacheBucket> {
        self.buckets.lock().expect("cache buckets").get(name).cloned()
    }

    /// Records the cache URL and weight an agent reported at registration (`None`: keeps what
    /// was known, an agent restarted without `--cache-url` does not drop its node's cache from
    /// the list). A removed member stays removed.
    pub async fn reported(
        &self,
        store: &dyn Store,
        node: &str,
        url: Option<&str>,
        weight: Option<u32>,
    ) -> Result<(), StoreError> {
        let Some(url) = url.map(|u| u.trim_end_matches('/')) else { return Ok(()) };
        if !url.starts_with("http://") && !url.starts_with("https://") {
            // one bad name would make every cache node refuse the whole list
            tracing::warn!(node, url, "ignoring a cache URL that is not http:// or https://");
            return Ok(());
        }
        let weight = weight.unwrap_or(1);
        let weight = match cache_weight_error(weight.into()) {
            Some(e) => {
                tracing::warn!(node, "{e}; using {}", weight.clamp(1, MAX_CACHE_WEIGHT));
                weight.clamp(1, MAX_CACHE_WEIGHT)
            }
            None => weight,
        };
        let known = self.nodes.lock().expect("cache nodes").get(node).cloned();
        let row = match known {
            Some(k) if k.url == url && k.reported_weight == weight => k,
            _ => {
                let row = store.put_cache_node(node, url, weight, self.clock.now()).await?;
                self.nodes.lock().expect("cache nodes").insert(node.to_string(), row.clone());
                row
            }
        };
        if row.removed && self.warned.lock().expect("cache warned").insert(node.to_string()) {
            tracing::warn!(
                node,
                url,
                "the agent reports its cache node, but an admin removed it from the cache members: it stays out (`berth cache member add {node}` adds it back)"
            );
        }
        Ok(())
    }

    /// Every node's cache with its state (`up`, `down`, `removed`) and weight, by node name.
    pub async fn views(&self, jobs: &Jobs) -> Vec<CacheMemberView> {
        let st = jobs.lock().await;
        self.nodes.lock().expect("cache nodes").values().map(|r| view(&st, r)).collect()
    }

    /// One node's cache, if its agent ever reported one.
    pub async fn view(&self, jobs: &Jobs, node: &str) -> Option<CacheMemberView> {
        let st = jobs.lock().await;
        self.nodes.lock().expect("cache nodes").get(node).map(|r| view(&st, r))
    }

    /// The cache node a kernel of job `job_id` on `node` should use: its node's own when up,
    /// else one of the up members (spread by job), else `None`. Removed members are not used.
    pub fn url_for(&self, st: &State, node: &str, job_id: i64) -> Option<String> {
        let nodes = self.nodes.lock().expect("cache nodes");
        let usable = |r: &CacheNodeRow| !r.removed && is_up(st, &r.node);
        if let Some(r) = nodes.get(node).filter(|r| usable(r)) {
            return Some(r.url.clone());
        }
        let up: Vec<&String> = nodes.values().filter(|r| usable(r)).map(|r| &r.url).collect();
        (!up.is_empty()).then(|| up[job_id.unsigned_abs() as usize % up.len()].clone())
    }

    /// The up, not removed, cache nodes: `(node, URL)`.
    pub fn up_nodes(&self, st: &State) -> Vec<(String, String)> {
        let nodes = self.nodes.lock().expect("cache nodes");
        nodes.values().filter(|r| !r.removed && is_up(st, &r.node)).map(|r| (r.node.clone(), r.url.clone())).collect()
    }

    /// Sets the admin's weight of `node`'s cache (`None`: back to its agent's), stored first;
    /// `false` when no such node reported a cache.
    pub async fn set_weight(&self, store: &dyn Store, node: &str, weight: Option<u32>) -> Result<bool, StoreError> {
        let Some(row) = store.set_cache_node_weight(node, weight, self.clock.now()).await? else {
            return Ok(false);
        };
        self.nodes.lock().expect("cache nodes").insert(node.to_string(), row);
        self.changed.notify_one();
        Ok(true)
    }

    /// Removes `node`'s cache from the members for good, or adds it back; `false` when no
    /// such node reported a cache.
    pub async fn set_removed(&self, store: &dyn Store, node: &str, removed: bool) -> Result<bool, StoreError> {
        let Some(row) = store.set_cache_node_removed(node, removed, self.clock.now()).await? else {
            return Ok(false);
        };
        self.nodes.lock().expect("cache nodes").insert(node.to_string(), row);
        if !removed {
            self.warned.lock().expect("cache warned").remove(node);
        }
        self.changed.notify_one();
        Ok(true)
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
            origin: b.origin.clone(),
            placement: b.placement,
            updated_at: self.clock.now(),
        };
        store.put_cache_bucket(&row).await?;
        self.deleted.lock().expect("deleted buckets").remove(&b.name);
        self.buckets.lock().expect("cache buckets").insert(b.name.clone(), b);
        self.changed.notify_one();
        Ok(())
    }

    /// Deletes a bucket (from the store first, which remembers the deletion), then wakes the
    /// pusher: the cache nodes delete the buckets named as deleted, with their objects.
    /// `false` when there was no such bucket.
    pub async fn delete_bucket(&self, store: &dyn Store, name: &str) -> Result<bool, StoreError> {
        let existed = store.delete_cache_bucket(name, self.clock.now()).await?;
        if existed {
            self.deleted.lock().expect("deleted buckets").insert(name.to_string());
        }
        let known = self.buckets.lock().expect("cache buckets").remove(name).is_some();
        if existed || known {
            self.changed.notify_one();
        }
        Ok(existed || known)
    }

    /// The URLs to push to and the body: every member in `seq` order, every bucket, and the
    /// names of deleted buckets (a node deletes only those: one the manager merely does not
    /// know, say after a start on a fresh database, is left alone). A
    /// removed member stays in the list as `removed` (the cache nodes keep its place in the
    /// table and hand its slots to the others, so removing it moves only its own keys) but is
    /// sent nothing. A URL reported by several nodes is up when any of them is (removed when
    /// all are), with the weight and seq of the first of them to join.
    pub fn desired(&self, st: &State) -> (Vec<String>, Vec<u8>) {
        // url → (state, weight, seq); states ordered removed < down < up
        let mut members: BTreeMap<String, (u8, u32, u64)> = BTreeMap::new();
        for r in self.nodes.lock().expect("cache nodes").values() {
            let state = if r.removed { 0 } else { 1 + u8::from(is_up(st, &r.node)) };
            let e = members.entry(r.url.clone()).or_insert((state, r.effective_weight(), r.seq));
            e.0 = e.0.max(state);
            if r.seq < e.2 {
                (e.1, e.2) = (r.effective_weight(), r.seq);
            }
        }
        let mut members: Vec<_> = members.into_iter().collect();
        members.sort_by_key(|(_, (_, _, seq))| *seq);
        let list: Vec<_> = members
            .iter()
            .map(|(url, (state, weight, seq))| {
                let state = ["removed", "down", "up"][*state as usize];
                json!({"name": url, "weight": weight, "state": state, "seq": seq})
            })
            .collect();
        let deleted: Vec<String> = self.deleted.lock().expect("deleted buckets").iter().cloned().collect();
        let body = json!({"members": list, "buckets": self.buckets(), "deleted_buckets": deleted});
        let urls = members.into_iter().filter(|(_, (state, _, _))| *state > 0).map(|(url, _)| url).collect();
        (urls, serde_json::to_vec(&body).expect("json"))
    }
}
