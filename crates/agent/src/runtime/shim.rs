//! The kernel shim: a small process between the agent and a `process` kernel, so that the
//! kernel outlives a restart of its agent with its exit status intact (the role slurmstepd
//! plays for slurmd, or containerd-shim for containerd).
//!
//! The agent starts `berth kernel-shim STATUS_FD EXIT_FILE PROGRAM ARGS...` in the kernel's
//! session, cgroup, user, directory and environment. The shim starts the program as its only
//! child, tells the agent through `STATUS_FD` whether that worked (so a missing program is still
//! a `launch failed`), waits for it, writes its raw wait status to `EXIT_FILE`, and ends the
//! same way the kernel did (same exit code, or the same signal). While the agent lives it is
//! the shim's parent and sees the kernel's status as the shim's. An agent started later finds
//! the shim by its pid file, watches it, and reads the status from `EXIT_FILE`.
//!
//! The agent signals the kernel's whole process group (SIGTERM, then SIGKILL): the shim blocks
//! the terminating signals so a SIGTERM reaches the kernel and the shim stays to record how it
//! ended; SIGKILL ends both.

use std::ffi::OsString;
use std::io::Write;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;

/// The hidden `berth` subcommand that runs [`shim_main`].
pub const SHIM_SUBCOMMAND: &str = "kernel-shim";

/// The descriptor the agent hands the shim its status pipe on.
pub(super) const STATUS_FD: RawFd = 3;

/// Signals whose default action ends a process and that the agent or a user sends to the
/// kernel's group: the shim ignores them (its child does not).
const BLOCKED: [libc::c_int; 6] =
    [libc::SIGTERM, libc::SIGINT, libc::SIGHUP, libc::SIGQUIT, libc::SIGUSR1, libc::SIGUSR2];

/// What the shim reports on the status pipe: `ok`, or the `errno` of a failed start.
pub(super) fn parse_status(text: &str) -> Result<(), Option<i32>> {
    match text.trim() {
        "ok" => Ok(()),
        t => Err(t.strip_prefix("errno ").and_then(|n| n.parse().ok())),
    }
}

/// Runs the shim (`args` after the subcommand) and never returns.
pub fn shim_main(args: &[OsString]) -> ! {
    let [status_fd, exit_file, program, rest @ ..] = args else {
        eprintln!(
            "berth kernel-shim: usage: berth kernel-shim STATUS_FD EXIT_FILE PROGRAM [ARGS...] (started by the agent)"
        );
        std::process::exit(2)
    };
    let Some(fd) = status_fd.to_str().and_then(|s| s.parse::<RawFd>().ok()).filter(|&fd| fd > 2) else {
        eprintln!("berth kernel-shim: bad status descriptor {status_fd:?}");
        std::process::exit(2)
    };
    // SAFETY: the agent opened this descriptor for the shim; nothing else in it owns it.
    let mut status = unsafe { std::fs::File::from_raw_fd(fd) };
    // The kernel must not inherit the pipe, or the agent would wait for the kernel's end.
    // SAFETY: fcntl on a descriptor this process owns.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    // Without a pre-exec hook std spawns with posix_spawn (no copy of this process), which
    // keeps the signal mask: the kernel starts first, with the mask the shim got (empty).
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest);
    let mut child = match cmd.spawn() {
        Ok(c) => {
            let _ = status.write_all(b"ok\n");
            c
        }
        Err(e) => {
            let _ = writeln!(status, "errno {}", e.raw_os_error().unwrap_or(0));
            std::process::exit(127)
        }
    };
    drop(status);
    // From here the group's SIGTERM is the kernel's alone. A signal in the instant before
    // ends the shim, but it is then the agent's stop, which reaches the kernel too.
    block_signals();
    let raw = match child.wait() {
        Ok(s) => s.into_raw(),
        Err(e) => {
            eprintln!("berth kernel-shim: cannot wait for the kernel: {e}");
            std::process::exit(125)
        }
    };
    record_exit(Path::new(exit_file), raw);
    mirror(std::process::ExitStatus::from_raw(raw))
}

/// Blocks [`BLOCKED`] in this (single-threaded) process.
fn block_signals() {
    // SAFETY: plain signal-set manipulation on local values.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in BLOCKED {
            libc::sigaddset(&mut set, s);
        }
        libc::sigprocmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Writes the raw wait status to the exit file the agent created (and fsyncs it: a machine
/// that crashes right after must not report a different end).
fn record_exit(path: &Path, raw: i32) {
    let written = std::fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| f.write_all(format!("{raw}\n").as_bytes()).and_then(|()| f.sync_all()));
    if let Err(e) = written {
        eprintln!("berth kernel-shim: cannot record the exit status in `{}`: {e}", path.display());
    }
}

/// Ends the shim like its kernel ended: the same exit code, or death by the same signal
/// (without a core dump of the shim).
fn mirror(status: std::process::ExitStatus) -> ! {
    if let Some(code) = status.code() {
        std::process::exit(code)
    }
    let sig = status.signal().unwrap_or(libc::SIGKILL);
    // SAFETY: resetting limits, dispositions and the mask of this process, then raising.
    unsafe {
        let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
        libc::setrlimit(libc::RLIMIT_CORE, &none);
        libc::signal(sig, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::sigprocmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(sig);
    }
    std::process::exit(128 + sig)
}

/// The raw wait status the shim recorded in `path`, once it has.
pub(super) fn read_exit(path: &Path) -> Option<i32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines() {
        assert_eq!(parse_status("ok\n"), Ok(()));
        assert_eq!(parse_status("errno 2\n"), Err(Some(2)));
        assert_eq!(parse_status(""), Err(None), "a shim that died before it could say");
    }

    #[test]
    fn exit_files_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("exit");
        std::fs::write(&p, "").unwrap();
        assert_eq!(read_exit(&p), None, "created empty by the agent: not ended yet");
        record_exit(&p, 3 << 8);
        assert_eq!(read_exit(&p).map(|r| std::process::ExitStatus::from_raw(r).code()), Some(Some(3)));
        record_exit(&p, libc::SIGKILL);
        assert_eq!(read_exit(&p).map(|r| std::process::ExitStatus::from_raw(r).signal()), Some(Some(9)));
    }
}
