//! The `process` runtime (DESIGN.md §8): runs a kernel's command directly (no shell) in its own
//! session, cgroup and user, with stdout/stderr to its log files (or the job's output files,
//! [`output_files`]), and reports its end.
//!
//! Everything is event-driven: `start` forks synchronously (the `Started` event is ready when
//! it returns) and a task per kernel waits for the exit, the time limit or a stop request, and
//! sends the `Finished` event on the agent's channel.
//!
//! With a supervisor executable (`berth kernel-supervisor`, see [`supervisor`]) kernels are
//! forked by the node's long-lived kernel supervisor, which records their exit statuses, so
//! they outlive the agent and a restarted agent takes them over ([`adopt`]) instead of killing
//! them.

mod adopt;
mod cgroup;
pub(crate) mod cgroup_fs;
mod code_copy;
pub mod docker;
pub mod dynmods;
pub(crate) mod env;
pub(crate) mod exec;
mod folder_mounts;
pub(crate) mod output_files;
mod private_tmp;
pub(crate) mod pty;
pub mod session;
pub(crate) mod signal_now;
mod stale;
mod supervised;
pub mod supervisor;
mod user;
pub(crate) mod warning;
mod watch;

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use berth_model::code::CodeCopy;
use berth_model::folder::FolderBind;
use berth_model::protocol::{KernelEvent, KernelKey, KernelOutcome};
use berth_model::{Binding, JobSpec, Topology, UnixId};
use tokio::sync::mpsc;

pub use cgroup::{CgroupError, Cgroups};
pub use docker::{Adopted, Docker, DockerOptions};
pub use env::build_env;
pub use supervisor::SUBCOMMAND as SUPERVISOR_SUBCOMMAND;
pub use supervisor::server::main as supervisor_main;
pub use user::{RunUser, UserError, UserMap};

use crate::disk::{FileOp, errno_text, io_text};
use crate::logs;
use supervised::SupervisedKernel;

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

/// Starts kernels. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Runtime {
    opts: std::sync::Arc<RuntimeOptions>,
    user: RunUser,
    cgroups: Option<Cgroups>,
    /// Where default work dirs go: `<data_dir>/kernels`, or a world-traversable base under
    /// the temp dir when the run user cannot reach the data dir (e.g. `berth up` as root in
    /// `/root/project`, whose `/root` is 0700).
    work_base: PathBuf,
    docker: Docker,
    /// Each kernel's own `/dev/shm` and `/tmp` (root agents; see [`private_tmp`]).
    private_tmp: Option<private_tmp::PrivateTmp>,
    /// Kernels an earlier agent process left running, until [`Runtime::adopt_processes`].
    left: std::sync::Arc<std::sync::Mutex<Vec<adopt::LeftKernel>>>,
    /// The node's kernel supervisor, which forks process kernels (see [`supervisor`]).
    supervisor: Option<std::sync::Arc<supervisor::client::Supervisor>>,
    /// The `favordynmods` cgroup mount (cgroup v1, see [`dynmods`]).
    dynmods: Option<std::sync::Arc<dynmods::FavorDynmods>>,
    /// The input and output of interactive kernels (`berth run -i/-t`), for `berth attach`.
    sessions: session::Sessions,
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

/// A running kernel: its pid and the way to stop it.
#[derive(Debug, Clone)]
pub struct KernelHandle {
    pub pid: u32,
    stop: mpsc::UnboundedSender<StopRequest>,
    /// The runtime reports `Started` itself once the kernel runs (containers start in the
    /// background); otherwise it runs when `start` returns.
    deferred: bool,
}

