//! The `docker` backend: kernels of jobs that name an image run as containers through the
//! Docker Engine API, with the same limits, environment, logs and ends as the `process`
//! backend. Podman's service speaks the same API: the `podman` backend ([`super::podman`]) is
//! this one on Podman's socket, with the few differences `Inner::engine` names.
//!
//! A start returns at once; a task creates and starts the container (the image may have to be
//! pulled) and sends `Started` once it runs, or `Finished` (`LaunchFailed` with what failed). Containers
//! carry labels (the agent's scope, the kernel key, the binding, the deadline), so an agent
//! that restarts re-adopts the running ones instead of killing them (`adopt`).

mod body;
mod cache_forward;
mod labels;
mod network;
mod signal;
mod supervise;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use berth_model::protocol::{ContainerInfo, KernelEvent, KernelKey, KernelOutcome};
use berth_model::signal::SignalTarget;
use berth_model::{Binding, JobSpec};
use bollard::query_parameters::{
    CreateContainerOptions, CreateImageOptions, InspectContainerOptions, ListContainersOptions, ListImagesOptions,
    StartContainerOptions,
};
use futures_util::StreamExt;
use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

pub use super::engine_error::EngineError;
pub use body::{check_mounts, container_name, create_body, normalize_image};
pub use labels::{LABEL_JOB, LABEL_NETWORK, LABEL_SCOPE};
pub use network::network_name;

use labels::{LABEL_BINDING, LABEL_CACHE_FORWARD, LABEL_DEADLINE, LABEL_KERNEL};

use super::backend::{BackendKind, Kernel, KernelBackend, StartError};
use super::podman::{self, Engine};
use super::signal_now::Reached;
use super::{KernelHandle, KernelUpdate, RunUser, StopRequest, build_env};
use crate::disk::{FileOp, io_text};
use crate::logs;

/// How the agent runs container jobs (`berth agent --container-runtime`, `--no-docker`,
/// `--allow-mount`, `--pull`).
#[derive(Debug, Clone, Default)]
pub struct DockerOptions {
    pub enabled: bool,
    /// The engine that runs them: Docker, or Podman through its Docker-compatible service.
    pub engine: Engine,
    /// Host paths jobs may mount (read-only unless they ask for `rw`).
    pub allow_mounts: Vec<PathBuf>,
    /// Pull an image a job needs when the node lacks it (from the registries the Docker
    /// daemon is configured with); the node then takes jobs of any image.
    pub pull: bool,
    /// Job networks (several kernels of a job on the node) are Docker `internal` networks:
    /// the kernels reach each other only, not the host or the outside world.
    pub internal_networks: bool,
}

/// What one container is started with.
struct Launch {
    key: KernelKey,
    spec: JobSpec,
    binding: Binding,
    env: BTreeMap<String, String>,
    user: RunUser,
    /// Data folders bound into the container.
    folders: Vec<berth_model::folder::FolderBind>,
}

/// A kernel a previous agent process left, as a backend's `adopt` found it.
pub struct Adopted {
    pub key: KernelKey,
    pub binding: Binding,
    pub event: KernelEvent,
    pub handle: Option<KernelHandle>,
}

/// The docker runtime. Cheap to clone.
#[derive(Clone)]
pub struct Docker {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Docker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Docker").field("scope", &self.inner.scope).finish()
    }
}

struct Inner {
    opts: DockerOptions,
    scope: String,
    node: String,
    data_dir: PathBuf,
    gpu_memory: std::collections::HashMap<String, u64>,
    pids_max: i64,
    stop_grace: Duration,
    fake_gpus: bool,
    networks: network::Networks,
    /// Connected and version-negotiated on first use; a daemon that is down is asked again
    /// next time.
    client: tokio::sync::OnceCell<bollard::Docker>,
}

/// Whether a Docker error is a 404.
fn is_not_found(e: &bollard::errors::Error) -> bool {
    matches!(e, bollard::errors::Error::DockerResponseServerError { status_code: 404, .. })
}

/// A Docker error as a short lowercase sentence.
fn text(e: &bollard::errors::Error) -> String {
    match e {
        bollard::errors::Error::DockerResponseServerError { message, .. } => message.clone(),
        e => e.to_string(),
    }
}

