//! Serving endpoints (`berth serve`, [docs/serving.md]): the service that owns them. An
//! endpoint is a stored row (its spec, revision, desired count, rollout) plus what only memory
//! knows: its replicas as the router sees them (ready or not, requests in flight), its recent
//! traffic and the autoscaler's memory.
//!
//! Who does what: the API changes rows (`api/endpoints.rs`); `controller` runs every endpoint
//! towards its spec (starting, probing, draining and stopping replica jobs, rolling updates,
//! autoscaling) with the decisions made by the pure `plan` and `autoscale`; `router` answers
//! `/serve/<name>/...` on the app listener, over the ready replicas by least outstanding
//! requests, straight to a replica's port where `direct` found it reachable, else through its
//! agent. Replicas are ordinary jobs (placed, bound and run like any other) whose spec
//! names their endpoint (`JobSpec::replica_of`), so a restarted manager finds them again.

pub mod autoscale;
pub mod controller;
pub mod direct;
pub mod plan;
pub mod router;
pub mod stats;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use axum::http::HeaderValue;
use berth_model::JobId;
use berth_model::endpoint::{EndpointView, ReplicaState, ReplicaView};
use berth_store::endpoints::EndpointRow;
use berth_store::{Store, StoreError};
use tokio::sync::Notify;

use crate::apps::direct::Routes;
use autoscale::Scaler;
use stats::Traffic;

/// One replica as the controller and the router know it.
#[derive(Debug)]
pub struct Replica {
    pub job: JobId,
    pub attempt: u32,
    pub revision: u64,
    pub node: Option<String>,
    pub state: ReplicaState,
    pub placed: bool,
    pub running_since: Option<Instant>,
    pub ever_ready: bool,
    pub probe_fails: u32,
    pub inflight: Arc<AtomicU64>,
    pub draining_since: Option<Instant>,
    /// Why it is not ready.
    pub reason: Option<String>,
    /// A probe is out.
    pub probing: bool,
    pub next_probe: Instant,
    /// The controller stopped it: its end is no failure.
    pub stopping: bool,
    /// Its job ID as the `X-Berth-Replica` header of its answers, made once (issue 42).
    pub header: HeaderValue,
}

impl Replica {
    /// The app proxy's key for it (its job's attempt).
    pub fn key(&self) -> crate::apps::key::AppKey {
        crate::apps::key::AppKey {
            job: self.job,
            attempt: self.attempt,
            app: std::borrow::Cow::Borrowed(berth_model::endpoint::REPLICA_APP),
        }
    }

    pub fn new(job: JobId, revision: u64, now: Instant) -> Replica {
        Replica {
            job,
            attempt: 0,
            revision,
            node: None,
            state: ReplicaState::Starting,
            placed: false,
            running_since: None,
            ever_ready: false,
            probe_fails: 0,
            inflight: Arc::default(),
            draining_since: None,
            reason: None,
            probing: false,
            next_probe: now,
            stopping: false,
            header: HeaderValue::from(job),
        }
    }
}

/// An endpoint: its row and what memory keeps of it.
pub struct Endpoint {
    pub row: EndpointRow,
    /// Token hashes that may call it, with their ids.
    pub tokens: HashMap<String, i64>,
    pub replicas: BTreeMap<JobId, Replica>,
    /// Its recent requests and metric series (shared with the router's requests in flight).
    pub traffic: Arc<Traffic>,
    pub scaler: Scaler,
    /// Replica failures in a row (backoff), reset when a replica gets ready.
    pub failures: u32,
    pub start_after: Option<Instant>,
    /// New-revision replicas that failed during the current rollout.
    pub rollout_failures: u32,
    pub restarts: u64,
    /// Woken when a replica gets ready (requests waiting for a cold start).
    pub ready: Arc<Notify>,
    /// The row changed in memory (autoscaler, a wake-up) and is not stored yet.
    pub dirty: bool,
    /// `/serve/NAME`, what `X-Forwarded-Prefix` tells its replicas, made once (issue 42).
    pub prefix: Option<HeaderValue>,
}

