//! The manager: the root every task and handler holds an `Arc` of. Its fields are the
//! services, each with private state and one job (jobs, nodes, tenancy, quotas, queues, cache
//! membership, the agent hub); handlers reach the service they need through it. Its own code
//! is only what spans services: building them, and rebuilding memory after a restart.

use std::sync::Arc;

use berth_model::api::NodeState;
use berth_sched::NodeLedger;
use berth_store::{Store, StoreError};
use tokio::sync::{Notify, watch};

use crate::clock::Clock;
use crate::config::FairShareConfig;
use crate::state::{Exit, KernelEnd, Node};

/// What a manager is told at its start besides its services: how it is reached and what it
/// tells jobs. All known before it is made, so that it is shared whole (nothing set late).
pub struct Wiring {
    /// This manager's own URL (`--advertise-url`), for `/v1/leader` and login links.
    pub leader_url: String,
    /// Where the app proxy listens (`None`: no app listener).
    pub apps: Option<AppsEndpoint>,
    /// The dataset cache jobs are told about, if any.
    pub cache: Option<crate::cache_env::CacheEnv>,
    /// The retention period (`--retain`), if finished jobs are archived.
    pub retain: Option<std::time::Duration>,
    /// The key of jobs' step tokens (`srun`), loaded from the store under the lease.
    pub step_key: crate::step_token::StepKey,
    /// The API is served over TLS.
    pub tls: bool,
}

/// Where users reach the app proxy.
#[derive(Debug, Clone)]
pub struct AppsEndpoint {
    /// The port it listens on (links use the host name the caller used for the API).
    pub port: u16,
    /// A public URL instead (`--apps-url`, behind a reverse proxy or another host name).
    pub public_url: Option<String>,
}

pub struct Manager {
    /// For reads of what memory does not keep (finished jobs, history, users); writes of job
    /// and node state go through their services.
    pub store: Arc<dyn Store>,
    /// Where every decision reads the time (a manual one in tests, `clock.rs`); the services
    /// that read it hold a clone.
    pub clock: Clock,
    /// The job table, the lifecycle and the scheduling loop's wake-up.
    pub jobs: crate::jobs::Jobs,
    /// Node states, drain, heartbeat settings, node shapes.
    pub nodes: crate::nodes::Nodes,
    /// The queues' policies (stored; changed through `PUT /v1/queues/{name}`).
    pub queues: crate::queues::QueueService,
    pub fair_share: FairShareConfig,
    /// Who a request is: tokens, the local socket, join tokens, the audit log.
    pub tenancy: crate::tenancy::Tenancy,
    /// Quotas per user and project, and the checks against them.
    pub quotas: crate::quotas::QuotaService,
    /// The agent connections' report queue and log requests.
    pub hub: crate::hub::Hub,
    /// The dataset cache jobs are told about (`BERTH_CACHE_URL`/`_TOKEN`), if any.
    pub cache: Option<crate::cache_env::CacheEnv>,
    /// The cache nodes the agents reported and the buckets, pushed to every cache node.
    pub cache_members: crate::cache_members::CacheMembers,
    /// Whether the store takes writes (a full disk under the data dir).
    pub store_health: crate::store_health::StoreHealth,
    /// Dashboard login links not used yet.
    pub login_links: crate::login_links::LoginLinks,
    /// Streams into kernels (`berth exec`) waiting for their agent to dial back.
    pub streams: crate::streams::Streams,
    /// The manager's data directory (private: its store, backups being written).
    pub data_dir: std::path::PathBuf,
    /// Clients attached to jobs and their last traffic (the queues' idle timeouts).
    pub sessions: crate::sessions::Sessions,
    /// Where the app proxy listens (`apps/`), if it does.
    pub apps: Option<AppsEndpoint>,
    /// The API is served over TLS: session cookies are `Secure`.
    pub tls: bool,
    /// Prometheus counters and histograms (`/metrics`; levels are counted at scrape time).
    pub metrics: Arc<crate::metrics::Metrics>,
    /// Who sees the series of `/metrics` that name tenants' objects.
    pub metrics_access: crate::metrics::MetricsAccess,
    /// The retention period (`--retain`, `retention.rs`), if finished jobs are archived.
    pub retain: Option<std::time::Duration>,
    pub shutdown: watch::Receiver<bool>,
    /// This manager's hold on the leader lease: whether it may act, and its epoch.
    pub lease: Arc<crate::lease::Lease>,
    /// This manager's own URL (`--advertise-url`), for `/v1/leader`.
    pub leader_url: String,
    /// Data folders: access, the storage backend, what jobs mount.
    pub folders: crate::folders::Folders,
    /// What the dataset caches held of jobs' datasets, lately (cache-aware placement).
    pub dataset_holdings: crate::dataset_holdings::Holdings,
    /// Code snapshots (`--code`), on the folder storage.
    pub code: crate::code_store::CodeStore,
    /// Cancel a job whose dependency can never be met (`kill_invalid_depend`, `holds.rs`).
    pub kill_invalid_depend: bool,
    /// The qualities of service of the config file (`--qos`, `qos.rs`).
    pub qos: crate::qos::QosTable,
    /// The key of jobs' step tokens (`srun`), loaded from the store once this manager leads.
    pub step_key: crate::step_token::StepKey,
    pub serving: crate::serving::Serving,
}

