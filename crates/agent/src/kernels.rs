//! The agent's table of kernels: what it runs, what ended and is not yet forgotten, and the
//! handling of the manager's commands against it.
//!
//! One task owns the table (no locks): commands come from the connection, `Finished` events
//! from the runtime's watch tasks. Every event is recorded here before it is sent, so a report
//! made on reconnect always carries what the manager might have missed.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine;
use berth_model::protocol::{
    AgentMessage, GpuUse, KernelEvent, KernelKey, KernelOutcome, KernelReport, KernelSample, ManagerMessage,
};
use berth_model::{Binding, Topology};
use tokio::sync::mpsc;

use crate::envs::EnvCache;
use crate::meter::Meter;
use crate::metrics::{Board, KernelRow};
use crate::runtime::{KernelHandle, KernelUpdate, Runtime};
use crate::setup::SetupDone;
use crate::streams::TargetError;
use crate::{ledger, logs};

mod start;

struct Entry {
    binding: Binding,
    last: KernelEvent,
    /// Present while the process runs.
    handle: Option<KernelHandle>,
    stopping: bool,
    /// What it used so far (sampled at heartbeats).
    meter: Meter,
    /// Present while its setup (environment build) runs, before the process starts.
    setup: Option<start::Pending>,
    /// The environment it uses, counted in the cache's book while the kernel lives.
    env_key: Option<String>,
}

impl Entry {
    fn new(binding: Binding, last: KernelEvent, handle: Option<KernelHandle>) -> Entry {
        Entry { binding, last, handle, stopping: false, meter: Meter::default(), setup: None, env_key: None }
    }

    /// Whether it holds its binding: it runs, or is being set up to.
    fn live(&self) -> bool {
        self.handle.is_some() || self.setup.is_some()
    }
}

pub(crate) struct Kernels {
    node: String,
    topology: Topology,
    data_dir: std::path::PathBuf,
    runtime: Runtime,
    map: BTreeMap<KernelKey, Entry>,
    events: mpsc::UnboundedSender<KernelUpdate>,
    /// Starts waiting for kernels that are being stopped to give their devices back (a
    /// requeued multi-node job placed again on a node where its old kernel still stops).
    deferred: Vec<ManagerMessage>,
    /// Where the table is published for `/metrics` after every change (see `publish`).
    board: Board,
    /// The node's Python environments, and where kernels' setups report their end.
    envs: EnvCache,
    setups: mpsc::UnboundedSender<SetupDone>,
    /// The client of dataset prefetches (trusting what the agent trusts).
    http: reqwest::Client,
    /// The cache as the manager knows it (a node registers with none), and whether it may
    /// have changed since.
    envs_sent: Vec<berth_model::environment::EnvEntry>,
    envs_dirty: bool,
    envs_checked: std::time::Instant,
}

