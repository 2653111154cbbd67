//! Signals sent now to a running kernel (`scancel --signal`, the manager's `SignalKernel`),
//! with the rule of the warning signal ([`super::warning`]): the steps by default, the batch
//! shell (the kernel's main process) alone with `batch`, or the shell's whole process group
//! and the steps with `all` (Slurm's `-f`).
//!
//! This is the process backend's way; a container backend's is its own (`docker/signal.rs`).

use berth_model::signal::SignalTarget;

use super::warning::{StepOwner, signal_steps_of};

/// What a signal reached in one kernel.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Reached {
    pub batch: bool,
    pub steps: usize,
}

/// Sends `sig` to the process kernel whose main process (a session and group leader) is `pid`.
pub(crate) fn process(pid: u32, sig: u8, target: SignalTarget) -> Reached {
    let n = i32::from(sig);
    let main = i32::try_from(pid).unwrap_or(0);
    // SAFETY: plain signals to the kernel's own main process or its group, which the agent
    // started (pid 0 or a negative one would mean the caller's group or every process: refused).
    let batch = main > 0
        && match target {
            SignalTarget::Steps => false,
            SignalTarget::Batch => (unsafe { libc::kill(main, n) }) == 0,
            SignalTarget::All => (unsafe { libc::killpg(main, n) }) == 0,
        };
    let steps = match target {
        SignalTarget::Batch => 0,
        SignalTarget::Steps | SignalTarget::All => signal_steps_of(&StepOwner::Process(pid), n),
    };
    Reached { batch, steps }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::warning::Step;

    fn sleeper() -> std::process::Child {
        let mut c = std::process::Command::new("sleep");
        std::os::unix::process::CommandExt::process_group(&mut c, 0);
        c.arg("30").spawn().unwrap()
    }

    fn killed_by(child: &mut std::process::Child) -> Option<i32> {
        std::os::unix::process::ExitStatusExt::signal(&child.wait().unwrap())
    }

    #[test]
    fn steps_batch_and_all_reach_what_they_say() {
        let (mut main, mut step) = (sleeper(), sleeper());
        let pid = main.id();
        let _s = Step::register(pid, step.id() as i32);
        assert_eq!(process(pid, 0, SignalTarget::Steps), Reached { batch: false, steps: 1 });
        assert_eq!(process(pid, 0, SignalTarget::Batch), Reached { batch: true, steps: 0 });
        assert_eq!(process(pid, libc::SIGUSR1 as u8, SignalTarget::All), Reached { batch: true, steps: 1 });
        assert_eq!(killed_by(&mut main), Some(libc::SIGUSR1));
        assert_eq!(killed_by(&mut step), Some(libc::SIGUSR1));
        assert_eq!(process(0, 9, SignalTarget::All), Reached::default(), "never pid 0");
    }
}