impl Docker {
    pub(super) fn new(opts: &super::RuntimeOptions, scope: String) -> Docker {
        let networks = network::Networks::new(&scope, opts.docker.internal_networks);
        Docker {
            inner: Arc::new(Inner {
                opts: opts.docker.clone(),
                scope,
                node: opts.node.clone(),
                data_dir: opts.data_dir.clone(),
                gpu_memory: opts.gpu_memory.clone(),
                pids_max: opts.pids_max,
                stop_grace: opts.stop_grace,
                fake_gpus: opts.fake_gpus,
                networks,
                client: tokio::sync::OnceCell::new(),
            }),
        }
    }

    /// The scope label value of this agent's containers.
    pub fn scope(&self) -> &str {
        &self.inner.scope
    }

    /// The Engine API client, for a stream into a container (`streams.rs`).
    pub async fn api(&self) -> Result<bollard::Docker, EngineError> {
        self.client().await.cloned()
    }

    async fn client(&self) -> Result<&bollard::Docker, EngineError> {
        if !self.inner.opts.enabled {
            return Err(EngineError::Off);
        }
        self.inner
            .client
            .get_or_try_init(|| async {
                if self.inner.opts.engine == Engine::Podman {
                    return podman::connect(&podman::socket()).await;
                }
                let down = |e: bollard::errors::Error| self.unreachable(&e.to_string());
                let c = bollard::Docker::connect_with_local_defaults().map_err(down)?;
                c.negotiate_version().await.map_err(down)
            })
            .await
    }

    /// Why the engine cannot be used, and how to fix it.
    fn unreachable(&self, why: &str) -> EngineError {
        match self.inner.opts.engine {
            Engine::Docker => EngineError::DockerUnreachable { why: why.to_string() },
            Engine::Podman => podman::unreachable(&podman::socket(), why),
        }
    }

    /// What the node's Docker offers now: whether the daemon answers, and its images.
    pub async fn engine_info(&self) -> ContainerInfo {
        let allow_mounts = self.allow_mounts();
        let down = |error: String| ContainerInfo {
            docker_ok: false,
            error: Some(error),
            images: Vec::new(),
            allow_mounts: allow_mounts.clone(),
        };
        let client = match self.client().await {
            Ok(c) => c,
            Err(e) => return down(e.to_string()),
        };
        let images = match client.list_images(Some(ListImagesOptions::default())).await {
            Ok(list) => list,
            Err(e) => return down(self.unreachable(&text(&e)).to_string()),
        };
        let mut names: Vec<String> = images
            .into_iter()
            .flat_map(|i| i.repo_tags)
            .filter(|t| t != "<none>:<none>")
            .map(|t| normalize_image(podman::listed_image(&t)))
            .collect();
        if self.inner.opts.pull {
            names.push(berth_model::protocol::ANY_IMAGE.to_string());
        }
        names.sort();
        names.dedup();
        ContainerInfo { docker_ok: true, error: None, images: names, allow_mounts }
    }

