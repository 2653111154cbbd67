//! The runtime: starts a node's kernels through its backends ([`backend::KernelBackend`]):
//! [`process`] (a kernel's command run directly, no shell, in its own session, cgroup and
//! user, with stdout/stderr to its log files or the job's output files, [`output_files`]) for
//! jobs without an image, and the node's container backend ([`docker`], or [`podman`] through
//! the same Engine API) for jobs with one.
//!
//! Everything is event-driven: a start returns a [`KernelHandle`] and a task per kernel waits
//! for the exit, the time limit or a stop request, and sends the `Finished` event on the
//! agent's channel.
//!
//! With a supervisor executable (`berth kernel-supervisor`, see [`supervisor`]) kernels are
//! forked by the node's long-lived kernel supervisor, which records their exit statuses, so
//! they outlive the agent and a restarted agent takes them over ([`adopt`]) instead of killing
//! them.

mod adopt;
pub mod backend;
mod cgroup;
pub(crate) mod cgroup_fs;
mod code_copy;
pub mod docker;
pub mod dynmods;
mod engine_error;
pub(crate) mod env;
pub(crate) mod exec;
mod folder_mounts;
pub(crate) mod output_files;
mod podman;
mod private_tmp;
mod process;
pub(crate) mod pty;
pub mod session;
pub(crate) mod signal_now;
mod stale;
pub mod supervisor;
mod user;
pub(crate) mod warning;
mod watch;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use berth_model::code::CodeCopy;
use berth_model::folder::FolderBind;
use berth_model::protocol::{KernelEvent, KernelKey, KernelOutcome};
use berth_model::{Binding, JobSpec, Topology, UnixId};
use tokio::sync::mpsc;

pub use backend::{BackendKind, StartError};
pub use cgroup::{CgroupError, Cgroups};
pub use docker::{Adopted, Docker, DockerOptions};
pub use env::build_env;
pub use podman::{Engine, UnknownEngine};
pub use supervisor::SUBCOMMAND as SUPERVISOR_SUBCOMMAND;
pub use supervisor::server::main as supervisor_main;
pub use user::{BadUserMap, RunUser, UserError, UserMap};

use crate::disk::{FileError, FileOp, errno_text};
use backend::{Kernel, KernelBackend};

/// What a kernel that only holds its node runs (kernels past 0 of a `launch = first` job):
/// nothing but a wait, so that `srun` finds the kernel (its process, cgroup and mounts, or
/// its container) to start tasks in. A shell, which every node and nearly every image has;
/// the sleep runs in the background so that SIGTERM (`docker stop`, where the shell is PID 1
/// and has no default action) ends the wait at once.
pub const HOLD_COMMAND: [&str; 3] =
    ["/bin/sh", "-c", "trap 'exit 0' TERM INT HUP; while :; do sleep 3600 & wait $!; done"];

/// The variable that carries a job's step token (minted by the manager, `srun`'s credential).
pub const STEP_TOKEN_VAR: &str = "BERTH_STEP_TOKEN";

/// Default `pids.max` of a kernel: generous for real work, fatal to fork bombs.
pub const DEFAULT_PIDS_MAX: i64 = 4096;

/// A kernel's event, as the runtime sends it to the agent.
pub type KernelUpdate = (KernelKey, KernelEvent);

/// How to build a runtime.
#[derive(Debug, Clone)]
pub struct RuntimeOptions {
    pub data_dir: PathBuf,
    pub node: String,
    pub run_as: Option<String>,
    /// How kernels of different berth users get different Unix users (root agents).
    pub user_map: UserMap,
    /// GPU memory by uuid, for fractional-GPU memory limits.
    pub gpu_memory: HashMap<String, u64>,
    pub pids_max: i64,
    /// Grace between SIGTERM and SIGKILL when a kernel hits its time limit.
    pub stop_grace: Duration,
    /// Put kernels in cgroups when the machine allows it.
    pub use_cgroups: bool,
    /// On cgroup v1, mount a `favordynmods` hierarchy for fast cgroup joins (`dynmods`).
    pub favor_dynmods: bool,
    /// The `docker` runtime of jobs with an image.
    pub docker: DockerOptions,
    /// The node's GPUs are fake (`--fake-gpus`): containers get no GPU device requests.
    pub fake_gpus: bool,
    /// An executable with the `kernel-supervisor` subcommand (the `berth` binary) that forks
    /// process kernels (see [`supervisor`]); `None`: kernels are the agent's own children,
    /// and an agent started after this one dies kills them instead of taking them over.
    pub shim: Option<PathBuf>,
}