impl Kernels {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        node: String,
        topology: Topology,
        data_dir: std::path::PathBuf,
        runtime: Runtime,
        events: mpsc::UnboundedSender<KernelUpdate>,
        board: Board,
        envs: EnvCache,
        setups: mpsc::UnboundedSender<SetupDone>,
        http: reqwest::Client,
    ) -> Kernels {
        Kernels {
            node,
            topology,
            data_dir,
            runtime,
            map: BTreeMap::new(),
            events,
            deferred: Vec::new(),
            board,
            envs,
            setups,
            http,
            envs_sent: Vec::new(),
            envs_dirty: true,
            envs_checked: std::time::Instant::now(),
        }
    }

    /// Copies what a scrape needs to the board: a few hundred bytes per kernel, after each
    /// change of the table (the table itself has no lock; see the module doc).
    fn publish(&self) {
        let mut rows: Vec<KernelRow> = self
            .map
            .iter()
            .map(|(key, e)| {
                let state = match (&e.handle, e.stopping) {
                    (None, _) if e.setup.is_some() => "preparing",
                    (None, _) => "finished",
                    (Some(_), true) => "stopping",
                    (Some(_), false) => "running",
                };
                let pid = match (&e.last, &e.handle) {
                    (KernelEvent::Started { pid, .. }, _) if *pid > 0 => *pid,
                    (_, Some(h)) => h.pid,
                    _ => 0,
                };
                KernelRow { key: *key, state, pid }
            })
            .collect();
        for m in &self.deferred {
            if let ManagerMessage::StartKernel { key, .. } = m {
                rows.push(KernelRow { key: *key, state: "waiting", pid: 0 });
            }
        }
        self.board.publish(rows);
    }

    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Takes over the kernels a previous agent process left (found by
    /// [`crate::runtime::Runtime::adopt`]), so `Register` reports them.
    pub fn adopt(&mut self, adopted: Vec<crate::runtime::Adopted>) {
        for a in adopted {
            let mut entry = Entry::new(a.binding, a.event, a.handle);
            entry.env_key = self.adopted_env(a.key);
            self.map.insert(a.key, entry);
        }
        self.publish();
    }

    /// Every kernel not yet forgotten, with its last event, for `Register`.
    pub fn reports(&self) -> Vec<KernelReport> {
        self.map.iter().map(|(key, e)| KernelReport { key: *key, last: e.last.clone() }).collect()
    }

    /// The heartbeat; when `measure`, with what each running kernel used so far (a few cgroup
    /// files per kernel) and how busy each GPU is (NVML, once, on nodes with GPUs).
    pub fn heartbeat(&mut self, measure: bool) -> AgentMessage {
        if !measure {
            return AgentMessage::Heartbeat { at: jiff::Timestamp::now(), usage: Vec::new(), gpus: Vec::new() };
        }
        let gpus = if self.topology.gpus.is_empty() { Vec::new() } else { crate::metrics::sample_gpus() };
        let usage = self.sample(&gpus);
        let gpus = gpus
            .into_iter()
            .map(|g| GpuUse { uuid: g.uuid, utilization: g.utilization, memory_used_bytes: g.memory_used_bytes })
            .collect();
        AgentMessage::Heartbeat { at: jiff::Timestamp::now(), usage, gpus }
    }

    fn sample(&mut self, gpus: &[crate::metrics::GpuSample]) -> Vec<KernelSample> {
        let now = std::time::Instant::now();
        let mut out = Vec::new();
        for (key, e) in self.map.iter_mut() {
            let pid = match (&e.last, &e.handle) {
                (KernelEvent::Started { pid, .. }, Some(_)) if *pid > 0 => *pid,
                (_, Some(h)) if h.pid > 0 => h.pid,
                _ => continue,
            };
            let usage = e.meter.sample(pid, &e.binding, gpus, now);
            if usage.is_known() {
                out.push(KernelSample { key: *key, usage });
            }
        }
        out
    }

    /// Where a stream into kernel `key` goes, as the backend running it says: its main
    /// process, its session, or its container.
    pub fn stream_target(&self, key: KernelKey, attach: bool) -> Result<crate::streams::Target, TargetError> {
        let running = self.map.get(&key).and_then(|e| Some((e, e.handle.as_ref()?)));
        let Some((e, h)) = running.filter(|(e, _)| !e.stopping) else {
            return Err(TargetError::NotRunning { key, node: self.node.clone() });
        };
        let pid = match e.last {
            KernelEvent::Started { pid, .. } if pid > 0 => pid,
            _ => h.pid,
        };
        self.runtime.backend_of(h).target(key, pid, attach)
    }

    /// Sends `signal` now to kernel `key`'s `target` (`scancel --signal`) and logs what it
    /// reached; a kernel not running here gets nothing (the manager only asks for running
    /// ones, so this is a race with its end).
    fn signal(&self, key: KernelKey, signal: u8, target: berth_model::signal::SignalTarget) {
        let log = move |r: crate::runtime::signal_now::Reached| {
            let (name, to) = (berth_model::signal::signal_name(signal), target.describe());
            tracing::info!(?key, batch = r.batch, steps = r.steps, "sent SIG{name} to the {to} (scancel --signal)");
        };
        let running = self.map.get(&key).and_then(|e| Some((e, e.handle.as_ref()?)));
        let Some((e, h)) = running.filter(|(e, _)| !e.stopping) else {
            return tracing::info!(
                ?key,
                "not sending signal {signal}: kernel {}.{} is not running",
                key.job_id,
                key.index
            );
        };
        let pid = match e.last {
            KernelEvent::Started { pid, .. } if pid > 0 => pid,
            _ => h.pid,
        };
        // A process is signalled when the task first runs; a container through its engine.
        let sent = self.runtime.backend_of(h).signal(key, pid, signal, target);
        tokio::spawn(async move { log(sent.await) });
    }

    /// How many kernels still run (or are being set up to).
    pub fn running(&self) -> usize {
        self.map.values().filter(|e| e.live()).count()
    }

    /// Records an event from the runtime (or a kernel's setup) and returns the message
    /// reporting it; `None` for a setup's progress that came after the kernel was stopped.
    pub fn record(&mut self, (key, event): KernelUpdate) -> Option<AgentMessage> {
        if matches!(event, KernelEvent::Preparing { .. }) {
            let e = self.map.get_mut(&key).filter(|e| e.setup.is_some())?;
            e.last = event.clone();
            return Some(AgentMessage::Kernel { key, event });
        }
        // A kernel that ended while its logs could not be written says so (not `exit code 1`).
        let mut event =
            crate::disk::check_end(&self.node, &self.data_dir, &logs::kernel_dir(&self.data_dir, &key), event);
        if let Some(e) = self.map.get_mut(&key) {
            if let KernelEvent::Finished { usage, .. } = &mut event {
                e.handle = None;
                e.setup = None;
                *usage = e.meter.totals(*usage);
                if let Some(env) = e.env_key.take() {
                    self.envs.release(&env);
                    self.envs_dirty = true;
                }
            }
            e.last = event.clone();
        }
        self.publish();
        Some(AgentMessage::Kernel { key, event })
    }

    /// Fences every running kernel (lost contact with the manager); their `Finished` events
    /// (outcome `Fenced`) follow.
    pub fn fence_all(&mut self, message: &str, grace: Duration) {
        for e in self.map.values_mut() {
            if let Some(h) = &e.handle {
                h.fence(message, grace);
                e.stopping = true;
            }
        }
        self.end_setups(KernelOutcome::Fenced, message);
        self.publish();
    }

    /// Stops every running kernel (agent shutdown); their `Finished` events follow.
    pub fn stop_all(&mut self, message: &str, grace: Duration) {
        for e in self.map.values_mut() {
            if let Some(h) = &e.handle {
                h.stop(message, grace);
                e.stopping = true;
            }
        }
        self.end_setups(KernelOutcome::Stopped, message);
        self.publish();
    }

    /// Removes the waiting start of `key`; whether there was one.
    fn take_deferred(&mut self, key: KernelKey) -> bool {
        let before = self.deferred.len();
        self.deferred.retain(|m| !matches!(m, ManagerMessage::StartKernel { key: k, .. } if *k == key));
        self.deferred.len() != before
    }

    /// Tries the waiting starts again (after a kernel ended); returns what to report.
    pub fn retry_deferred(&mut self) -> Vec<AgentMessage> {
        if self.deferred.is_empty() {
            return Vec::new();
        }
        let waiting = std::mem::take(&mut self.deferred);
        waiting.into_iter().flat_map(|m| self.handle(m)).collect()
    }

    /// Carries out one command; returns the answers to send.
    pub fn handle(&mut self, msg: ManagerMessage) -> Vec<AgentMessage> {
        let out = self.carry_out(msg);
        self.publish();
        out
    }

    fn carry_out(&mut self, msg: ManagerMessage) -> Vec<AgentMessage> {
        match msg {
            ManagerMessage::StartKernel { cmd_id, key, spec, binding, env, submitter, folders, code, datasets } => {
                if let Some(e) = self.map.get(&key) {
                    // A replay: report where the kernel is and do nothing else.
                    return vec![AgentMessage::Kernel { key, event: e.last.clone() }];
                }
                if self.deferred.iter().any(|m| matches!(m, ManagerMessage::StartKernel { key: k, .. } if *k == key)) {
                    return Vec::new();
                }
                let live = self.map.values().filter(|e| e.live()).map(|e| &e.binding);
                if let Err(err) = ledger::check(&self.topology, &self.node, &binding, live) {
                    // The manager frees a kernel's devices when it decides to stop it; the
                    // kernel holds them until it has stopped (SIGKILL after the grace). A start
                    // that only clashes with stopping kernels waits for them.
                    let staying = self.map.values().filter(|e| e.live() && !e.stopping).map(|e| &e.binding);
                    if ledger::check(&self.topology, &self.node, &binding, staying).is_ok() {
                        tracing::info!(?key, "start waits for stopping kernels to give back their devices");
                        self.deferred.push(ManagerMessage::StartKernel {
                            cmd_id,
                            key,
                            spec,
                            binding,
                            env,
                            submitter,
                            folders,
                            code,
                            datasets,
                        });
                        return Vec::new();
                    }
                    tracing::warn!(?key, "refusing kernel: {err}");
                    return vec![AgentMessage::CommandFailed { cmd_id, key, error: err.to_string() }];
                }
                let extras = start::Extras { submitter, folders, code, datasets };
                if spec.environment.is_some() || !extras.datasets.is_empty() {
                    return self.start_setup(key, spec, binding, env, extras);
                }
                self.launch(key, &spec, binding, &env, &extras)
            }
            // Stopped before it could start: drop the waiting start.
            ManagerMessage::StopKernel { key, reason, .. }
                if !self.map.contains_key(&key) && self.take_deferred(key) =>
            {
                vec![AgentMessage::Kernel {
                    key,
                    event: KernelEvent::Finished {
                        outcome: KernelOutcome::Stopped,
                        exit_code: None,
                        message: if reason.is_empty() { "stopped before it started".into() } else { reason },
                        at: jiff::Timestamp::now(),
                        usage: None,
                        signal: None,
                    },
                }]
            }
            // Stopped while being set up: it never ran.
            ManagerMessage::StopKernel { key, reason, .. } if self.map.get(&key).is_some_and(|e| e.setup.is_some()) => {
                let message = if reason.is_empty() { "stopped while it was being prepared".into() } else { reason };
                self.end_setup(key, KernelOutcome::Stopped, message)
            }
            ManagerMessage::StopKernel { key, reason, grace_ms, .. } => match self.map.get_mut(&key) {
                None => vec![AgentMessage::Kernel {
                    key,
                    event: KernelEvent::Finished {
                        outcome: KernelOutcome::Stopped,
                        exit_code: None,
                        message: "not running on this node".into(),
                        at: jiff::Timestamp::now(),
                        usage: None,
                        signal: None,
                    },
                }],
                Some(e) => match &e.handle {
                    // Already stopping: the Finished event will come once.
                    Some(_) if e.stopping => Vec::new(),
                    Some(h) => {
                        let message = if reason.is_empty() { "stopped by the manager".to_string() } else { reason };
                        h.stop(message, Duration::from_millis(grace_ms));
                        e.stopping = true;
                        Vec::new()
                    }
                    None => vec![AgentMessage::Kernel { key, event: e.last.clone() }],
                },
            },
            ManagerMessage::Forget { key } => {
                match self.map.get(&key) {
                    Some(e) if e.live() => {
                        tracing::warn!(?key, "manager asked to forget a running kernel; keeping it")
                    }
                    _ => {
                        self.map.remove(&key);
                        self.runtime.sessions().remove(&key);
                    }
                }
                Vec::new()
            }
            ManagerMessage::RemoveEnv { key } => {
                self.remove_env(&key);
                Vec::new()
            }
            ManagerMessage::SignalKernel { key, signal, target } => {
                self.signal(key, signal, target);
                Vec::new()
            }
            // Served by the connection, which dials the stream back (`streams.rs`).
            ManagerMessage::OpenStream { .. } => Vec::new(),
            ManagerMessage::FetchLogs { req_id, key, stream, offset, max_bytes } => {
                let path = logs::log_path(&self.data_dir, &key, stream);
                let chunk = logs::read_log(&path, offset, max_bytes).unwrap_or_else(|e| {
                    tracing::warn!("cannot read `{}`: {e}", path.display());
                    logs::LogChunk { data: Vec::new(), next_offset: offset, found: false }
                });
                vec![AgentMessage::LogData {
                    req_id,
                    data: base64::engine::general_purpose::STANDARD.encode(&chunk.data),
                    next_offset: chunk.next_offset,
                    found: chunk.found,
                }]
            }
            ManagerMessage::Welcome { .. } | ManagerMessage::Refused { .. } => Vec::new(),
        }
    }
}
