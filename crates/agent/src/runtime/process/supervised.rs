//! Process kernels forked by the node's kernel supervisor ([`crate::runtime::supervisor`]): the start
//! (once the agent has prepared dirs, logs, cgroup, user and environment as for a kernel it
//! forks itself), the pass-on of the fencing lease, and the take-over of the kernels an
//! earlier agent process left running.

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use berth_model::protocol::{KernelEvent, KernelKey};
use berth_model::{Binding, JobSpec};
use tokio::sync::mpsc;

use super::Process;
use crate::runtime::backend::{BackendKind, StartError};
use crate::runtime::cgroup::KernelCgroup;
use crate::runtime::supervisor::SpawnRequest;
use crate::runtime::supervisor::client::{SpawnError, Supervisor};
use crate::runtime::{Adopted, KernelHandle, KernelUpdate, LaunchText, RunUser, adopt, stale, warning, watch};

/// What [`Process::start`](crate::runtime::backend::KernelBackend::start) prepared for a kernel the supervisor forks.
pub(super) struct SupervisedKernel<'a> {
    pub key: KernelKey,
    pub spec: &'a JobSpec,
    pub binding: &'a Binding,
    pub dir: &'a Path,
    pub workdir: &'a Path,
    pub user: &'a RunUser,
    pub env: BTreeMap<String, String>,
    pub launch: LaunchText,
    pub private: Option<crate::runtime::private_tmp::PrivateTmpRequest>,
}

impl Process {
    /// Writes the kernel's record (for a later agent), has the supervisor fork it with its log
    /// and cgroup descriptors, and starts its watch.
    pub(super) fn start_supervised(
        &self,
        sup: &Arc<Supervisor>,
        k: SupervisedKernel<'_>,
        stdio: &crate::runtime::session::KernelStdio,
        mut cg: Option<KernelCgroup>,
        events: &mpsc::UnboundedSender<KernelUpdate>,
    ) -> Result<KernelHandle, StartError> {
        let fail = StartError::Prepare;
        let now_ms = jiff::Timestamp::now().as_millisecond();
        let deadline_ms = k.spec.time_limit_secs.map(|t| now_ms.saturating_add((t as i64).saturating_mul(1000)));
        let signal = warning::Warning::of_kernel(k.spec, k.key.index);
        let record = adopt::KernelRecord { key: k.key, binding: k.binding.clone(), deadline_ms, signal };
        let discard = |cg: Option<KernelCgroup>| {
            if let Some(cg) = cg {
                cg.discard();
            }
        };
        if let Err(e) = record.write(k.dir) {
            discard(cg);
            let path = k.dir.join(adopt::RECORD_FILE);
            return Err(fail(crate::disk::io_text(&self.opts.node, crate::disk::FileOp::Write, &path, &e)));
        }
        let name = crate::logs::key_name(&k.key);
        let exit_file = k.dir.join(adopt::EXIT_FILE);
        let procs = cg.as_ref().map(|c| c.procs_fds()).unwrap_or_default();
        let mut fds = vec![stdio.stdout.as_raw_fd(), stdio.stderr.as_raw_fd()];
        fds.extend(stdio.stdin.as_ref().map(|f| f.as_raw_fd()));
        fds.extend(&procs);
        let req = SpawnRequest {
            name: name.clone(),
            program: k.launch.program.clone(),
            args: k.spec.command.get(1..).unwrap_or_default().to_vec(),
            env: k.env.into_iter().collect(),
            cwd: k.workdir.to_path_buf(),
            user: k.user.switch_to(),
            exit_file: exit_file.clone(),
            cgroup_fds: procs.len(),
            private_tmp: k.private,
            stdin: stdio.stdin.is_some(),
            ctty: stdio.ctty,
        };
        let pid = match sup.spawn(req, &fds) {
            Ok(pid) => pid,
            Err(SpawnError::Kernel(e)) => {
                discard(cg);
                return Err(StartError::Exec(k.launch.cannot_run(&e)));
            }
            Err(e) => {
                discard(cg);
                return Err(StartError::Exec(e.to_string()));
            }
        };
        if let Some(c) = cg.as_mut() {
            c.close_procs();
        }
        let start = stale::write_pid_file(k.dir, pid).unwrap_or(0);
        let (stop_tx, stop_rx) = mpsc::unbounded_channel();
        tokio::spawn(watch::watch(watch::Watch {
            key: k.key,
            child: watch::Proc::Watched { pid, start, exit_file, exit: Some(sup.exited(&name)), fenced: false },
            pid,
            cgroup: cg,
            time_limit: k.spec.time_limit_secs.map(Duration::from_secs),
            grace: self.opts.stop_grace,
            mem_limit: k.binding.mem_bytes,
            stop: stop_rx,
            events: events.clone(),
            pid_file: k.dir.join(stale::PID_FILE),
            warning: warning::Warning::new(signal, k.spec.time_limit_secs.map(Duration::from_secs), k.dir),
        }));
        Ok(KernelHandle { pid, stop: stop_tx, deferred: false, backend: BackendKind::Process })
    }