impl RuntimeOptions {
    pub fn from_config(config: &crate::AgentConfig, topology: &Topology) -> RuntimeOptions {
        RuntimeOptions {
            data_dir: config.data_dir.clone(),
            node: config.name.clone(),
            run_as: config.run_as.clone(),
            user_map: config.user_map,
            gpu_memory: topology.gpus.iter().map(|g| (g.uuid.clone(), g.mem_bytes)).collect(),
            pids_max: DEFAULT_PIDS_MAX,
            stop_grace: config.stop_grace,
            use_cgroups: true,
            favor_dynmods: config.favor_dynmods,
            docker: config.docker.clone(),
            fake_gpus: config.fake_gpus.is_some(),
            shim: config.kernel_shim.clone(),
        }
    }
}

/// Starts kernels through the node's backends: processes, and containers for jobs with an
/// image. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Runtime {
    process: Arc<process::Process>,
    /// The node's container backend (Docker, or Podman with `--container-runtime podman`):
    /// the one place that knows which.
    containers: Arc<dyn KernelBackend>,
    /// The manager as this agent reaches it, and the CA file it trusts: handed to kernels
    /// that hold a step token (`BERTH_URL`, `BERTH_CA_FILE`), so `srun` calls back.
    manager: Option<(String, Option<PathBuf>)>,
}

/// A request to stop a running kernel.
#[derive(Debug, Clone)]
pub struct StopRequest {
    /// The `Finished` message (`agent shut down`, the manager's reason, ...).
    pub message: String,
    pub grace: Duration,
    /// `Stopped`, or `Fenced` when the agent stops it because it lost the manager.
    pub outcome: KernelOutcome,
}

/// A running kernel: its pid, the way to stop it and the backend it runs on.
#[derive(Debug, Clone)]
pub struct KernelHandle {
    pub pid: u32,
    stop: mpsc::UnboundedSender<StopRequest>,
    /// The runtime reports `Started` itself once the kernel runs (containers start in the
    /// background); otherwise it runs when `start` returns.
    deferred: bool,
    backend: BackendKind,
}

impl KernelHandle {
    /// Whether `Started` comes later as an event (see the field).
    pub fn deferred(&self) -> bool {
        self.deferred
    }

    /// Which backend runs the kernel.
    pub fn backend(&self) -> BackendKind {
        self.backend
    }

    /// Asks the kernel to stop: SIGTERM to its process group, SIGKILL after `grace`. The
    /// `Finished` event (outcome `Stopped`) follows on the events channel.
    pub fn stop(&self, message: impl Into<String>, grace: Duration) {
        let _ = self.stop.send(StopRequest { message: message.into(), grace, outcome: KernelOutcome::Stopped });
    }

    /// Like [`KernelHandle::stop`], but the kernel ends `Fenced`: the agent lost the manager
    /// and stops its kernels before the manager requeues them elsewhere.
    pub fn fence(&self, message: impl Into<String>, grace: Duration) {
        let _ = self.stop.send(StopRequest { message: message.into(), grace, outcome: KernelOutcome::Fenced });
    }
}

impl Runtime {
    /// Builds the node's backends: processes (run user, data dir, cgroups, kernel supervisor;
    /// a machine without usable cgroups runs kernels without limits, warned once, here) and
    /// the container backend the options name.
    pub fn new(opts: RuntimeOptions) -> anyhow::Result<Runtime> {
        let opts = Arc::new(opts);
        let process = Arc::new(process::Process::new(opts.clone())?);
        let scope = cgroup_scope(&opts.node, &opts.data_dir);
        let containers: Arc<dyn KernelBackend> = match opts.docker.engine {
            Engine::Docker => Arc::new(Docker::new(&opts, scope)),
            Engine::Podman => Arc::new(podman::Podman::new(&opts, scope)),
        };
        Ok(Runtime { process, containers, manager: None })
    }

