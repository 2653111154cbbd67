//! The shared core every task holds an `Arc` of: store, queues, in-memory state, wake-ups.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, RwLock};
use std::time::{Duration, Instant};

use berth_model::JobState;
use berth_model::api::NodeState;
use berth_sched::{NodeLedger, QueueConfig};
use berth_store::{Store, StoreError};
use tokio::sync::{Mutex, MutexGuard, Notify, oneshot, watch};

use crate::config::FairShareConfig;
use crate::state::{Job, KernelEnd, Node, State};

/// An agent's answer to `FetchLogs`.
#[derive(Debug)]
pub struct LogReply {
    pub data: Vec<u8>,
    pub next_offset: u64,
    pub found: bool,
}

/// What the log handler waits for, keyed by request id.
pub type LogWaiters = StdMutex<HashMap<u64, oneshot::Sender<LogReply>>>;

pub struct Manager {
    pub store: Arc<dyn Store>,
    /// The queues' policies (stored; changed through `PUT /v1/queues/{name}`).
    pub queues: crate::queues::QueueService,
    pub fair_share: FairShareConfig,
    pub heartbeat_timeout: Duration,
    pub heartbeat_interval: Duration,
    /// Only through [`Manager::lock_state`], which first takes in the inbox.
    state: Mutex<State>,
    /// Wakes the scheduling loop (submit, cancel, kernel end, node register).
    pub wake: Notify,
    /// Who a request is: tokens, the local socket, join tokens, the audit log.
    pub tenancy: crate::tenancy::Tenancy,
    next_id: AtomicU64,
    pub log_waiters: LogWaiters,
    pub shutdown: watch::Receiver<bool>,
    /// Jobs submitted since the last [`Manager::lock_state`]: submit appends here instead of
    /// waiting for the state lock a scheduling pass may hold.
    inbox: StdMutex<Vec<Job>>,
    /// An empty ledger per known node (a copy of the state's, see [`Manager::publish_shape`]),
    /// for submit-time feasibility checks without the state lock.
    pub shapes: RwLock<Vec<NodeLedger>>,
    /// Quotas per user and project, and the checks against them.
    pub quotas: crate::quotas::QuotaService,
    /// The dataset cache jobs are told about (`BERTH_CACHE_URL`/`_TOKEN`), if any.
    pub cache: std::sync::OnceLock<crate::cache_env::CacheEnv>,
    /// The cache nodes the agents reported and the buckets, pushed to every cache node.
    pub cache_members: crate::cache_members::CacheMembers,
    /// Whether the store takes writes (a full disk under the data dir).
    pub store_health: crate::store_health::StoreHealth,
    /// One copy of each exported environment of the jobs in memory.
    pub envs: crate::env_intern::EnvInterner,
    /// Where agent connections hand their agents' messages (`reports.rs`).
    pub reports: crate::report_queue::Reports,
    /// The report loop's end of `reports`, taken once when it starts.
    reports_rx: StdMutex<Option<crate::report_queue::ReportsRx>>,
}

impl Manager {
    pub fn new(
        store: Arc<dyn Store>,
        queues: Vec<QueueConfig>,
        fair_share: FairShareConfig,
        heartbeat_timeout: Duration,
        shutdown: watch::Receiver<bool>,
        data_dir: &std::path::Path,
    ) -> Manager {
        // Heartbeats a few times per timeout, at most once a second.
        let heartbeat_interval = (heartbeat_timeout / 4).clamp(Duration::from_millis(20), Duration::from_secs(1));
        let (reports, reports_rx) = crate::report_queue::channel();
        let tenancy = crate::tenancy::Tenancy::new(store.clone());
        let quotas = crate::quotas::QuotaService::new(store.clone());
        let queues = crate::queues::QueueService::new(store.clone(), queues);
        Manager {
            store,
            queues,
            fair_share,
            heartbeat_timeout,
            heartbeat_interval,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            tenancy,
            next_id: AtomicU64::new(1),
            log_waiters: StdMutex::new(HashMap::new()),
            shutdown,
            inbox: StdMutex::new(Vec::new()),
            shapes: RwLock::new(Vec::new()),
            quotas,
            cache: std::sync::OnceLock::new(),
            cache_members: Default::default(),
            store_health: crate::store_health::StoreHealth::new(data_dir),
            envs: Default::default(),
            reports,
            reports_rx: StdMutex::new(Some(reports_rx)),
        }
    }

    /// The receiving end of [`Manager::reports`], for the report loop (once).
    pub fn take_reports(&self) -> Option<crate::report_queue::ReportsRx> {
        self.reports_rx.lock().expect("reports lock").take()
    }