impl Endpoint {
    pub fn new(row: EndpointRow, tokens: HashMap<String, i64>, now: Instant) -> Endpoint {
        Endpoint {
            prefix: HeaderValue::try_from(format!("/serve/{}", row.name)).ok(),
            row,
            tokens,
            replicas: BTreeMap::new(),
            traffic: Arc::new(Traffic::new(now)),
            scaler: Scaler::default(),
            failures: 0,
            start_after: None,
            rollout_failures: 0,
            restarts: 0,
            ready: Arc::new(Notify::new()),
            dirty: false,
        }
    }

    pub fn ready_count(&self) -> u32 {
        self.replicas.values().filter(|r| r.state == ReplicaState::Ready).count() as u32
    }

    /// The API's view of it, with the last minute's traffic and how `routes` reach its
    /// replicas.
    pub fn view(&self, now: Instant, routes: &Routes) -> EndpointView {
        let s = self.traffic.summary(now, 60);
        let r = &self.row;
        EndpointView {
            id: r.id,
            name: r.name.clone(),
            owner: r.owner.clone(),
            spec: r.spec.clone(),
            revision: r.revision,
            desired: r.desired,
            ready: self.ready_count(),
            rollout: r.rollout,
            message: r.message.clone(),
            path: berth_model::endpoint::base_path(&r.name),
            url: None,
            replicas: self
                .replicas
                .values()
                .filter(|x| !x.stopping)
                .map(|x| ReplicaView {
                    job: x.job,
                    revision: x.revision,
                    state: x.state,
                    node: x.node.clone(),
                    inflight: x.inflight.load(Ordering::Relaxed),
                    reason: x.reason.clone(),
                    route: routes.shown(&x.key()),
                })
                .collect(),
            request_rate: s.rate,
            error_rate: s.error_rate,
            p50_ms: s.p50_ms,
            p99_ms: s.p99_ms,
            restarts: self.restarts,
            created_at: r.created_at,
        }
    }
}

/// The serving service; see the module doc.
pub struct Serving {
    store: Arc<dyn Store>,
    endpoints: Mutex<BTreeMap<i64, Endpoint>>,
    /// Wakes the controller (an endpoint changed, a request waits for a cold start).
    pub kick: Notify,
    /// The endpoints were read: until then the controller does nothing (it would take every
    /// replica for an orphan).
    loaded: AtomicBool,
    /// Taken by whoever stores a row (the API, the controller), so that neither writes a
    /// stale copy over the other's.
    pub writes: tokio::sync::Mutex<()>,
    /// How the router reaches each replica (decided by the controller: `direct`).
    pub routes: Routes,
    /// The manager's clock: what decides (idle time, rates for the autoscaler, backoffs,
    /// probes) reads it; latencies and tokio deadlines stay on real time.
    clock: crate::clock::Clock,
}

impl Serving {
    pub fn new(store: Arc<dyn Store>, clock: crate::clock::Clock) -> Serving {
        Serving {
            store,
            clock,
            endpoints: Mutex::default(),
            kick: Notify::new(),
            loaded: AtomicBool::new(false),
            writes: Default::default(),
            routes: Routes::default(),
        }
    }

    /// The monotonic time on the manager's clock: every instant kept in an endpoint (its
    /// traffic, replicas, scaler) comes from here.
    pub fn now(&self) -> Instant {
        self.clock.instant()
    }

    /// Reads the endpoints and their tokens from the store (at start and on taking the lease).
    pub async fn load(&self) -> Result<(), StoreError> {
        let rows = self.store.endpoints().await?;
        let tokens = self.store.all_endpoint_tokens().await?;
        let now = self.now();
        let mut map = BTreeMap::new();
        for row in rows {
            let t = tokens.iter().filter(|t| t.endpoint_id == row.id).map(|t| (t.hash.clone(), t.id)).collect();
            map.insert(row.id, Endpoint::new(row, t, now));
        }
        *self.lock() = map;
        self.loaded.store(true, Ordering::SeqCst);
        Ok(())
    }

    pub fn loaded(&self) -> bool {
        self.loaded.load(Ordering::SeqCst)
    }

    /// The endpoints, under a lock never held across an `await`.
    pub fn lock(&self) -> MutexGuard<'_, BTreeMap<i64, Endpoint>> {
        // A panic elsewhere while holding it leaves plain data behind: go on with it.
        self.endpoints.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The id of endpoint `name`.
    pub fn id_of(&self, name: &str) -> Option<i64> {
        self.lock().values().find(|e| e.row.name == name).map(|e| e.row.id)
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }
}