    /// The manager's URL (several, comma-separated, as the agent was given them) and CA file
    /// to hand kernels that hold a step token.
    pub fn with_manager(mut self, url: String, ca_file: Option<PathBuf>) -> Runtime {
        self.manager = Some((url, ca_file));
        self
    }

    /// `manager_env` with `BERTH_URL` (and `BERTH_CA_FILE`) when it holds a step token: the
    /// address from this node, which the manager cannot know (it may listen on 0.0.0.0).
    fn with_manager_vars<'a>(
        &self,
        manager_env: &'a BTreeMap<String, String>,
    ) -> std::borrow::Cow<'a, BTreeMap<String, String>> {
        match &self.manager {
            Some((url, ca)) if manager_env.contains_key(STEP_TOKEN_VAR) => {
                let mut env = manager_env.clone();
                env.insert("BERTH_URL".into(), url.clone());
                if let Some(ca) = ca {
                    env.insert("BERTH_CA_FILE".into(), ca.to_string_lossy().into_owned());
                }
                std::borrow::Cow::Owned(env)
            }
            _ => std::borrow::Cow::Borrowed(manager_env),
        }
    }

    /// Removes the node's empty cgroup parents (`berth/<node>`, then `berth` if empty) when
    /// the agent stops; kernels still running keep theirs.
    pub fn cleanup(&self) {
        if let Some(c) = &self.process.cgroups {
            c.remove_parents();
        }
    }

    /// The `favordynmods` cgroup mount, when the agent made one.
    pub fn dynmods_mount(&self) -> Option<&Path> {
        self.process.dynmods_mount()
    }

    /// Whether kernels get cgroups on this machine.
    pub fn has_cgroups(&self) -> bool {
        self.process.cgroups.is_some()
    }

    /// Whether process kernels here can get data folders (`--folder`): they are bound in the
    /// kernel's private mount namespace, which only a root agent makes. Sent in `Register`,
    /// so that the manager refuses such jobs at submit instead of their failing at launch.
    pub fn mounts_folders(&self) -> bool {
        self.process.private_tmp.is_some()
    }

    /// Whether those cgroups are on the unified (v2) hierarchy.
    pub fn cgroups_v2(&self) -> bool {
        self.process.cgroups.as_ref().is_some_and(Cgroups::is_v2)
    }

    /// The scope label of this agent's containers (`berth.scope`), as tests find them.
    pub fn container_scope(&self) -> String {
        cgroup_scope(&self.process.opts.node, &self.process.opts.data_dir)
    }

    /// The node's container backend (for its images and state, reported to the manager).
    pub(crate) fn containers(&self) -> Arc<dyn KernelBackend> {
        self.containers.clone()
    }

    /// The backend that runs the kernel of `handle`.
    pub(crate) fn backend_of(&self, handle: &KernelHandle) -> &dyn KernelBackend {
        match handle.backend {
            BackendKind::Process => &*self.process,
            BackendKind::Container => &*self.containers,
        }
    }

    /// The sessions of interactive kernels (`berth run -i/-t`).
    pub fn sessions(&self) -> &session::Sessions {
        &self.process.sessions
    }

    /// The user kernels run as.
    pub fn run_user(&self) -> &RunUser {
        &self.process.user
    }

    /// Starts a kernel on the backend its spec calls for: a container for a job with an
    /// image, a process otherwise. On success the kernel runs (or, for a deferred handle,
    /// starts in the background) and its `Finished` event will arrive on `events`; on failure
    /// the error's text (what failed, e.g. `cannot run ...`) is the `Finished` message of a
    /// `LaunchFailed` kernel.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        &self,
        key: KernelKey,
        spec: &JobSpec,
        binding: &Binding,
        manager_env: &BTreeMap<String, String>,
        submitter: Option<UnixId>,
        data: JobData<'_>,
        events: &mpsc::UnboundedSender<KernelUpdate>,
    ) -> Result<KernelHandle, StartError> {
        let manager_env = &*self.with_manager_vars(manager_env);
        folder_mounts::check_sources(data.folders, &self.process.opts.node).map_err(StartError::refused)?;
        let backend: &dyn KernelBackend = if spec.image.is_some() { &*self.containers } else { &*self.process };
        // A container runs as the owner's uid too (unless the image names a USER).
        let user = self.kernel_user(manager_env, submitter).map_err(StartError::refused)?;
        backend.start(Kernel { key, spec, binding, manager_env, user, data, events })
    }

    /// Takes over the kernels a previous agent process left (containers and processes), so
    /// that `Register` reports them. Only the first call finds any.
    pub async fn adopt(&self, events: &mpsc::UnboundedSender<KernelUpdate>) -> Vec<Adopted> {
        let mut adopted = self.containers.adopt(events).await;
        adopted.extend(self.process.adopt(events).await);
        adopted
    }

    /// Passes the agent's fencing lease on to the kernel supervisor: when no agent is
    /// connected `fence_in` from now, it stops the kernels itself. `None`: never (the manager
    /// runs in this process, so nobody requeues while it is down).
    pub fn pass_lease(&self, fence_in: Option<Duration>, grace: Duration) {
        self.process.pass_lease(fence_in, grace);
    }

    /// Whether kernels are forked by the node's kernel supervisor (and outlive this agent).
    pub fn has_supervisor(&self) -> bool {
        self.process.supervisor.is_some()
    }

    /// What was left of the fencing lease of the agent before this one, if the supervisor
    /// holds one: this agent fences when it runs out before the manager welcomes it.
    pub fn inherited_lease(&self) -> Option<Duration> {
        self.process.supervisor.as_ref().and_then(|s| s.fence_in())
    }
}