    /// The mount allow-list as the manager compares job paths with it: each path as given
    /// and, when it differs, with symlinks resolved (the form [`check_mounts`] accepts).
    fn allow_mounts(&self) -> Vec<String> {
        let mut out = Vec::new();
        for a in &self.inner.opts.allow_mounts {
            out.push(a.display().to_string());
            if let Ok(real) = a.canonicalize() {
                out.push(real.display().to_string());
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// Starts a kernel's container in the background; `Started` (or `Finished` when it cannot
    /// start) follows on `events`.
    #[allow(clippy::too_many_arguments)]
    fn start_container(
        &self,
        key: KernelKey,
        spec: &JobSpec,
        binding: &Binding,
        manager_env: &BTreeMap<String, String>,
        events: &mpsc::UnboundedSender<KernelUpdate>,
        user: RunUser,
        folders: &[berth_model::folder::FolderBind],
    ) -> KernelHandle {
        let (stop_tx, stop_rx) = mpsc::unbounded_channel();
        let me = self.clone();
        let env = build_env(&user, spec, binding, manager_env, &self.inner.gpu_memory);
        let (spec, binding, events, folders) = (spec.clone(), binding.clone(), events.clone(), folders.to_vec());
        tokio::spawn(async move {
            me.launch(Launch { key, spec, binding, env, user, folders }, stop_rx, events).await;
        });
        KernelHandle { pid: 0, stop: stop_tx, deferred: true, backend: BackendKind::Container }
    }

    async fn launch(
        self,
        Launch { key, spec, binding, env, user, folders }: Launch,
        mut stop: mpsc::UnboundedReceiver<StopRequest>,
        events: mpsc::UnboundedSender<KernelUpdate>,
    ) {
        let name = container_name(&self.inner.scope, &key);
        let finish = |outcome, message: String| {
            let ev = KernelEvent::Finished {
                outcome,
                exit_code: None,
                message,
                at: jiff::Timestamp::now(),
                usage: None,
                signal: None,
            };
            let _ = events.send((key, ev));
        };
        let network = (spec.kernels > 1).then(|| network_name(&self.inner.scope, &key));
        let created = self.create(&name, key, &spec, &binding, env, &user, network.as_deref(), &folders).await;
        // Lives until the kernel ends: every return below drops it, and with it the listener.
        let (client, held, _forward) = match created {
            Ok(c) => c,
            Err(e) => return finish(KernelOutcome::LaunchFailed, e.to_string()),
        };
        // Removes the container that did not run, and the job network when it was the last.
        let undo = |client: bollard::Docker, held: Option<network::Held>| {
            let (name, network, nets) = (name.clone(), network.clone(), self.inner.networks.clone());
            async move {
                supervise::remove(&client, &name).await;
                if let (Some(n), Some(h)) = (network, held) {
                    nets.release_held(&client, &n, &h).await;
                }
            }
        };
        // A stop that came while the image was pulled or the container created.
        if let Ok(req) = stop.try_recv() {
            undo(client, held).await;
            return finish(req.outcome, req.message);
        }
        if let Err(e) = client.start_container(&name, None::<StartContainerOptions>).await {
            undo(client.clone(), held).await;
            return finish(KernelOutcome::LaunchFailed, format!("cannot start the container: {}", text(&e)));
        }
        // It runs on the network now: another kernel's end no longer removes it.
        drop(held);
        let pid = client
            .inspect_container(&name, None::<InspectContainerOptions>)
            .await
            .ok()
            .and_then(|c| c.state?.pid)
            .unwrap_or(0);
        let _ = events.send((key, KernelEvent::Started { pid: pid as u32, at: jiff::Timestamp::now() }));
        supervise::supervise(supervise::Supervise {
            client,
            name,
            key,
            node: self.inner.node.clone(),
            data_dir: self.inner.data_dir.clone(),
            time_left: spec.time_limit_secs.map(Duration::from_secs),
            grace: self.inner.stop_grace,
            mem_limit: binding.mem_bytes,
            pid: pid as u32,
            stop,
            events,
            network: network.map(|n| (n, self.inner.networks.clone())),
        })
        .await;
    }

    /// Checks mounts, finds (or pulls) the image and creates the container; on a job
    /// `network`, makes sure it exists first and returns with the network lock held (the
    /// caller starts the container, then lets go), and the kernel's way to a loopback dataset
    /// cache ([`cache_forward`]), which must live as long as the kernel.
    #[allow(clippy::too_many_arguments)]
    async fn create(
        &self,
        name: &str,
        key: KernelKey,
        spec: &JobSpec,
        binding: &Binding,
        env: BTreeMap<String, String>,
        user: &RunUser,
        network: Option<&str>,
        folders: &[berth_model::folder::FolderBind],
    ) -> Result<(bollard::Docker, Option<network::Held>, Option<cache_forward::Forward>), EngineError> {
        let dir = logs::kernel_dir(&self.inner.data_dir, &key);
        let node = &self.inner.node;
        let cannot_create = |p: &std::path::Path, e| EngineError::Prepare(io_text(node, FileOp::Create, p, &e));
        std::fs::create_dir_all(&dir).map_err(|e| cannot_create(&dir, e))?;
        for s in [berth_model::protocol::LogStream::Stdout, berth_model::protocol::LogStream::Stderr] {
            let p = logs::log_path(&self.inner.data_dir, &key, s);
            supervise::create_log(&p).map_err(|e| cannot_create(&p, e))?;
        }
        check_mounts(&spec.mounts, &self.inner.opts.allow_mounts, &self.inner.node)?;
        let client = self.client().await?.clone();
        let image = spec.image.clone().unwrap_or_default();
        let inspect = match client.inspect_image(&image).await {
            Err(e) if is_not_found(&e) && self.inner.opts.pull => {
                self.pull(&client, &image).await?;
                client.inspect_image(&image).await
            }
            r => r,
        };
        let inspect = inspect.map_err(|e| {
            if is_not_found(&e) {
                let (node, tool) = (self.inner.node.clone(), self.inner.opts.engine.name());
                EngineError::ImageMissing { image: image.clone(), node, tool }
            } else {
                EngineError::InspectImage { image: image.clone(), why: text(&e) }
            }
        })?;
        let config = inspect.config.unwrap_or_default();
        let (image_user, image_entrypoint) = (config.user, config.entrypoint.unwrap_or_default());
        // Output files are the container's paths, opened in it by its user (`output_files`).
        let output = super::output_files::paths(&key, spec, &env, node)
            .map_err(|e| EngineError::Prepare(e.to_string()))?
            .map(|p| (super::output_files::wrapper_entrypoint(&p, spec.output.open_mode), image_entrypoint));
        let deadline_ms =
            spec.time_limit_secs.map(|s| jiff::Timestamp::now().as_millisecond().saturating_add(s as i64 * 1000));
        let mut inputs = body::Inputs {
            scope: &self.inner.scope,
            key,
            spec,
            binding,
            env,
            user,
            image_user: image_user.as_deref(),
            output,
            pids_max: self.inner.pids_max,
            fake_gpus: self.inner.fake_gpus,
            deadline_ms,
            network,
            cache_forward: None,
            folders,
            ulimits: (self.inner.opts.engine == Engine::Podman).then(podman::ulimits),
        };
        let (held, forward) = match network {
            Some(n) => {
                let held = self.inner.networks.lock().await;
                self.inner.networks.ensure(&client, n, &key, &held).await?;
                let forward = cache_forward::start(&client, n, &mut inputs.env).await;
                inputs.cache_forward = forward.as_ref().map(cache_forward::Forward::label);
                (Some(held), forward)
            }
            None => (None, None),
        };
        let opts = || Some(CreateContainerOptions { name: Some(name.to_string()), ..Default::default() });
        let created = match client.create_container(opts(), create_body(&inputs)).await {
            Ok(_) => Ok(()),
            // A container of this kernel from a start that did not finish: replace it.
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 409, .. }) => {
                supervise::remove(&client, name).await;
                client.create_container(opts(), create_body(&inputs)).await.map(|_| ())
            }
            Err(e) => Err(e),
        };
        match created {
            Ok(()) => Ok((client, held, forward)),
            Err(e) => {
                if let (Some(n), Some(h)) = (network, &held) {
                    self.inner.networks.release_held(&client, n, h).await;
                }
                Err(EngineError::CreateContainer { why: text(&e) })
            }
        }
    }

    async fn pull(&self, client: &bollard::Docker, image: &str) -> Result<(), EngineError> {
        tracing::info!(image, "pulling image");
        let opts = CreateImageOptions { from_image: Some(image.to_string()), ..Default::default() };
        let mut s = client.create_image(Some(opts), None, None);
        while let Some(r) = s.next().await {
            r.map_err(|e| EngineError::Pull { image: image.to_string(), why: text(&e) })?;
        }
        Ok(())
    }

    /// Finds this agent's containers left by a previous agent process: running ones are
    /// supervised again (their `Started` is reported in `Register`, and the manager stops the
    /// ones it does not want); ended ones are read (exit code, OOM, logs), removed and
    /// reported as `Finished`; created-but-never-started ones are removed unreported (the
    /// manager sends their start again).
    async fn adopt_containers(&self, events: &mpsc::UnboundedSender<KernelUpdate>) -> Vec<Adopted> {
        let Ok(client) = self.client().await.cloned() else { return Vec::new() };
        let filters = [("label".to_string(), vec![format!("{}={}", LABEL_SCOPE, self.inner.scope)])].into();
        let opts = ListContainersOptions { all: true, filters: Some(filters), ..Default::default() };
        let list = match client.list_containers(Some(opts)).await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!("cannot list containers of a previous agent: {}", text(&e));
                return Vec::new();
            }
        };
        let mut out = Vec::new();
        for c in list {
            let labels = c.labels.unwrap_or_default();
            let Some(key) = labels.get(LABEL_KERNEL).and_then(|k| body::parse_key(k)) else { continue };
            let name = container_name(&self.inner.scope, &key);
            let binding: Binding =
                labels.get(LABEL_BINDING).and_then(|b| serde_json::from_str(b).ok()).unwrap_or_default();
            let Ok(info) = client.inspect_container(&name, None::<InspectContainerOptions>).await else { continue };
            let state = info.state.unwrap_or_default();
            let now = jiff::Timestamp::now();
            if state.running == Some(true) {
                let deadline: Option<i64> = labels.get(LABEL_DEADLINE).and_then(|d| d.parse().ok());
                let time_left =
                    deadline.map(|d| Duration::from_millis(d.saturating_sub(now.as_millisecond()).max(0) as u64));
                let (stop_tx, stop_rx) = mpsc::unbounded_channel();
                // Its way to the dataset cache, on the address its environment names.
                let forward = match labels.get(LABEL_CACHE_FORWARD) {
                    Some(l) => cache_forward::resume(l).await,
                    None => None,
                };
                let supervised = supervise::supervise(supervise::Supervise {
                    client: client.clone(),
                    name,
                    key,
                    node: self.inner.node.clone(),
                    data_dir: self.inner.data_dir.clone(),
                    time_left,
                    grace: self.inner.stop_grace,
                    mem_limit: binding.mem_bytes,
                    pid: state.pid.unwrap_or(0) as u32,
                    stop: stop_rx,
                    events: events.clone(),
                    network: labels.get(LABEL_NETWORK).map(|n| (n.clone(), self.inner.networks.clone())),
                });
                tokio::spawn(async move {
                    let _forward = forward;
                    supervised.await
                });
                let pid = state.pid.unwrap_or(0) as u32;
                tracing::info!(?key, "re-adopted a running container");
                let handle = KernelHandle { pid, stop: stop_tx, deferred: false, backend: BackendKind::Container };
                out.push(Adopted { key, binding, event: KernelEvent::Started { pid, at: now }, handle: Some(handle) });
            } else if state.started_at.as_deref().is_some_and(|s| !s.starts_with("0001-")) {
                // It ran and ended while no agent watched it.
                if let Err(e) =
                    supervise::copy_logs(client.clone(), name.clone(), self.inner.data_dir.clone(), key, false).await
                {
                    tracing::warn!(?key, "cannot keep the logs of an ended container: {e}");
                }
                let code = state.exit_code.map(|c| c as i32);
                let (outcome, message) =
                    supervise::classify(code, state.oom_killed.unwrap_or(false), binding.mem_bytes);
                supervise::remove(&client, &name).await;
                let event =
                    KernelEvent::Finished { outcome, exit_code: code, message, at: now, usage: None, signal: None };
                out.push(Adopted { key, binding, event, handle: None });
            } else {
                supervise::remove(&client, &name).await;
            }
        }
        // Job networks that no container is on any more (their kernels ended above, or
        // before the previous agent stopped) go; those of re-adopted kernels stay.
        self.inner.networks.prune(&client).await;
        if !out.is_empty() {
            tracing::info!("found {} containers of a previous agent process", out.len());
        }
        out
    }
}

