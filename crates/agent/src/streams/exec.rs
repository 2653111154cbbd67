//! `berth exec`: a command run inside a kernel, with its output streamed to the client and the
//! client's input (and, on a terminal, window size) streamed in; the client going away kills
//! it. With `tty` the command runs on a pseudo-terminal of its own, as its controlling
//! terminal (processes: a pty the agent opens; containers: Docker's).

use std::collections::BTreeMap;
use std::os::fd::AsRawFd;
use std::process::Stdio;
use std::time::Duration;

use berth_model::stream::{self, STDERR, STDOUT, StreamEnd};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use super::{GONE, failed, pump, relay, resizer};
use crate::dial::Ws;
use crate::runtime::pty;

/// How long output may still come after a command on a terminal has exited (processes it
/// left in the background may hold the terminal open for good).
const AFTER_EXIT: Duration = Duration::from_millis(300);

/// What an exec stream runs: the command, whether input and a terminal come, and variables.
pub(super) struct Exec {
    pub command: Vec<String>,
    pub stdin: bool,
    pub tty: bool,
    pub env: BTreeMap<String, String>,
    /// Only these of the kernel's GPUs, by position (`srun --gpus-per-task`).
    pub gpus: Option<Vec<u32>>,
}

pub(super) async fn process(ws: &mut Ws, pid: u32, exec: Exec) -> StreamEnd {
    let Exec { command, stdin, tty, env, gpus } = exec;
    let ctx = match crate::runtime::exec::KernelContext::of_pid(pid) {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    // Set after the request's variables (which keep none of the device ones): narrower only.
    let narrowed = match &gpus {
        None => None,
        Some(p) => match crate::runtime::env::narrow_gpus(&ctx.var("CUDA_VISIBLE_DEVICES").unwrap_or_default(), p) {
            Ok(v) => Some(v),
            Err(e) => return failed(e),
        },
    };
    let mut cmd = ctx.command(&command, &env);
    if let Some(v) = narrowed {
        cmd.env("CUDA_VISIBLE_DEVICES", v);
    }
    let (tx, rx) = mpsc::channel(8);
    let mut terminal = None;
    if tty {
        let p = match pty::Pty::open() {
            Ok(p) => p,
            Err(e) => return failed(format!("cannot open a terminal: {e}")),
        };
        let ends = (p.slave.try_clone(), p.slave.try_clone(), p.master.try_clone(), p.master.try_clone());
        let (Ok(i), Ok(o), Ok(r), Ok(w)) = ends else {
            return failed("cannot open a terminal: out of descriptors");
        };
        cmd.stdin(Stdio::from(i)).stdout(Stdio::from(o)).stderr(Stdio::from(p.slave));
        // SAFETY: one ioctl between fork and exec (after the context's setsid).
        unsafe {
            cmd.pre_exec(pty::take_ctty);
        }
        match (pty::reader(r), pty::writer(w)) {
            (Ok(r), Ok(w)) => terminal = Some((r, w, p.master)),
            (Err(e), _) | (_, Err(e)) => return failed(format!("cannot open a terminal: {e}")),
        }
    } else {
        cmd.stdin(if stdin { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
    }
    // The spawner drops `cmd` once the child has its ends: ours would keep the terminal open
    // after it exits.
    let mut child = match crate::runtime::exec::spawn(cmd).await {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot run `{}` in the kernel: {e}", command[0])),
    };
    // Its own process group (`child_setup` makes it a session leader): stopped as a whole,
    // and a step of the job while it runs (the warning signal of `--signal` goes to it).
    let group = nix::unistd::Pid::from_raw(child.id().unwrap_or(0) as i32);
    let _step = crate::runtime::warning::Step::register(pid, group.as_raw());
    let ran = match terminal {
        Some((r, w, master)) => {
            tokio::spawn(pump(r, STDOUT, tx));
            let resize = resizer(move |size| {
                let _ = pty::resize(master.as_raw_fd(), size);
                std::future::ready(())
            });
            let relayed = relay(ws, rx, Some(w), Some(resize));
            tokio::pin!(relayed);
            tokio::select! {
                r = &mut relayed => r,
                _ = child.wait() => tokio::time::timeout(AFTER_EXIT, relayed).await.unwrap_or(true),
            }
        }
        None => {
            if let Some(out) = child.stdout.take() {
                tokio::spawn(pump(out, STDOUT, tx.clone()));
            }
            if let Some(err) = child.stderr.take() {
                tokio::spawn(pump(err, STDERR, tx));
            }
            relay(ws, rx, child.stdin.take(), None).await
        }
    };
    if !ran {
        let _ = nix::sys::signal::killpg(group, nix::sys::signal::Signal::SIGKILL);
        let _ = child.wait().await;
        return failed(GONE);
    }
    match child.wait().await {
        Ok(status) => StreamEnd { exit_code: exit_code(status), error: None },
        Err(e) => failed(format!("cannot wait for the command: {e}")),
    }
}

/// 128 + signal for a command killed by one, like a shell.
fn exit_code(status: std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.code().or(status.signal().map(|s| 128 + s))
}

pub(super) async fn container(ws: &mut Ws, docker: &crate::runtime::Docker, name: &str, exec: Exec) -> StreamEnd {
    let Exec { command, stdin, tty, env, gpus } = exec;
    if gpus.is_some() {
        return failed("per-task GPUs (srun --gpus-per-task) are not supported in containers yet: leave it out");
    }
    use bollard::exec::{CreateExecOptions, StartExecResults};
    let api = match docker.api().await {
        Ok(a) => a,
        Err(e) => return failed(e),
    };
    let opts = CreateExecOptions {
        cmd: Some(command.to_vec()),
        attach_stdin: Some(stdin || tty),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        tty: Some(tty),
        env: (!env.is_empty()).then(|| crate::runtime::env::exec_vars(&env).map(|(k, v)| format!("{k}={v}")).collect()),
        ..Default::default()
    };
    let exec = match api.create_exec(name, opts).await {
        Ok(e) => e,
        Err(e) => return failed(format!("cannot exec in container {name}: {e}")),
    };
    let (mut output, input) = match api.start_exec(&exec.id, None).await {
        Ok(StartExecResults::Attached { output, input }) => (output, input),
        Ok(StartExecResults::Detached) => return failed("docker started the command detached"),
        Err(e) => return failed(format!("cannot start `{}` in container {name}: {e}", command[0])),
    };
    // A step of the job while it runs (`scancel --signal` reaches it), by its host pid.
    let pid = api.inspect_exec(&exec.id).await.ok().and_then(|i| i.pid).unwrap_or(0);
    let owner = crate::runtime::warning::StepOwner::Container(name.to_string());
    let _step = crate::runtime::warning::Step::of(owner, i32::try_from(pid).unwrap_or(0));
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        while let Some(Ok(chunk)) = output.next().await {
            let Some(frame) = docker_frame(chunk) else { continue };
            if tx.send(frame).await.is_err() {
                break;
            }
        }
    });
    let resize = tty.then(|| {
        let (api, id) = (api.clone(), exec.id.clone());
        resizer(move |s| {
            let (api, id) = (api.clone(), id.clone());
            async move {
                let opts = bollard::query_parameters::ResizeExecOptionsBuilder::new()
                    .h(s.rows.into())
                    .w(s.cols.into())
                    .build();
                let _ = api.resize_exec(&id, opts).await;
            }
        })
    });
    if !relay(ws, rx, (stdin || tty).then_some(input), resize).await {
        // Docker has no way to stop an exec'd command: its input and output close with us.
        return failed(GONE);
    }
    match api.inspect_exec(&exec.id).await {
        Ok(i) => StreamEnd { exit_code: i.exit_code.map(|c| c as i32), error: None },
        Err(e) => failed(format!("cannot read how the command ended: {e}")),
    }
}

/// A piece of Docker's output as a frame (a terminal's output is one stream, `Console`).
pub(super) fn docker_frame(chunk: bollard::container::LogOutput) -> Option<Vec<u8>> {
    use bollard::container::LogOutput;
    match chunk {
        LogOutput::StdErr { message } => Some(stream::frame(STDERR, &message)),
        LogOutput::StdOut { message } | LogOutput::Console { message } => Some(stream::frame(STDOUT, &message)),
        LogOutput::StdIn { .. } => None,
    }
}