impl KernelHandle {
    /// Whether `Started` comes later as an event (see the field).
    pub fn deferred(&self) -> bool {
        self.deferred
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
    /// Resolves the run user, prepares the data dir and finds the cgroup hierarchy. A machine
    /// without usable cgroups runs kernels without limits (warned once, here).
    pub fn new(opts: RuntimeOptions) -> anyhow::Result<Runtime> {
        let user = RunUser::resolve(opts.run_as.as_deref())?;
        let kernels = opts.data_dir.join("kernels");
        std::fs::create_dir_all(&kernels).map_err(|e| anyhow::anyhow!("cannot create `{}`: {e}", kernels.display()))?;
        // Nobody else lists or changes the data dir or the kernels' dirs; when kernels run as
        // other users they must reach their own dir below it: traversal only.
        let mode = if user.switch { 0o711 } else { 0o700 };
        for d in [&opts.data_dir, &kernels] {
            let _ = std::fs::set_permissions(d, std::fs::Permissions::from_mode(mode));
        }
        let cgroups = if opts.use_cgroups {
            match Cgroups::detect(&cgroup_scope(&opts.node, &opts.data_dir)) {
                Ok(c) => {
                    tracing::info!(v2 = c.is_v2(), "kernels run in cgroups");
                    Some(c)
                }
                Err(e) => {
                    tracing::warn!("cgroups unavailable ({e}): kernels run WITHOUT cpu, memory and pids limits");
                    None
                }
            }
        } else {
            None
        };
        let work_base = if user.switch && !others_can_traverse(&kernels) {
            let base = std::env::temp_dir().join(format!("berth-work-{}", cgroup_scope(&opts.node, &opts.data_dir)));
            std::fs::create_dir_all(&base).map_err(|e| anyhow::anyhow!("cannot create `{}`: {e}", base.display()))?;
            let _ = std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o711));
            tracing::info!(
                "user {} cannot reach `{}`; default work dirs go to `{}`",
                user.name,
                kernels.display(),
                base.display()
            );
            base
        } else {
            kernels.clone()
        };
        // The supervisor first: a kernel that ends from now on is reported to this agent, one
        // that ended before has its exit file written.
        let supervisor = match &opts.shim {
            Some(exe) if tokio::runtime::Handle::try_current().is_ok() => {
                match supervisor::client::Supervisor::connect_or_start(&opts.data_dir, exe) {
                    Ok(s) => Some(std::sync::Arc::new(s)),
                    Err(e) => {
                        tracing::warn!(
                            "cannot start the kernel supervisor ({e}): kernels run as the agent's children and end with it"
                        );
                        None
                    }
                }
            }
            _ => None,
        };
        // Kernels of an earlier agent process with this data dir: those with a record are
        // taken over (`adopt_processes`); nobody can supervise the others, so they are killed.
        let left = adopt::find(&kernels);
        let keep_cgroups: Vec<String> = left.iter().map(adopt::LeftKernel::name).collect();
        let keep_dirs: Vec<PathBuf> = left.iter().map(|k| k.dir.clone()).collect();
        let stale =
            cgroups.as_ref().map_or(0, |c| c.reap_stale(&keep_cgroups)) + stale::reap_pid_files(&kernels, &keep_dirs);
        if stale > 0 {
            tracing::warn!("killed {stale} kernels left running by a previous agent process");
        }
        tracing::info!("kernels run as {}", user.describe(opts.user_map));
        let docker = Docker::new(&opts, cgroup_scope(&opts.node, &opts.data_dir));
        let left = std::sync::Arc::new(std::sync::Mutex::new(left));
        let private_tmp = private_tmp::PrivateTmp::detect();
        if private_tmp.is_none() {
            folder_mounts::warn_cannot_mount(&opts.node);
        }
        let dynmods = match &cgroups {
            Some(c) if !c.is_v2() && opts.favor_dynmods => dynmods::FavorDynmods::enable().map(Into::into),
            _ => None,
        };
        Ok(Runtime {
            opts: std::sync::Arc::new(opts),
            user,
            cgroups,
            work_base,
            docker,
            private_tmp,
            left,
            supervisor,
            dynmods,
            sessions: session::Sessions::default(),
            manager: None,
        })
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
        if let Some(c) = &self.cgroups {
            c.remove_parents();
        }
    }

    /// The `favordynmods` cgroup mount, when the agent made one.
    pub fn dynmods_mount(&self) -> Option<&Path> {
        self.dynmods.as_deref().map(dynmods::FavorDynmods::path)
    }

    /// Whether kernels get cgroups on this machine.
    pub fn has_cgroups(&self) -> bool {
        self.cgroups.is_some()
    }

    /// Whether process kernels here can get data folders (`--folder`): they are bound in the
    /// kernel's private mount namespace, which only a root agent makes. Sent in `Register`,
    /// so that the manager refuses such jobs at submit instead of their failing at launch.
    pub fn mounts_folders(&self) -> bool {
        self.private_tmp.is_some()
    }

    /// Whether those cgroups are on the unified (v2) hierarchy.
    pub fn cgroups_v2(&self) -> bool {
        self.cgroups.as_ref().is_some_and(Cgroups::is_v2)
    }

    /// The `docker` runtime (jobs with an image).
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// The sessions of interactive kernels (`berth run -i/-t`).
    pub fn sessions(&self) -> &session::Sessions {
        &self.sessions
    }

    /// The user kernels run as.
    pub fn run_user(&self) -> &RunUser {
        &self.user
    }

    /// Starts a kernel. On success the process runs and its `Finished` event will arrive on
    /// `events`; on failure the returned message (what failed, e.g. `cannot run ...`) is the `Finished`
    /// message of a `LaunchFailed` kernel.
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
    ) -> Result<KernelHandle, String> {
        let manager_env = &*self.with_manager_vars(manager_env);
        let folders = data.folders;
        folder_mounts::check_sources(folders, &self.opts.node)?;
        if spec.image.is_some() {
            // The container runs as the owner's uid too (unless the image names a USER).
            let user = self.kernel_user(manager_env, submitter).map_err(|e| e.to_string())?;
            return Ok(self.docker.start(key, spec, binding, manager_env, events, user, folders));
        }
        if !folders.is_empty() && self.private_tmp.is_none() {
            return Err(format!(
                "node {} cannot mount folders into process kernels: that needs a private mount namespace, which \
                 needs the agent to run as root; run the agent as root, or the job in a container (--image)",
                self.opts.node
            ));
        }
        folder_mounts::make_targets(folders, &self.opts.node)?;
        let name = logs::key_name(&key);
        let dir = logs::kernel_dir(&self.opts.data_dir, &key);
        let fail = |what: String| what;
        let user = self.kernel_user(manager_env, submitter).map_err(fail)?;
        let user = &user;
        let Some(program) = spec.command.first() else { return Err(fail("empty command".into())) };
        let node = &self.opts.node;
        let mkdir =
            |d: &std::path::Path| std::fs::create_dir_all(d).map_err(|e| fail(io_text(node, FileOp::Create, d, &e)));
        // The kernel's own work dir: where it runs without a workdir, and HOME for a user
        // without one (a mapped uid), whatever directory it runs in.
        let own = if spec.workdir.is_none() || user.home.is_empty() {
            // Metadata operations are the slow part of a start on small VMs: one mkdir -p
            // makes both the kernel dir and its own work dir.
            let w = if self.work_base == dir.parent().unwrap_or(&dir) {
                dir.join("work")
            } else {
                mkdir(&dir)?;
                self.work_base.join(&name)
            };
            mkdir(&w)?;
            if user.switch {
                // Only its owner may enter: kernels of other users run as other uids.
                let _ = std::os::unix::fs::chown(&w, Some(user.uid), Some(user.gid));
                let _ = std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o700));
            }
            Some(w)
        } else {
            mkdir(&dir)?;
            None
        };
        let workdir = match (&spec.workdir, &own) {
            (Some(w), _) => {
                if !std::path::Path::new(w).is_dir() {
                    // By default a job runs where it was submitted: a directory only the
                    // submitting machine has is the common cause.
                    return Err(fail(format!(
                        "working directory `{w}` is not a directory on node {node}: submit from a directory \
                         the nodes share (this machine or a shared file system), pass --workdir, or \
                         --job-dir for a directory of the job's own"
                    )));
                }
                PathBuf::from(w)
            }
            (None, Some(own)) => own.clone(),
            (None, None) => return Err(fail("no working directory".into())),
        };
        if let (Some(code), Some(own)) = (data.code, &own) {
            let owner = user.switch.then_some((user.uid, user.gid));
            code_copy::materialize(code, own, owner, node).map_err(fail)?;
        }
        if user.switch {
            // Other users' kernels may pass through to their own dirs, never list or read here.
            let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o711));
        }
        let open_log = |stream| {
            let p = logs::log_path(&self.opts.data_dir, &key, stream);
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(&p)
                .map_err(|e| fail(io_text(node, FileOp::Create, &p, &e)))
        };
        let stdout = open_log(berth_model::protocol::LogStream::Stdout)?;
        let stderr = open_log(berth_model::protocol::LogStream::Stderr)?;
        // The job's own output files (`--output`, `--error`), opened as its user; its logs stay empty.
        let (stdout, stderr) = match output_files::paths(&key, spec, manager_env, node).map_err(fail)? {
            Some(paths) => {
                let files = output_files::open(&paths, spec.output.open_mode, &workdir, user, node).map_err(fail)?;
                (files.stdout.unwrap_or(stdout), files.stderr.unwrap_or(stderr))
            }
            None => (stdout, stderr),
        };
        // The main kernel of a `berth run -i/-t` job talks through a session the agent holds.
        let (stdio, session) = if spec.interactive() && key.index == 0 {
            let (stdio, s) = session::KernelStdio::session(spec.tty, stdout, stderr)
                .map_err(|e| fail(format!("cannot open the job's terminal or pipes: {e}")))?;
            (stdio, Some(s))
        } else {
            (session::KernelStdio::logs(stdout, stderr), None)
        };

        let mut cg = match &self.cgroups {
            Some(c) => match c.create(&name, binding, self.opts.pids_max) {
                Ok(cg) => Some(cg),
                Err(e) => return Err(fail(format!("cgroup: {e}"))),
            },
            None => None,
        };

        // With private mounts the child switches to the kernel's user itself, after mounting.
        // The job's Python environment (`VIRTUAL_ENV`, set by the agent) may lie under /tmp too.
        let venv = manager_env.get("VIRTUAL_ENV").map(std::path::Path::new);
        let keep: Vec<&std::path::Path> =
            [Some(dir.as_path()), Some(workdir.as_path()), own.as_deref(), venv].into_iter().flatten().collect();
        let private = self.private_tmp.as_ref().map(|p| p.request(binding.mem_bytes, &keep, folders));
        let mut env = kernel_env(user, spec, binding, manager_env, &self.opts.gpu_memory, &workdir, own.as_deref());
        write_cache_token(node, &dir, user, &mut env).map_err(fail)?;
        let launch = LaunchText {
            program: program.clone(),
            as_user: user.switch.then(|| user.name.clone()),
            workdir: workdir.clone(),
        };
        if let Some(sup) = &self.supervisor {
            let kernel =
                SupervisedKernel { key, spec, binding, dir: &dir, workdir: &workdir, user, env, launch, private };
            let started = self.start_supervised(sup, kernel, &stdio, cg, events);
            if let (Ok(_), Some(s)) = (&started, session) {
                // The terminal outlives this agent, for the next one to take back.
                if let Some(Err(e)) = s.terminal().map(|m| sup.keep_terminal(&name, m)) {
                    tracing::warn!(kernel = %name, "the kernel supervisor cannot keep the terminal: {e}");
                }
                self.sessions.insert(key, s);
            }
            return started;
        }
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(&spec.command[1..])
            .env_clear()
            .envs(env)
            .current_dir(&workdir)
            .stdin(stdio.stdin.map(std::process::Stdio::from).unwrap_or_else(std::process::Stdio::null))
            .stdout(stdio.stdout)
            .stderr(stdio.stderr)
            // The watch task owns the child; if the agent dies the kernel must live on.
            .kill_on_drop(false);
        let fds = cg.as_ref().map(|c| c.procs_fds()).unwrap_or_default();
        // The child switches user itself (groups, gid, uid), then enters the work dir as that
        // user, after any private mounts.
        let private = private_tmp::child_plan(private.as_ref(), user.switch_to().as_ref(), &workdir).map_err(fail)?;
        let ctty = stdio.ctty;
        // SAFETY: between fork and exec only async-signal-safe calls (setsid, ioctl, write,
        // and the mounts and user switch of `Plan::enter`).
        unsafe {
            cmd.pre_exec(move || {
                child_setup(&fds)?;
                if ctty {
                    pty::take_ctty()?;
                }
                // In the cgroup first, so that the private mounts' pages are charged to it.
                if let Some(p) = &private {
                    p.enter()?;
                }
                Ok(())
            })
        };
        let child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                if let Some(cg) = cg {
                    cg.discard();
                }
                return Err(launch.cannot_run(&e));
            }
        };
        if let Some(c) = cg.as_mut() {
            c.close_procs();
        }
        // The child has its ends now: ours would keep its terminal or pipes open.
        drop(cmd);
        if let Some(s) = session {
            self.sessions.insert(key, s);
        }
        let pid = child.id().unwrap_or(0);
        let _ = stale::write_pid_file(&dir, pid);
        let (stop_tx, stop_rx) = mpsc::unbounded_channel();
        tokio::spawn(watch::watch(watch::Watch {
            key,
            child: watch::Proc::Child(child),
            pid,
            cgroup: cg,
            time_limit: spec.time_limit_secs.map(Duration::from_secs),
            grace: self.opts.stop_grace,
            mem_limit: binding.mem_bytes,
            stop: stop_rx,
            events: events.clone(),
            pid_file: dir.join(stale::PID_FILE),
            warning: warning::Warning::new(
                warning::Warning::of_kernel(spec, key.index),
                spec.time_limit_secs.map(Duration::from_secs),
                &dir,
            ),
        }));
        Ok(KernelHandle { pid, stop: stop_tx, deferred: false })
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
    ) -> Result<RunUser, String> {
        let name = manager_env.get("BERTH_USER");
        let id = manager_env.get("BERTH_USER_ID").and_then(|i| i.parse::<i64>().ok());
        let owner = name.zip(id).map(|(n, i)| (n.as_str(), i));
        self.user.for_owner(self.opts.user_map, owner, submitter)
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
) -> Result<(), String> {
    let Some(token) = env.get("BERTH_CACHE_TOKEN") else { return Ok(()) };
    let path = dir.join(CACHE_TOKEN_FILE);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut f| std::io::Write::write_all(&mut f, token.as_bytes()));
    written.map_err(|e| io_text(node, FileOp::Write, &path, &e))?;
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