impl KernelBackend for Docker {
    fn name(&self) -> &'static str {
        "docker"
    }

    fn start(&self, k: Kernel<'_>) -> Result<KernelHandle, StartError> {
        Ok(self.start_container(k.key, k.spec, k.binding, k.manager_env, k.events, k.user, k.data.folders))
    }

    fn adopt<'a>(&'a self, events: &'a mpsc::UnboundedSender<KernelUpdate>) -> BoxFuture<'a, Vec<Adopted>> {
        Box::pin(self.adopt_containers(events))
    }

    fn target(
        &self,
        key: KernelKey,
        _pid: u32,
        _attach: bool,
    ) -> Result<crate::streams::Target, crate::streams::TargetError> {
        Ok(crate::streams::Target::Container { name: container_name(&self.inner.scope, &key), docker: self.clone() })
    }

    fn signal(&self, key: KernelKey, _pid: u32, sig: u8, to: SignalTarget) -> BoxFuture<'static, Reached> {
        let (me, name) = (self.clone(), container_name(&self.inner.scope, &key));
        Box::pin(async move { signal::container(&me, &name, sig, to).await })
    }

    fn info(&self) -> BoxFuture<'_, Option<ContainerInfo>> {
        Box::pin(async { Some(self.engine_info().await) })
    }
}