    /// Takes back the terminal of kernel `name` (a `berth run -t` one) from the supervisor,
    /// if it kept one, and serves its session again.
    fn resume_session(&self, key: KernelKey, name: &str) {
        let Some(sup) = &self.supervisor else { return };
        let master = match sup.take_terminal(name) {
            Ok(Some(m)) => m,
            Ok(None) => return,
            Err(e) => return tracing::warn!(kernel = %name, "cannot take the kernel's terminal back: {e}"),
        };
        let path = crate::logs::log_path(&self.opts.data_dir, &key, berth_model::protocol::LogStream::Stdout);
        let log = std::fs::OpenOptions::new().append(true).open(&path);
        match log.and_then(|log| crate::runtime::session::Session::resume(master, log)) {
            Ok(s) => self.sessions.insert(key, s),
            Err(e) => tracing::warn!(kernel = %name, "cannot resume the kernel's session: {e}"),
        }
    }

    /// Takes over the kernels an earlier agent process left running (found when this runtime
    /// was made): each is watched again and reported `Started`; one that ended while no agent
    /// ran reports its recorded end right after. Only the first call finds any.
    pub fn adopt_processes(&self, events: &mpsc::UnboundedSender<KernelUpdate>) -> Vec<Adopted> {
        let left = std::mem::take(&mut *self.left.lock().unwrap_or_else(|e| e.into_inner()));
        let now = jiff::Timestamp::now();
        left.into_iter()
            .map(|k| {
                let name = k.name();
                let cgroup = self.cgroups.as_ref().and_then(|c| c.open(&name, k.record.binding.mem_bytes));
                let (stop_tx, stop_rx) = mpsc::unbounded_channel();
                // A kernel the supervisor still runs reports its end to this agent; any other
                // has ended (its exit file says how) or runs under a kernel shim of an older
                // berth, which writes the file when it ends.
                let exit = self.supervisor.as_ref().filter(|s| s.live().contains(&name)).map(|s| s.exited(&name));
                if exit.is_some() {
                    self.resume_session(k.record.key, &name);
                }
                tracing::info!(kernel = %name, pid = k.pid, "took over a kernel left by a previous agent process");
                let time_limit = k.record.time_left(now.as_millisecond());
                tokio::spawn(watch::watch(watch::Watch {
                    key: k.record.key,
                    child: watch::Proc::Watched {
                        pid: k.pid,
                        start: k.start,
                        exit_file: k.dir.join(adopt::EXIT_FILE),
                        exit,
                        fenced: false,
                    },
                    pid: k.pid,
                    cgroup,
                    time_limit,
                    grace: self.opts.stop_grace,
                    mem_limit: k.record.binding.mem_bytes,
                    stop: stop_rx,
                    events: events.clone(),
                    pid_file: k.dir.join(stale::PID_FILE),
                    warning: warning::Warning::new(k.record.signal, time_limit, &k.dir),
                }));
                Adopted {
                    key: k.record.key,
                    binding: k.record.binding,
                    event: KernelEvent::Started { pid: k.pid, at: now },
                    handle: Some(KernelHandle {
                        pid: k.pid,
                        stop: stop_tx,
                        deferred: false,
                        backend: BackendKind::Process,
                    }),
                }
            })
            .collect()
    }

    /// Passes the agent's fencing lease on to the supervisor: when no agent is connected
    /// `fence_in` from now, it stops the kernels itself. `None`: never (the manager runs in
    /// this process, so nobody requeues while it is down).
    pub fn pass_lease(&self, fence_in: Option<Duration>, grace: Duration) {
        if let Some(s) = &self.supervisor {
            s.lease(fence_in, grace);
        }
    }
}
