//! The shared core every task holds an `Arc` of: store, queues, in-memory state, wake-ups.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex as StdMutex, RwLock};
use std::time::{Duration, Instant};

use berth_model::JobState;
use berth_sched::{NodeLedger, QueueConfig};
use berth_store::{Store, StoreError};
use tokio::sync::{Mutex, MutexGuard, Notify, oneshot, watch};

use crate::auth::User;
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
    pub queues: Vec<QueueConfig>,
    pub heartbeat_timeout: Duration,
    pub heartbeat_interval: Duration,
    pub state: Mutex<State>,
    /// Wakes the scheduling loop (submit, cancel, kernel end, node register).
    pub wake: Notify,
    /// API token hash → user; filled on first use of a token.
    pub tokens: RwLock<HashMap<String, Arc<User>>>,
    /// Hashes of valid join tokens (few; compared in constant time).
    pub join_hashes: RwLock<Vec<String>>,
    next_id: AtomicU64,
    pub log_waiters: LogWaiters,
    pub shutdown: watch::Receiver<bool>,
    /// Jobs submitted since the last [`Manager::lock_state`]: submit appends here instead of
    /// waiting for the state lock a scheduling pass may hold.
    inbox: StdMutex<Vec<Job>>,
    /// An empty ledger per known node, for submit-time feasibility checks without the state lock.
    pub shapes: RwLock<Vec<NodeLedger>>,
}

impl Manager {
    pub fn new(
        store: Arc<dyn Store>,
        queues: Vec<QueueConfig>,
        heartbeat_timeout: Duration,
        shutdown: watch::Receiver<bool>,
    ) -> Manager {
        // Heartbeats a few times per timeout, at most once a second.
        let heartbeat_interval = (heartbeat_timeout / 4).clamp(Duration::from_millis(20), Duration::from_secs(1));
        Manager {
            store,
            queues,
            heartbeat_timeout,
            heartbeat_interval,
            state: Mutex::new(State::default()),
            wake: Notify::new(),
            tokens: RwLock::new(HashMap::new()),
            join_hashes: RwLock::new(Vec::new()),
            next_id: AtomicU64::new(1),
            log_waiters: StdMutex::new(HashMap::new()),
            shutdown,
            inbox: StdMutex::new(Vec::new()),
            shapes: RwLock::new(Vec::new()),
        }
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

    /// Records a node's shape for feasibility checks (replacing an older one).
    pub fn set_shape(&self, name: &str, queue: &str, topology: &berth_model::Topology) {
        let mut shapes = self.shapes.write().expect("shapes lock");
        shapes.retain(|l| l.name() != name);
        shapes.push(NodeLedger::new(name, queue, topology.clone()));
    }

    /// A fresh id for commands, log requests and connections.
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed)
    }

    pub fn queue(&self, name: &str) -> Option<&QueueConfig> {
        self.queues.iter().find(|q| q.name == name)
    }

    pub fn queue_names(&self) -> String {
        self.queues.iter().map(|q| q.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// Rebuilds memory from the store after a (re)start: known nodes come back `lost` until
    /// their agent reconnects, unfinished jobs come back with their bindings and allocations.
    pub async fn rebuild(&self) -> Result<(), StoreError> {
        let mut st = self.lock_state().await;
        let deadline = Instant::now() + self.heartbeat_timeout;
        for n in self.store.nodes().await? {
            if n.state != "lost" {
                self.store.set_node_state(&n.name, "lost", None).await?;
            }
            self.set_shape(&n.name, &n.queue, &n.topology);
            let mut ledger = NodeLedger::new(n.name.clone(), n.queue.clone(), n.topology.clone());
            ledger.set_schedulable(false);
            st.ledgers.push(ledger);
            let idx = st.ledgers.len() - 1;
            st.nodes.insert(
                n.name.clone(),
                Node {
                    ledger: idx,
                    queue: n.queue,
                    version: n.version,
                    ready: false,
                    last_heartbeat: n.last_heartbeat,
                    last_seen: Instant::now(),
                    conn: None,
                    orphan_deadline: Some(deadline),
                },
            );
        }
        for row in self.store.unfinished_jobs().await? {
            let mut job = Job::from_row(row);
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
        let pending = st.jobs.values().filter(|j| j.state == JobState::Pending).count();
        tracing::info!(jobs = st.jobs.len(), pending, nodes = st.nodes.len(), "rebuilt state from the store");
        Ok(())
    }
}