impl Manager {
    pub fn new(
        store: Arc<dyn Store>,
        clock: Clock,
        fair_share: FairShareConfig,
        heartbeat_timeout: std::time::Duration,
        shutdown: watch::Receiver<bool>,
        data_dir: &std::path::Path,
        wiring: Wiring,
    ) -> Manager {
        let Wiring { leader_url, apps, cache, retain, step_key, tls } = wiring;
        let wake = Arc::new(Notify::new());
        let metrics = Arc::new(crate::metrics::Metrics::new());
        Manager {
            serving: crate::serving::Serving::new(store.clone(), clock.clone()),
            folders: crate::folders::Folders::new(store.clone(), data_dir.join("folders")),
            dataset_holdings: Default::default(),
            code: crate::code_store::CodeStore::new(&data_dir.join("folders"), crate::code_store::DEFAULT_CODE_LIMIT),
            jobs: crate::jobs::Jobs::new(
                store.clone(),
                clock.clone(),
                wake.clone(),
                fair_share.half_life_ms,
                metrics.clone(),
            ),
            nodes: crate::nodes::Nodes::new(store.clone(), wake, heartbeat_timeout),
            queues: crate::queues::QueueService::new(store.clone(), clock.clone(), Vec::new()),
            tenancy: crate::tenancy::Tenancy::new(store.clone(), clock.clone()),
            quotas: crate::quotas::QuotaService::new(store.clone(), clock.clone()),
            hub: Default::default(),
            fair_share,
            cache,
            cache_members: crate::cache_members::CacheMembers::new(clock.clone()),
            store_health: crate::store_health::StoreHealth::new(data_dir, clock.clone()),
            login_links: crate::login_links::LoginLinks::new(clock.clone()),
            streams: Default::default(),
            apps,
            sessions: crate::sessions::Sessions::new(clock.clone()),
            data_dir: data_dir.to_path_buf(),
            tls,
            retain,
            shutdown,
            store,
            clock,
            metrics,
            metrics_access: Default::default(),
            lease: Default::default(),
            leader_url,
            kill_invalid_depend: true,
            qos: Default::default(),
            step_key,
        }
    }

    /// Folders live under `root` (`--folder-root`) instead of `<data dir>/folders`.
    pub fn with_folder_root(mut self, root: std::path::PathBuf) -> Manager {
        self.code = crate::code_store::CodeStore::new(&root, self.code.limit());
        self.folders = crate::folders::Folders::new(self.store.clone(), root);
        self
    }

