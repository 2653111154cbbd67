//! The task that owns one running kernel: waits for its exit, enforces the time limit (and
//! sends the warning signal before it, [`super::warning`]), carries out stop requests,
//! classifies the end and cleans up the cgroup.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use berth_model::format_bytes;
use berth_model::protocol::{KernelEvent, KernelKey, KernelOutcome};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use tokio::sync::mpsc;

use super::cgroup::KernelCgroup;
use super::{KernelUpdate, StopRequest};

/// The process the watch waits for: the agent's own child, or a kernel another process is
/// the parent of (the kernel supervisor, or the shim of an older berth; see `adopt`).
pub(super) enum Proc {
    Child(tokio::process::Child),
    Watched {
        pid: u32,
        /// Its start time (pid files), so a reused pid does not count as the kernel.
        start: u64,
        exit_file: std::path::PathBuf,
        /// The supervisor's report of its end; `None` (or once the supervisor is gone): the
        /// end is seen by polling and read from `exit_file`.
        exit: Option<tokio::sync::oneshot::Receiver<super::supervisor::client::Exit>>,
        /// The supervisor stopped it while no agent was there (see `supervisor`).
        fenced: bool,
    },
}

impl Proc {
    async fn wait(&mut self) -> std::io::Result<std::process::ExitStatus> {
        match self {
            Proc::Child(c) => c.wait().await,
            Proc::Watched { pid, start, exit_file, exit, fenced } => {
                if let Some(rx) = exit {
                    match rx.await {
                        Ok(e) => {
                            *fenced = e.fenced;
                            return Ok(std::process::ExitStatus::from_raw(e.raw));
                        }
                        Err(_) => *exit = None,
                    }
                }
                let (status, f) = super::adopt::wait(*pid, *start, exit_file).await?;
                *fenced = f;
                Ok(status)
            }
        }
    }

    fn fenced(&self) -> bool {
        matches!(self, Proc::Watched { fenced: true, .. })
    }
}

pub(super) struct Watch {
    pub key: KernelKey,
    pub child: Proc,
    pub pid: u32,
    pub cgroup: Option<KernelCgroup>,
    pub time_limit: Option<Duration>,
    /// Grace between SIGTERM and SIGKILL at the time limit.
    pub grace: Duration,
    pub mem_limit: u64,
    pub stop: mpsc::UnboundedReceiver<StopRequest>,
    pub events: mpsc::UnboundedSender<KernelUpdate>,
    /// `<kernel dir>/pid`, removed once the kernel's processes are gone.
    pub pid_file: std::path::PathBuf,
    /// The signal due before the time limit (`--signal`), sent once.
    pub warning: Option<super::warning::Warning>,
}

enum Why {
    Exited,
    Timeout(u64),
    Stopped(String, KernelOutcome),
}

pub(super) async fn watch(mut w: Watch) {
    let pgid = Pid::from_raw(w.pid as i32);
    let timer = async {
        match w.time_limit {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    let warn = async {
        match &w.warning {
            Some(warning) => tokio::time::sleep(warning.due).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(timer, warn);
    let mut warned = false;
    let (status, why) = loop {
        tokio::select! {
            s = w.child.wait() => break (s, Why::Exited),
            _ = &mut timer => {
                let secs = w.time_limit.unwrap_or_default().as_secs();
                break (terminate(&mut w.child, pgid, w.grace).await, Why::Timeout(secs));
            }
            Some(req) = w.stop.recv() => {
                break (terminate(&mut w.child, pgid, req.grace).await, Why::Stopped(req.message, req.outcome));
            }
            _ = &mut warn, if !warned => {
                warned = true;
                if let Some(warning) = &w.warning {
                    warning.send(w.pid);
                }
            }
        }
    };
    // The session leader is gone; its group and any daemons it left in the cgroup go too.
    let _ = killpg(pgid, Signal::SIGKILL);
    let (exit_code, signal) = match &status {
        Ok(s) => (s.code().or(s.signal().map(|sig| 128 + sig)), s.signal()),
        Err(_) => (None, None),
    };
    let oom = w.cgroup.as_ref().is_some_and(|cg| match cg.oom_kills() {
        Some(n) => n > 0,
        // Old v1 kernels count no OOM kills: a SIGKILL after hitting the limit is the OOM killer.
        None => signal == Some(libc::SIGKILL) && cg.limit_hit(),
    });
    // Read once everything in it is gone, before it is removed: the counters then cover all
    // that ran in it (v1 memory peaks and v2 CPU include what exited long ago).
    let usage = match &w.cgroup {
        Some(cg) => {
            cg.kill_remaining().await;
            Some(cg.usage()).filter(|u| u.is_known())
        }
        None => None,
    };
    let (outcome, message) = match (why, &status) {
        (Why::Stopped(msg, outcome), _) => (outcome, msg),
        (Why::Timeout(secs), _) => {
            (KernelOutcome::Timeout, format!("time limit {} exceeded", berth_model::format_duration(secs)))
        }
        (Why::Exited, _) if w.child.fenced() => {
            (KernelOutcome::Fenced, "fenced: no agent was there when its lease ran out".to_string())
        }
        (Why::Exited, _) if oom => {
            (KernelOutcome::OutOfMemory, format!("out of memory (limit {})", format_bytes(w.mem_limit)))
        }
        (Why::Exited, Err(e)) => (KernelOutcome::Failed, format!("cannot wait for the kernel: {e}")),
        (Why::Exited, Ok(s)) => match (s.code(), s.signal()) {
            (Some(0), _) => (KernelOutcome::Succeeded, String::new()),
            (Some(c), _) => (KernelOutcome::Failed, format!("exit code {c}")),
            (None, Some(sig)) => (KernelOutcome::Failed, format!("killed by signal {sig} ({})", signal_name(sig))),
            (None, None) => (KernelOutcome::Failed, "ended without an exit code".into()),
        },
    };
    // Its processes are gone (kill_remaining emptied the cgroup), so the kernel is over: one
    // removal try now, and a cgroup the kernel still holds busy for a moment (v1 memory
    // cgroups linger briefly after their last task) is removed in the background rather
    // than delaying the Finished report, which frees the kernel's devices for the next job.
    let mut cgroup = w.cgroup;
    let clean = match cgroup.as_mut() {
        Some(cg) => cg.remove(Duration::ZERO).await,
        None => true,
    };
    let _ = std::fs::remove_file(&w.pid_file);
    let event = KernelEvent::Finished { outcome, exit_code, message, at: jiff::Timestamp::now(), usage, signal };
    let _ = w.events.send((w.key, event));
    let Some(mut cg) = cgroup.filter(|_| !clean) else { return };
    if !cg.remove(Duration::from_secs(120)).await {
        tracing::warn!("cannot remove kernel cgroups {:?}: still busy", cg.dirs());
    }
}

/// SIGTERM to the group, SIGKILL after `grace` if the leader is still there.
async fn terminate(child: &mut Proc, pgid: Pid, grace: Duration) -> std::io::Result<std::process::ExitStatus> {
    let _ = killpg(pgid, Signal::SIGTERM);
    tokio::select! {
        s = child.wait() => s,
        _ = tokio::time::sleep(grace) => {
            let _ = killpg(pgid, Signal::SIGKILL);
            child.wait().await
        }
    }
}

fn signal_name(sig: i32) -> &'static str {
    Signal::try_from(sig).map(|s| s.as_str()).unwrap_or("unknown signal")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_print_by_name() {
        assert_eq!(signal_name(9), "SIGKILL");
    }
}
