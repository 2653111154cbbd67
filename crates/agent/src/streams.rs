//! Streams into kernels (`berth exec`, port forwards in `forward`): when the manager sends `OpenStream`, the agent dials
//! the stream back (`/v1/agents/streams/{id}`, join token and the stream's secret), runs the
//! command inside the kernel (`runtime::exec` for processes, `docker exec` for containers),
//! and relays its input and output in `berth_model::stream` frames until it exits; the
//! client going away kills it.

use std::process::Stdio;

use berth_model::protocol::{STREAM_SECRET_HEADER, StreamOpen};
use berth_model::stream::{self, STDERR, STDOUT, StreamEnd};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Message;

use crate::AgentConfig;
use crate::dial::Ws;
use crate::relay::{GONE, Target, failed, pump, relay};

/// Dials stream `id` back and serves it (spawned by the connection; never fails it).
pub(crate) async fn serve(
    config: AgentConfig,
    id: u64,
    secret: String,
    target: Result<Target, String>,
    open: StreamOpen,
) {
    let url = match crate::dial::ws_url(&config.manager_url, &format!("/v1/agents/streams/{id}")) {
        Ok(u) => u,
        Err(e) => return tracing::warn!("cannot open stream {id}: bad manager url {e}"),
    };
    let mut ws = match crate::dial::dial_url(&config, &url, &[(STREAM_SECRET_HEADER, secret.as_str())]).await {
        Ok(ws) => ws,
        Err(e) => return tracing::warn!("cannot open stream {id}: {e}"),
    };
    let end = match (target, open) {
        (Err(e), _) => failed(e),
        (Ok(target), StreamOpen::Forward { target: to }) => crate::forward::serve(&mut ws, target, to).await,
        (Ok(Target::Process { pid }), StreamOpen::Exec { command, stdin }) => {
            exec_process(&mut ws, pid, &command, stdin).await
        }
        (Ok(Target::Container { name, docker }), StreamOpen::Exec { command, stdin }) => {
            exec_container(&mut ws, &docker, &name, &command, stdin).await
        }
    };
    let _ = ws.send(Message::binary(stream::end_frame(&end))).await;
    let _ = ws.close(None).await;
}

async fn exec_process(ws: &mut Ws, pid: u32, command: &[String], stdin: bool) -> StreamEnd {
    let ctx = match crate::runtime::exec::KernelContext::of_pid(pid) {
        Ok(c) => c,
        Err(e) => return failed(e),
    };
    let mut cmd = ctx.command(command);
    cmd.stdin(if stdin { Stdio::piped() } else { Stdio::null() }).stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = match crate::runtime::exec::spawn(cmd).await {
        Ok(c) => c,
        Err(e) => return failed(format!("cannot run `{}` in the kernel: {e}", command[0])),
    };
    // Its own process group (`child_setup` makes it a session leader): stopped as a whole.
    let group = nix::unistd::Pid::from_raw(child.id().unwrap_or(0) as i32);
    let (tx, rx) = mpsc::channel(8);
    if let Some(out) = child.stdout.take() {
        tokio::spawn(pump(out, STDOUT, tx.clone()));
    }
    if let Some(err) = child.stderr.take() {
        tokio::spawn(pump(err, STDERR, tx));
    }
    if !relay(ws, rx, child.stdin.take()).await {
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

async fn exec_container(
    ws: &mut Ws,
    docker: &crate::runtime::Docker,
    name: &str,
    command: &[String],
    stdin: bool,
) -> StreamEnd {
    use bollard::exec::{CreateExecOptions, StartExecResults};
    let api = match docker.api().await {
        Ok(a) => a,
        Err(e) => return failed(e),
    };
    let opts = CreateExecOptions {
        cmd: Some(command.to_vec()),
        attach_stdin: Some(stdin),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
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
    let (tx, rx) = mpsc::channel(8);
    tokio::spawn(async move {
        while let Some(Ok(chunk)) = output.next().await {
            let (channel, bytes) = match chunk {
                bollard::container::LogOutput::StdErr { message } => (STDERR, message),
                bollard::container::LogOutput::StdOut { message }
                | bollard::container::LogOutput::Console { message } => (STDOUT, message),
                bollard::container::LogOutput::StdIn { .. } => continue,
            };
            if tx.send(stream::frame(channel, &bytes)).await.is_err() {
                break;
            }
        }
    });
    if !relay(ws, rx, stdin.then_some(input)).await {
        // Docker has no way to stop an exec'd command: its input and output close with us.
        return failed(GONE);
    }
    match api.inspect_exec(&exec.id).await {
        Ok(i) => StreamEnd { exit_code: i.exit_code.map(|c| c as i32), error: None },
        Err(e) => failed(format!("cannot read how the command ended: {e}")),
    }
}