/// The child's side of a kernel start, between fork and exec (here or in the supervisor):
/// signals as a fresh login would have them, its own session (so the group signals reach all
/// of it), then its cgroups (writing `0` to each pre-opened `cgroup.procs` moves the caller,
/// before exec, so no fork escapes). Only async-signal-safe calls.
pub(crate) fn child_setup(cgroup_procs: &[std::os::fd::RawFd]) -> std::io::Result<()> {
    // SAFETY: sigemptyset, sigprocmask, signal, setsid and write are async-signal-safe; the
    // descriptors belong to this process.
    unsafe {
        // A blocked or ignored signal survives exec. The supervisor blocks SIGCHLD (it reads
        // it from a signalfd) and Rust ignores SIGPIPE; a kernel with SIGCHLD blocked hangs in
        // its shell's `wait` (dash), one with SIGPIPE ignored never dies of a closed pipe.
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        if libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut()) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // The standard signals (real-time ones are the C library's to manage).
        for sig in 1..32 {
            if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                libc::signal(sig, libc::SIG_DFL);
            }
        }
        if libc::setsid() < 0 {
            return Err(std::io::Error::last_os_error());
        }
        for &fd in cgroup_procs {
            if libc::write(fd, b"0".as_ptr().cast(), 1) < 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(())
}

/// What a launch failure message names: the program, the user it ran as (when the agent
/// switches users) and the work dir.
pub(crate) struct LaunchText {
    program: String,
    as_user: Option<String>,
    workdir: PathBuf,
}

impl LaunchText {
    /// `cannot run ...`. EACCES as another user is mostly the work dir or the
    /// program's directory being closed to that user: name both so the fix is obvious.
    pub(crate) fn cannot_run(&self, e: &std::io::Error) -> String {
        let program = &self.program;
        match &self.as_user {
            Some(user) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                format!("cannot run `{program}` as user {user} in `{}`: {}", self.workdir.display(), errno_text(e))
            }
            _ => format!("cannot run `{program}`: {}", errno_text(e)),
        }
    }
}

impl Runtime {
    /// The Unix user of a kernel: from its owner (`BERTH_USER`, `BERTH_USER_ID` in the
    /// manager's variables) and the Unix user who submitted it, through the user map.
    pub(crate) fn kernel_user(
        &self,
        manager_env: &BTreeMap<String, String>,
        submitter: Option<UnixId>,
    ) -> Result<RunUser, UserError> {
        let name = manager_env.get("BERTH_USER");
        let id = manager_env.get("BERTH_USER_ID").and_then(|i| i.parse::<i64>().ok());
        let owner = name.zip(id).map(|(n, i)| (n.as_str(), i));
        self.process.user.for_owner(self.process.opts.user_map, owner, submitter)
    }
}