    /// Code snapshots may hold at most `limit` bytes (`--code-limit`).
    pub fn with_code_limit(mut self, limit: u64) -> Manager {
        self.code = crate::code_store::CodeStore::new(self.folders.root(), limit);
        self
    }

    /// This manager acts under `lease` (taken before the manager is made, `leader.rs`).
    pub fn with_lease(mut self, lease: Arc<crate::lease::Lease>) -> Manager {
        self.lease = lease;
        self
    }

    /// Rebuilds memory from the store after a (re)start: known nodes come back `lost` until
    /// their agent reconnects, unfinished jobs come back with their bindings and allocations.
    pub async fn rebuild(&self) -> Result<(), StoreError> {
        let mut st = self.jobs.lock().await;
        let deadline = self.clock.instant() + self.nodes.heartbeat_timeout;
        for n in self.store.nodes().await? {
            if n.state != NodeState::Lost {
                self.store.set_node_state(&n.name, NodeState::Lost, None).await?;
            }
            let mut ledger = NodeLedger::new(n.name.clone(), n.queue.clone(), n.topology.clone());
            ledger.set_schedulable(false);
            self.nodes.publish_shape(&ledger);
            st.register_node(
                n.name.clone(),
                Node {
                    ledger: 0,
                    asked_queue: n.queue.clone(),
                    queue: n.queue,
                    labels: Default::default(),
                    version: n.version,
                    ready: false,
                    address: n.address,
                    drain: n.drain_reason,
                    last_heartbeat: n.last_heartbeat,
                    heard: crate::heard::Heard::new(self.clock.instant()),
                    conn: None,
                    orphan_deadline: Some(deadline),
                    containers: Default::default(),
                    gpus_in_use: Vec::new(),
                    envs: Vec::new(),
                },
                ledger,
            );
        }
        let mut flushed_ms = None;
        for u in self.store.usage().await? {
            if u.kind == crate::state::CLOCK {
                flushed_ms = Some(u.at.as_millisecond());
            }
            st.restore_usage(&u);
        }
        st.set_predictor(crate::predictions::rebuild(self.store.as_ref()).await?);
        let now_ms = self.clock.now_ms();
        for row in self.store.unfinished_jobs().await? {
            let mut job = self.jobs.restore(row);
            // A requeued job's earlier runs count for `las` (few jobs: one query each).
            if job.attempt.number > 0 {
                let size = crate::predictions::size(&job.spec);
                job.attained = crate::predictions::attained(&self.store.transitions(job.id).await?, size);
            }
            // Usage was counted up to the last flush; kernels ran on while the manager was down.
            let base = job.attempt.started_at.map(|t| t.as_millisecond()).unwrap_or(now_ms);
            job.attempt.accounted_ms = flushed_ms.map_or(base, |f| f.max(base));
            if job.state.holds_resources() {
                let kernels = self.store.kernels(job.id).await?;
                for k in kernels.into_iter().filter(|k| k.attempt == job.attempt.number) {
                    job.attempt.ends.push(k.exit_code.map(|c| KernelEnd { outcome: None, exit: Exit::code(Some(c)) }));
                    job.attempt.bindings.push(k.binding);
                }
                let bindings = job.attempt.bindings.clone();
                st.allocate(job.id, &bindings);
                // The estimate it started with is not stored: predicted again from the history.
                let key = crate::predictions::key(&job.owner.name, &job.spec);
                job.estimate_ms = st.predict(&key, job.time_limit_ms());
            }
            st.insert_job(job);
        }
        self.quotas.table().restore_borrowed(&mut st);
        let pending = st.pending_jobs().count();
        // Only unfinished jobs live in memory; say so, next to how many the store holds, so
        // that `0` after a restart does not read as lost jobs.
        let stored = self.store.job_count().await?;
        let archived = self.store.archived_count().await?;
        tracing::info!(
            unfinished_jobs = st.job_count(),
            stored_jobs = stored,
            archived_jobs = archived,
            pending,
            nodes = st.nodes().len(),
            "rebuilt state from the store"
        );
        Ok(())
    }
}
