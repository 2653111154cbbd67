//! The warning signal before a kernel's time limit (Slurm's `--signal`, a [`SignalSpec`]) and
//! the job steps it goes to.
//!
//! A step is a command that `srun` (or `berth exec`) started in the kernel through an exec
//! stream: a process group of its own (`runtime::exec`), registered here under the kernel's
//! main pid while it runs. As in Slurm, the signal goes to every step's process group but not
//! to the kernel's main process, the batch shell (a shell without a `trap` would die of it);
//! with `B:` it goes to the main process alone, not to its children. A job with no step
//! running when the signal is due gets nothing, as in Slurm.
//!
//! The registry lives in the agent's memory: steps are the agent's children and die with it
//! (their parent-death signal), so an agent that takes kernels over finds none, while a `B:`
//! signal still reaches the kernels it took over (the kernel record keeps the spec). A mark
//! file in the kernel dir, written when the signal goes, keeps a later agent from sending it
//! again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use berth_model::SignalSpec;
use berth_model::signal::signal_name;

/// Written in the kernel dir once the warning signal went.
const SENT_FILE: &str = "signalled";

/// Whose steps: a process kernel's, by its main pid, or a container's, by its name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum StepOwner {
    Process(u32),
    Container(String),
}

/// The steps running in each kernel: process groups in a process kernel; in a container, the
/// host pid of each exec'd command (Docker gives it no group of its own that we know of).
static STEPS: Mutex<BTreeMap<StepOwner, Vec<i32>>> = Mutex::new(BTreeMap::new());

fn steps() -> std::sync::MutexGuard<'static, BTreeMap<StepOwner, Vec<i32>>> {
    STEPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A step running in a kernel, registered until dropped (when its stream ends).
pub(crate) struct Step {
    owner: StepOwner,
    id: i32,
}

impl Step {
    /// Registers process group `group` as a step of the kernel whose main pid is `kernel`.
    pub(crate) fn register(kernel: u32, group: i32) -> Step {
        Step::of(StepOwner::Process(kernel), group)
    }

    /// Registers `id` (a group, or a container's command's pid) as a step of `owner`.
    pub(crate) fn of(owner: StepOwner, id: i32) -> Step {
        steps().entry(owner.clone()).or_default().push(id);
        Step { owner, id }
    }
}

impl Drop for Step {
    fn drop(&mut self) {
        let mut all = steps();
        if let Some(ids) = all.get_mut(&self.owner) {
            ids.retain(|g| *g != self.id);
            if ids.is_empty() {
                all.remove(&self.owner);
            }
        }
    }
}

/// Sends signal `sig` to the process group of every step running in the kernel whose main pid
/// is `kernel`; returns how many groups it reached.
pub(crate) fn signal_steps(kernel: u32, sig: i32) -> usize {
    signal_steps_of(&StepOwner::Process(kernel), sig)
}

/// Sends `sig` to every step of `owner` (a process kernel's groups, a container's commands);
/// returns how many it reached.
pub(crate) fn signal_steps_of(owner: &StepOwner, sig: i32) -> usize {
    let ids = steps().get(owner).cloned().unwrap_or_default();
    // SAFETY: plain signals to processes the agent started (one already gone fails with
    // ESRCH and is not counted).
    let send = |id: i32| match owner {
        StepOwner::Process(_) => unsafe { libc::killpg(id, sig) },
        StepOwner::Container(_) => unsafe { libc::kill(id, sig) },
    };
    ids.iter().filter(|id| **id > 0 && send(**id) == 0).count()
}

/// A kernel's warning signal, due some time after its watch starts.
#[derive(Debug, Clone)]
pub(super) struct Warning {
    pub spec: SignalSpec,
    /// From the watch's start until it is due.
    pub due: Duration,
    sent_file: PathBuf,
}