/// The data a kernel gets besides its spec: folders to bind, code to copy in.
#[derive(Debug, Clone, Copy, Default)]
pub struct JobData<'a> {
    pub folders: &'a [FolderBind],
    pub code: Option<&'a CodeCopy>,
}

/// The kernel's environment; a user without a home (a mapped uid) gets the kernel's own work
/// dir `own` as HOME.
fn kernel_env(
    user: &RunUser,
    spec: &JobSpec,
    binding: &Binding,
    manager_env: &BTreeMap<String, String>,
    gpu_memory: &HashMap<String, u64>,
    workdir: &std::path::Path,
    own: Option<&std::path::Path>,
) -> BTreeMap<String, String> {
    let mut env = build_env(user, spec, binding, manager_env, gpu_memory);
    let workdir = workdir.to_string_lossy().into_owned();
    if let (true, Some(own)) = (user.home.is_empty(), own) {
        env.insert("HOME".into(), own.to_string_lossy().into_owned());
    }
    // What a shell would say; the submitter's own PWD is never exported.
    env.insert("PWD".into(), workdir);
    env
}

/// Name of the file in a kernel's dir holding its dataset cache token.
const CACHE_TOKEN_FILE: &str = "cache-token";

/// Clients such as PFIO read the cache's bearer token from a file
/// (`PFIO_HTTP_BEARER_TOKEN_PATH`): a kernel given `BERTH_CACHE_TOKEN` also gets it in
/// `<kernel dir>/cache-token` (0600, its user's; no trailing newline, which PFIO would send
/// along), named by `BERTH_CACHE_TOKEN_FILE` and, unless
/// the job set it, `PFIO_HTTP_BEARER_TOKEN_PATH`, so PFIO uses the cache with no setup.
fn write_cache_token(
    node: &str,
    dir: &std::path::Path,
    user: &RunUser,
    env: &mut BTreeMap<String, String>,
) -> Result<(), FileError> {
    let Some(token) = env.get("BERTH_CACHE_TOKEN") else { return Ok(()) };
    let path = dir.join(CACHE_TOKEN_FILE);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, token.as_bytes()));
    written.map_err(|e| FileError::new(node, FileOp::Write, &path, e))?;
    if user.switch {
        let _ = std::os::unix::fs::chown(&path, Some(user.uid), Some(user.gid));
    }
    let path = path.to_string_lossy().into_owned();
    env.entry("PFIO_HTTP_BEARER_TOKEN_PATH".into()).or_insert_with(|| path.clone());
    env.insert("BERTH_CACHE_TOKEN_FILE".into(), path);
    Ok(())
}

/// Kills the process kernels left running in an agent data dir (by their pid files), as an
/// agent stopped without `--stop-jobs` or killed leaves them; returns how many ran. Public for
/// test harnesses that clean up after the agents they stopped.
pub fn kill_kernels_left_in(data_dir: &std::path::Path) -> usize {
    stale::reap_pid_files(&data_dir.join("kernels"), &[])
}

/// The name of this agent's cgroup subtree: the node name plus a stable hash of the data dir,
/// so two agents on one machine (tests, or several `berth up` data dirs) never share kernel
/// cgroups, while a restarted agent finds its own subtree again. Public for test harnesses
/// that clean up after agents they killed.
pub fn cgroup_scope(node: &str, data_dir: &std::path::Path) -> String {
    let dir = data_dir.canonicalize().unwrap_or_else(|_| data_dir.to_path_buf());
    let h = xxhash_rust::xxh3::xxh3_64(dir.as_os_str().as_encoded_bytes());
    format!("{node}-{:08x}", h as u32)
}

/// Whether users other than the owner may traverse every directory from `/` down to `dir`.
fn others_can_traverse(dir: &std::path::Path) -> bool {
    let Ok(dir) = dir.canonicalize() else { return false };
    dir.ancestors().all(|d| std::fs::metadata(d).map(|m| m.permissions().mode() & 0o001 != 0).unwrap_or(false))
}