    /// Locks the in-memory state, first moving freshly submitted jobs into it.
    pub async fn lock_state(&self) -> MutexGuard<'_, State> {
        let mut st = self.state.lock().await;
        let new = std::mem::take(&mut *self.inbox.lock().expect("inbox lock"));
        for j in new {
            st.jobs.insert(j.id, j);
        }
        st
    }

    /// Hands a just-inserted job to the scheduler.
    pub fn enqueue(&self, job: Job) {
        self.inbox.lock().expect("inbox lock").push(job);
        self.wake.notify_one();
    }

    /// Publishes the shape of a node's ledger (its queue, topology and allowed mounts, with
    /// nothing allocated) for submit-time feasibility checks, replacing an older one. One
    /// source: called whenever the scheduler's ledger of the node is built or changes shape.
    pub fn publish_shape(&self, ledger: &NodeLedger) {
        let mut shape = NodeLedger::new(ledger.name(), ledger.queue(), ledger.topology().clone());
        shape.set_allowed_mounts(ledger.allowed_mounts().map(<[String]>::to_vec));
        let mut shapes = self.shapes.write().expect("shapes lock");
        shapes.retain(|l| l.name() != ledger.name());
        shapes.push(shape);
    }

    /// A fresh id for commands, log requests and connections.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Rebuilds memory from the store after a (re)start: known nodes come back `lost` until
    /// their agent reconnects, unfinished jobs come back with their bindings and allocations.
    pub async fn rebuild(&self) -> Result<(), StoreError> {
        let mut st = self.lock_state().await;
        let deadline = Instant::now() + self.heartbeat_timeout;
        for n in self.store.nodes().await? {
            if n.state != NodeState::Lost {
                self.store.set_node_state(&n.name, NodeState::Lost, None).await?;
            }
            let mut ledger = NodeLedger::new(n.name.clone(), n.queue.clone(), n.topology.clone());
            ledger.set_schedulable(false);
            self.publish_shape(&ledger);
            st.ledgers.push(ledger);
            let idx = st.ledgers.len() - 1;
            st.nodes.insert(
                n.name.clone(),
                Node {
                    ledger: idx,
                    asked_queue: n.queue.clone(),
                    queue: n.queue,
                    labels: Default::default(),
                    version: n.version,
                    ready: false,
                    address: n.address,
                    drain: n.drain_reason,
                    last_heartbeat: n.last_heartbeat,
                    last_seen: Instant::now(),
                    conn: None,
                    orphan_deadline: Some(deadline),
                    containers: Default::default(),
                },
            );
        }
        let mut flushed_ms = None;
        for u in self.store.usage().await? {
            let at = u.at.as_millisecond();
            match u.kind.as_str() {
                "user" => st.usage.users.insert(u.name, (u.value, at)),
                "project" => st.usage.projects.insert(u.name, (u.value, at)),
                _ if u.kind == crate::state::CLOCK => {
                    flushed_ms = Some(at);
                    None
                }
                _ => None,
            };
        }
        let now_ms = jiff::Timestamp::now().as_millisecond();
        for row in self.store.unfinished_jobs().await? {
            let mut job = Job::from_row(row, &self.envs);
            // Usage was counted up to the last flush; kernels ran on while the manager was down.
            let base = job.started_at.map(|t| t.as_millisecond()).unwrap_or(now_ms);
            job.accounted_ms = flushed_ms.map_or(base, |f| f.max(base));
            if job.state.holds_resources() {
                let kernels = self.store.kernels(job.id).await?;
                for k in kernels.into_iter().filter(|k| k.attempt == job.attempt) {
                    job.ends.push(k.exit_code.map(|c| KernelEnd { outcome: None, exit_code: Some(c) }));
                    job.bindings.push(k.binding);
                }
                let bindings = job.bindings.clone();
                st.allocate(job.id, &bindings);
            }
            st.jobs.insert(job.id, job);
        }
        self.quotas.table().restore_borrowed(&mut st);
        let pending = st.jobs.values().filter(|j| j.state == JobState::Pending).count();
        // Only unfinished jobs live in memory; say so, next to how many the store holds, so
        // that `0` after a restart does not read as lost jobs.
        let stored = self.store.job_count().await?;
        tracing::info!(
            unfinished_jobs = st.jobs.len(),
            stored_jobs = stored,
            pending,
            nodes = st.nodes.len(),
            "rebuilt state from the store"
        );
        Ok(())
    }
}