impl Warning {
    /// The signal the kernel gets before its limit: the job's, where its main process may get
    /// it (a `B:` signal does not go to a kernel that only holds its node for `srun`).
    pub fn of_kernel(spec: &berth_model::JobSpec, index: u32) -> Option<SignalSpec> {
        spec.signal.filter(|s| !(s.batch_only && spec.holds_only(index)))
    }

    /// The warning of the kernel in `dir` with `time_left` until its limit; `None` without a
    /// signal or a limit, or once it went (an earlier agent sent it).
    pub fn new(spec: Option<SignalSpec>, time_left: Option<Duration>, dir: &Path) -> Option<Warning> {
        let (spec, left) = (spec?, time_left?);
        let sent_file = dir.join(SENT_FILE);
        if sent_file.exists() {
            return None;
        }
        let due = left.saturating_sub(Duration::from_secs(spec.before_secs.into()));
        Some(Warning { spec, due, sent_file })
    }

    /// Sends it: to the main process `pid` alone (`B:`), or to the kernel's steps. Marks it
    /// sent either way, so that it goes once.
    pub fn send(&self, pid: u32) {
        let sig = i32::from(self.spec.signal);
        let name = signal_name(self.spec.signal);
        if self.spec.batch_only {
            // SAFETY: a plain signal to the kernel's own main process, which the watch waits for.
            let sent = pid > 0 && unsafe { libc::kill(pid as i32, sig) } == 0;
            tracing::info!(pid, sent, "sent SIG{name} to the batch shell before the time limit (--signal)");
        } else {
            let n = signal_steps(pid, sig);
            tracing::info!(pid, steps = n, "sent SIG{name} to the job's steps before the time limit (--signal)");
        }
        if let Err(e) = std::fs::write(&self.sent_file, name) {
            tracing::warn!("cannot write {}: {e}", self.sent_file.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(s: &str) -> Option<SignalSpec> {
        Some(s.parse().unwrap())
    }

    #[test]
    fn due_counts_back_from_the_limit_and_goes_once() {
        let dir = tempfile::tempdir().unwrap();
        let left = Some(Duration::from_secs(60));
        assert_eq!(Warning::new(spec("USR1@55"), left, dir.path()).unwrap().due, Duration::from_secs(5));
        assert_eq!(Warning::new(spec("USR1@90"), left, dir.path()).unwrap().due, Duration::ZERO);
        assert!(Warning::new(None, left, dir.path()).is_none());
        assert!(Warning::new(spec("USR1"), None, dir.path()).is_none(), "no limit, nothing to count back from");
        // A kernel with no steps running: nothing to reach, only the mark.
        let w = Warning::new(spec("USR1@55"), left, dir.path()).unwrap();
        w.send(u32::MAX);
        assert!(Warning::new(spec("USR1@55"), left, dir.path()).is_none(), "sent already");
    }

    #[test]
    fn batch_signals_skip_holding_kernels() {
        let mut job = berth_model::JobSpec::command(["/bin/true"]);
        job.launch = berth_model::Launch::First;
        job.signal = spec("B:USR1");
        assert_eq!(Warning::of_kernel(&job, 0), job.signal);
        assert_eq!(Warning::of_kernel(&job, 1), None);
        job.signal = spec("USR2");
        assert_eq!(Warning::of_kernel(&job, 1), job.signal, "steps run in holding kernels too");
    }

    #[test]
    fn steps_are_signalled_by_group_while_registered() {
        let mut child = std::process::Command::new("sleep");
        std::os::unix::process::CommandExt::process_group(&mut child, 0);
        let mut child = child.arg("30").spawn().unwrap();
        let group = child.id() as i32;
        let kernel = u32::MAX - 7;
        let step = Step::register(kernel, group);
        assert_eq!(signal_steps(kernel, 0), 1);
        drop(step);
        assert_eq!(signal_steps(kernel, 0), 0, "a step whose stream ended is not signalled");
        let _step = Step::register(kernel, group);
        assert_eq!(signal_steps(kernel, libc::SIGUSR2), 1);
        let status = child.wait().unwrap();
        assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(libc::SIGUSR2));
    }
}
