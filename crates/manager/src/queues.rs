//! The queue service: the queues' policies, stored, seeded from the config file and changed
//! through the API (`PUT /v1/queues/{name}`); everyone else reads a shared snapshot.

use std::sync::{Arc, RwLock};

use berth_sched::QueueConfig;
use berth_store::{QueueRow, Store};

use berth_model::JobState;
use berth_model::api::{QueueUpdate, QueueView};

use crate::clock::Clock;
use crate::config::{self, Config};
use crate::error::ApiError;
use crate::jobs::Jobs;
use crate::state::State;

pub struct QueueService {
    store: Arc<dyn Store>,
    queues: RwLock<Arc<Vec<QueueConfig>>>,
    /// The manager's clock (when a queue's row changed).
    clock: Clock,
}

impl QueueService {
    pub fn new(store: Arc<dyn Store>, clock: Clock, queues: Vec<QueueConfig>) -> QueueService {
        QueueService { store, queues: RwLock::new(Arc::new(queues)), clock }
    }

    /// Every queue as the API shows it (`GET /v1/queues`): its policy, how many nodes serve
    /// it, and its pending and running jobs.
    pub async fn views(&self, jobs: &Jobs) -> Vec<QueueView> {
        let queues = self.all();
        let st = jobs.lock().await;
        queues.iter().map(|q| view(&st, q)).collect()
    }

    /// Queue `q` as the API shows it.
    pub async fn view(&self, jobs: &Jobs, q: &QueueConfig) -> QueueView {
        view(&*jobs.lock().await, q)
    }

    /// The queues now (cheap: a shared snapshot).
    pub fn all(&self) -> Arc<Vec<QueueConfig>> {
        self.queues.read().expect("queues lock").clone()
    }

    pub fn get(&self, name: &str) -> Option<QueueConfig> {
        self.all().iter().find(|q| q.name == name).cloned()
    }

    pub fn names(&self) -> String {
        self.all().iter().map(|q| q.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// Creates queue `name` or changes its policy by `update` (keys left out keep their
    /// value; a new queue starts from `config::base_queue`, the recommended policy), stored
    /// first. Returns the queue and whether it existed.
    pub async fn update(&self, name: &str, update: &QueueUpdate) -> Result<(QueueConfig, bool), ApiError> {
        config::check_queue_name(name).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let existing = self.get(name);
        let base = config::to_policy(existing.as_ref().unwrap_or(&config::base_queue(name)));
        let policy = config::apply_update(&base, update).map_err(|e| ApiError::bad_request(e.to_string()))?;
        let q = config::from_policy(name, &policy).map_err(|e| ApiError::bad_request(e.to_string()))?;
        // Keep the config file seed: an unchanged file entry must not undo this change on restart.
        let seed = self.store.queues().await?.into_iter().find(|r| r.name == name).and_then(|r| r.seed);
        let row = QueueRow { name: name.to_string(), policy, seed, updated_at: self.clock.now() };
        self.store.put_queue(&row).await?;
        self.set(q.clone());
        Ok((q, existing.is_some()))
    }

    /// Replaces (or adds) one queue's policy in memory; the caller stored it first.
    fn set(&self, q: QueueConfig) {
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
    /// file's entry changes). Without any queue, `default` is created with the recommended
    /// policy (`config::default_queues`); one stored by an earlier version keeps its policy.
    pub async fn load(&self, cfg: &Config) -> anyhow::Result<()> {
        let mut rows = self.store.queues().await?;
        let mut seeds = cfg.queues.clone();
        if seeds.is_empty() && rows.is_empty() {
            seeds = crate::config::default_queues();
        }
        let now = self.clock.now();
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
}

/// A queue with its nodes and live jobs counted.
fn view(st: &State, q: &QueueConfig) -> QueueView {
    let (mut pending, mut running) = (0, 0);
    for j in st.live_jobs().filter(|j| j.queue == q.name) {
        if j.state == JobState::Pending {
            pending += 1;
        } else if j.state.holds_resources() {
            running += 1;
        }
    }
    QueueView {
        name: q.name.clone(),
        policy: config::to_policy(q),
        nodes: st.nodes().values().filter(|n| n.queue == q.name).count() as u32,
        pending,
        running,
    }
}
