//! The `process` backend: runs a kernel's command directly (no shell) in its own session,
//! cgroup and user, with stdout/stderr to its log files (or the job's output files,
//! [`super::output_files`]), forked by the node's kernel supervisor when there is one
//! ([`supervised`]) or by the agent itself.
//!
//! `start` forks synchronously (the `Started` event is ready when it returns) and a task per
//! kernel ([`super::watch`]) waits for the exit, the time limit or a stop request, and sends
//! the `Finished` event on the agent's channel.

mod supervised;

use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_model::protocol::KernelKey;
use berth_model::signal::SignalTarget;
use futures_util::future::BoxFuture;
use tokio::sync::mpsc;

use self::supervised::SupervisedKernel;
use super::backend::{BackendKind, Kernel, KernelBackend, StartError};
use super::signal_now::{self, Reached};
use super::{
    Adopted, Cgroups, KernelHandle, KernelUpdate, LaunchText, RunUser, RuntimeOptions, adopt, cgroup_scope,
    child_setup, code_copy, dynmods, folder_mounts, kernel_env, others_can_traverse, output_files, private_tmp, pty,
    session, stale, supervisor, warning, watch, write_cache_token,
};
use crate::disk::{FileOp, io_text};
use crate::logs;

/// The process backend: the node's run user, cgroups, private mounts and kernel supervisor.
#[derive(Debug)]
pub(crate) struct Process {
    pub(super) opts: Arc<RuntimeOptions>,
    pub(super) user: RunUser,
    pub(super) cgroups: Option<Cgroups>,
    /// Where default work dirs go: `<data_dir>/kernels`, or a world-traversable base under
    /// the temp dir when the run user cannot reach the data dir (e.g. `berth up` as root in
    /// `/root/project`, whose `/root` is 0700).
    work_base: PathBuf,
    /// Each kernel's own `/dev/shm` and `/tmp` (root agents; see [`private_tmp`]).
    pub(super) private_tmp: Option<private_tmp::PrivateTmp>,
    /// Kernels an earlier agent process left running, until [`Process::adopt_processes`].
    pub(super) left: Mutex<Vec<adopt::LeftKernel>>,
    /// The node's kernel supervisor, which forks process kernels (see [`supervisor`]).
    pub(super) supervisor: Option<Arc<supervisor::client::Supervisor>>,
    /// The `favordynmods` cgroup mount (cgroup v1, see [`dynmods`]).
    pub(super) dynmods: Option<Arc<dynmods::FavorDynmods>>,
    /// The input and output of interactive kernels (`berth run -i/-t`), for `berth attach`.
    pub(super) sessions: session::Sessions,
}

impl Process {
    /// Resolves the run user, prepares the data dir, finds the cgroup hierarchy and the
    /// kernels an earlier agent left. A machine without usable cgroups runs kernels without
    /// limits (warned once, here).
    pub(super) fn new(opts: Arc<RuntimeOptions>) -> anyhow::Result<Process> {
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
                    Ok(s) => Some(Arc::new(s)),
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
        let private_tmp = private_tmp::PrivateTmp::detect();
        if private_tmp.is_none() {
            folder_mounts::warn_cannot_mount(&opts.node);
        }
        let dynmods = match &cgroups {
            Some(c) if !c.is_v2() && opts.favor_dynmods => dynmods::FavorDynmods::enable().map(Into::into),
            _ => None,
        };
        Ok(Process {
            opts,
            user,
            cgroups,
            work_base,
            private_tmp,
            left: Mutex::new(left),
            supervisor,
            dynmods,
            sessions: session::Sessions::default(),
        })
    }

    /// The favordynmods mount, when the agent made one.
    pub(super) fn dynmods_mount(&self) -> Option<&Path> {
        self.dynmods.as_deref().map(dynmods::FavorDynmods::path)
    }

