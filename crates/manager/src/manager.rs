//! The shared core every task holds an `Arc` of: store, queues, in-memory state, wake-ups.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, RwLock};
use std::time::{Duration, Instant};

use berth_model::JobState;
use berth_model::api::NodeState;
use berth_sched::{NodeLedger, QueueConfig};
use berth_store::{QueueRow, Store, StoreError};
use tokio::sync::{Mutex, MutexGuard, Notify, oneshot, watch};

use crate::config::{Config, FairShareConfig};
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
    queues: RwLock<Arc<Vec<QueueConfig>>>,
    pub fair_share: FairShareConfig,
    pub heartbeat_timeout: Duration,
    pub heartbeat_interval: Duration,
    pub state: Mutex<State>,
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
    /// An empty ledger per known node, for submit-time feasibility checks without the state lock.
    pub shapes: RwLock<Vec<NodeLedger>>,
    /// Quotas per user and project, and the checks against them.
    pub quotas: crate::quotas::QuotaService,
    /// The dataset cache jobs are told about (`BERTH_CACHE_URL`/`_TOKEN`), if any.
    pub cache: std::sync::OnceLock<crate::cache_env::CacheEnv>,
    /// The cache nodes the agents reported and the buckets, pushed to every cache node.
    pub cache_members: crate::cache_members::CacheMembers,
    /// Whether the store takes writes (a full disk under the data dir).
    pub store_health: crate::store_health::StoreHealth,
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
        Manager {
            store,
            queues: RwLock::new(Arc::new(queues)),
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

    /// Records a node's shape for feasibility checks (replacing an older one): its topology
    /// and the host paths it lets containers mount (`None`: not reported since this start).
    pub fn set_shape(&self, name: &str, queue: &str, topology: &berth_model::Topology, mounts: Option<Vec<String>>) {
        let mut shape = NodeLedger::new(name, queue, topology.clone());
        shape.set_allowed_mounts(mounts);
        let mut shapes = self.shapes.write().expect("shapes lock");
        shapes.retain(|l| l.name() != name);
        shapes.push(shape);
    }

    /// A fresh id for commands, log requests and connections.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    /// The queues now (cheap: a shared snapshot).
    pub fn queues(&self) -> Arc<Vec<QueueConfig>> {
        self.queues.read().expect("queues lock").clone()
    }

    pub fn queue(&self, name: &str) -> Option<QueueConfig> {
        self.queues().iter().find(|q| q.name == name).cloned()
    }

    pub fn queue_names(&self) -> String {
        self.queues().iter().map(|q| q.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// Replaces (or adds) one queue's policy in memory; the caller stored it first.
    pub fn set_queue(&self, q: QueueConfig) {
        let mut qs = self.queues.write().expect("queues lock");
        let mut v: Vec<QueueConfig> = qs.as_ref().clone();
        match v.iter_mut().find(|o| o.name == q.name) {
            Some(o) => *o = q,
            None => {
                v.push(q);
                v.sort_by(|a, b| a.name.cmp(&b.name));
            }
        }
        *qs = Arc::new(v);
    }

    /// Loads the stored queues, seeding them from the config file: a queue whose file entry
    /// is new or changed since the last start takes the file's policy; one whose entry is
    /// unchanged keeps its stored policy (an admin's API change survives restarts until the
    /// file's entry changes). Without any queue, `default` is created (strict FIFO).
    pub async fn load_queues(&self, cfg: &Config) -> anyhow::Result<()> {
        let mut rows = self.store.queues().await?;
        let mut seeds = cfg.queues.clone();
        if seeds.is_empty() && rows.is_empty() {
            seeds = crate::config::default_queues();
        }
        let now = jiff::Timestamp::now();
        for q in &seeds {
            let policy = crate::config::to_policy(q);
            let seed = serde_json::to_string(&policy)?;
            match rows.iter_mut().find(|r| r.name == q.name) {
                Some(r) if r.seed.as_deref() == Some(seed.as_str()) => {}
                existing => {
                    if existing.is_some() {
                        tracing::info!(queue = %q.name, "config file entry changed: it replaces the stored policy");
                    }
                    let row = QueueRow { name: q.name.clone(), policy, seed: Some(seed), updated_at: now };
                    self.store.put_queue(&row).await?;
                    match existing {
                        Some(r) => *r = row,
                        None => rows.push(row),
                    }
                }
            }
        }
        let mut queues = Vec::with_capacity(rows.len());
        for r in &rows {
            let q = crate::config::from_policy(&r.name, &r.policy)
                .map_err(|e| anyhow::anyhow!("stored policy of queue `{}` is invalid: {e}", r.name))?;
            queues.push(q);
        }
        queues.sort_by(|a, b| a.name.cmp(&b.name));
        *self.queues.write().expect("queues lock") = Arc::new(queues);
        Ok(())
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
            self.set_shape(&n.name, &n.queue, &n.topology, None);
            let mut ledger = NodeLedger::new(n.name.clone(), n.queue.clone(), n.topology.clone());
            ledger.set_schedulable(false);
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
            let mut job = Job::from_row(row);
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