    /// Prepares the kernel (dirs, logs or output files, cgroup, environment) and forks it.
    fn start_process(&self, kernel: Kernel<'_>) -> Result<KernelHandle, StartError> {
        let Kernel { key, spec, binding, manager_env, data, events, .. } = kernel;
        let folders = data.folders;
        if !folders.is_empty() && self.private_tmp.is_none() {
            return Err(StartError::Refused(format!(
                "node {} cannot mount folders into process kernels: that needs a private mount namespace, which \
                 needs the agent to run as root; run the agent as root, or the job in a container (--image)",
                self.opts.node
            )));
        }
        folder_mounts::make_targets(folders, &self.opts.node).map_err(StartError::prepare)?;
        let name = logs::key_name(&key);
        let dir = logs::kernel_dir(&self.opts.data_dir, &key);
        let user = &kernel.user;
        let Some(program) = spec.command.first() else { return Err(StartError::Refused("empty command".into())) };
        let node = &self.opts.node;
        let mkdir = |d: &std::path::Path| {
            std::fs::create_dir_all(d).map_err(|e| StartError::prepare(io_text(node, FileOp::Create, d, &e)))
        };
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
                    return Err(StartError::Refused(format!(
                        "working directory `{w}` is not a directory on node {node}: submit from a directory \
                         the nodes share (this machine or a shared file system), pass --workdir, or \
                         --job-dir for a directory of the job's own"
                    )));
                }
                PathBuf::from(w)
            }
            (None, Some(own)) => own.clone(),
            (None, None) => return Err(StartError::prepare("no working directory")),
        };
        if let (Some(code), Some(own)) = (data.code, &own) {
            let owner = user.switch.then_some((user.uid, user.gid));
            code_copy::materialize(code, own, owner, node).map_err(StartError::prepare)?;
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
                .map_err(|e| StartError::prepare(io_text(node, FileOp::Create, &p, &e)))
        };
        let stdout = open_log(berth_model::protocol::LogStream::Stdout)?;
        let stderr = open_log(berth_model::protocol::LogStream::Stderr)?;
        // The job's own output files (`--output`, `--error`), opened as its user; its logs stay empty.
        let (stdout, stderr) = match output_files::paths(&key, spec, manager_env, node).map_err(StartError::prepare)? {
            Some(paths) => {
                let files = output_files::open(&paths, spec.output.open_mode, &workdir, user, node)
                    .map_err(StartError::prepare)?;
                (files.stdout.unwrap_or(stdout), files.stderr.unwrap_or(stderr))
            }
            None => (stdout, stderr),
        };
        // The main kernel of a `berth run -i/-t` job talks through a session the agent holds.
        let (stdio, session) = if spec.interactive() && key.index == 0 {
            let (stdio, s) = session::KernelStdio::session(spec.tty, stdout, stderr)
                .map_err(|e| StartError::prepare(format!("cannot open the job's terminal or pipes: {e}")))?;
            (stdio, Some(s))
        } else {
            (session::KernelStdio::logs(stdout, stderr), None)
        };

        let mut cg = match &self.cgroups {
            Some(c) => match c.create(&name, binding, self.opts.pids_max) {
                Ok(cg) => Some(cg),
                Err(e) => return Err(StartError::prepare(format!("cgroup: {e}"))),
            },
            None => None,
        };

        // With private mounts the child switches to the kernel's user itself, after mounting.
        // The job's Python environment (`VIRTUAL_ENV`, set by the agent) may lie under /tmp too.
        let mut env = kernel_env(user, spec, binding, manager_env, &self.opts.gpu_memory, &workdir, own.as_deref());
        let venv = manager_env.get("VIRTUAL_ENV").map(std::path::Path::new);
        let seen = private_tmp::seen_on_host(spec, &env, (user.uid, user.gid, &user.groups));
        let keep: Vec<&std::path::Path> = [Some(dir.as_path()), Some(workdir.as_path()), own.as_deref(), venv]
            .into_iter()
            .flatten()
            .chain(seen.iter().map(PathBuf::as_path))
            .collect();
        let private = self.private_tmp.as_ref().map(|p| p.request(binding.mem_bytes, &keep, folders));
        write_cache_token(node, &dir, user, &mut env).map_err(StartError::prepare)?;
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
        let private = private_tmp::child_plan(private.as_ref(), user.switch_to().as_ref(), &workdir)
            .map_err(StartError::prepare)?;
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
                return Err(StartError::Exec(launch.cannot_run(&e)));
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
        Ok(KernelHandle { pid, stop: stop_tx, deferred: false, backend: BackendKind::Process })
    }
}

impl KernelBackend for Process {
    fn name(&self) -> &'static str {
        "process"
    }

    fn start(&self, kernel: Kernel<'_>) -> Result<KernelHandle, StartError> {
        self.start_process(kernel)
    }

    fn adopt<'a>(&'a self, events: &'a mpsc::UnboundedSender<KernelUpdate>) -> BoxFuture<'a, Vec<Adopted>> {
        Box::pin(std::future::ready(self.adopt_processes(events)))
    }

    fn target(
        &self,
        key: KernelKey,
        pid: u32,
        attach: bool,
    ) -> Result<crate::streams::Target, crate::streams::TargetError> {
        if attach {
            return self
                .sessions
                .get(&key)
                .map(crate::streams::Target::Session)
                .ok_or(crate::streams::TargetError::NoSession { key });
        }
        if pid == 0 {
            return Err(crate::streams::TargetError::NoProcess { key });
        }
        Ok(crate::streams::Target::Process { pid })
    }

    fn signal(&self, _key: KernelKey, pid: u32, sig: u8, to: SignalTarget) -> BoxFuture<'static, Reached> {
        Box::pin(std::future::ready(signal_now::process(pid, sig, to)))
    }
}
