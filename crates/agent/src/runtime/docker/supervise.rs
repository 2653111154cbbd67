//! The task that owns one running container: copies its output into the kernel's log files,
//! waits for its end, the time limit or a stop request, reads how it ended (`OOMKilled`, exit
//! code), removes the container and reports `Finished`, like the process runtime's `watch`.

use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use berth_model::format_bytes;
use berth_model::protocol::{KernelEvent, KernelKey, KernelOutcome, LogStream};
use bollard::container::LogOutput;
use bollard::query_parameters::{
    InspectContainerOptions, KillContainerOptions, LogsOptions, RemoveContainerOptions, WaitContainerOptions,
};
use futures_util::StreamExt;
use tokio::sync::mpsc;

use crate::metrics::{CgroupReader, KernelUsage};
use crate::runtime::{KernelUpdate, StopRequest};

pub(super) struct Supervise {
    pub client: bollard::Docker,
    pub name: String,
    pub key: KernelKey,
    /// The node's name, for the reason of a kernel whose logs cannot be written.
    pub node: String,
    pub data_dir: PathBuf,
    /// How long until the time limit, if there is one.
    pub time_left: Option<Duration>,
    pub grace: Duration,
    pub mem_limit: u64,
    /// The container's main process (Docker's `State.Pid`), whose cgroup is sampled; 0: unknown.
    pub pid: u32,
    pub stop: mpsc::UnboundedReceiver<StopRequest>,
    pub events: mpsc::UnboundedSender<KernelUpdate>,
    /// The job network the container is on, removed after it when no other kernel uses it.
    pub network: Option<(String, super::network::Networks)>,
}

enum Why {
    Exited,
    Timeout(u64),
    Stopped(String, KernelOutcome),
}

/// Copies the container's whole output (from its start) into the log files, which are
/// truncated first: a re-adopted container's output is written again from the beginning.
/// Ends when the container stops (the stream is followed), or with the error of the first
/// log file that cannot be created or written (a full disk), which ends the kernel.
pub(super) async fn copy_logs(
    client: bollard::Docker,
    name: String,
    data_dir: PathBuf,
    key: KernelKey,
    follow: bool,
) -> std::io::Result<()> {
    let open = |s| create_log(&crate::logs::log_path(&data_dir, &key, s));
    let (mut out, mut err) = (open(LogStream::Stdout)?, open(LogStream::Stderr)?);
    let opts = LogsOptions { follow, stdout: true, stderr: true, ..Default::default() };
    let mut logs = client.logs(&name, Some(opts));
    while let Some(chunk) = logs.next().await {
        let r = match chunk {
            Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => out.write_all(&message),
            Ok(LogOutput::StdErr { message }) => err.write_all(&message),
            Ok(LogOutput::StdIn { .. }) => Ok(()),
            Err(e) => {
                tracing::debug!(?key, "container log stream ended: {e}");
                break;
            }
        };
        if let Err(e) = r {
            tracing::warn!(?key, "cannot write a container log: {e}");
            return Err(e);
        }
    }
    Ok(())
}

/// Creates (or truncates) a log file readable by the agent only, like a process kernel's: the
/// output of one user's job is not for other users on the node.
pub(super) fn create_log(path: &std::path::Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)
}

pub(super) async fn supervise(mut s: Supervise) {
    let meter = Arc::new(Mutex::new(KernelUsage::default()));
    let sampler = tokio::spawn(sample(s.pid, meter.clone()));
    // The container's output cannot be kept: the kernel ends (its logs would be lost).
    let (log_failed, mut log_error) = tokio::sync::oneshot::channel();
    let copy = copy_logs(s.client.clone(), s.name.clone(), s.data_dir.clone(), s.key, true);
    let logs = tokio::spawn(async move {
        if let Err(e) = copy.await {
            let _ = log_failed.send(e);
        }
    });
    let timer = async {
        match s.time_left {
            Some(d) => tokio::time::sleep(d).await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(timer);
    let why = tokio::select! {
        _ = wait(&s.client, &s.name) => Why::Exited,
        _ = &mut timer => {
            terminate(&s.client, &s.name, s.grace).await;
            // The limit the job asked for (a re-adopted container only has what was left).
            Why::Timeout(s.time_left.unwrap_or_default().as_secs())
        }
        Some(req) = s.stop.recv() => {
            terminate(&s.client, &s.name, req.grace).await;
            Why::Stopped(req.message, req.outcome)
        }
        Ok(e) = &mut log_error => {
            terminate(&s.client, &s.name, s.grace).await;
            Why::Stopped(log_reason(&s.node, &s.data_dir, &e), KernelOutcome::Failed)
        }
    };
    sampler.abort();
    let usage = Some(*meter.lock().expect("meter lock")).filter(|u| u.is_known());
    let why = match why {
        Why::Timeout(_) => Why::Timeout(limit_secs(&s.client, &s.name).await.unwrap_or(0)),
        w => w,
    };
    let state = s.client.inspect_container(&s.name, None::<InspectContainerOptions>).await.ok().and_then(|c| c.state);
    let exit_code = state.as_ref().and_then(|st| st.exit_code).map(|c| c as i32);
    let oom = state.as_ref().and_then(|st| st.oom_killed).unwrap_or(false);
    // The log stream ends with the container; give it a moment to drain its last bytes.
    let _ = tokio::time::timeout(Duration::from_secs(10), logs).await;
    let (outcome, message) = match why {
        Why::Stopped(msg, outcome) => (outcome, msg),
        Why::Timeout(secs) => {
            (KernelOutcome::Timeout, format!("time limit {} exceeded", berth_model::format_duration(secs)))
        }
        Why::Exited => classify(exit_code, oom, s.mem_limit),
    };
    remove(&s.client, &s.name).await;
    if let Some((name, nets)) = &s.network {
        nets.release(&s.client, name).await;
    }
    let event = KernelEvent::Finished { outcome, exit_code, message, at: jiff::Timestamp::now(), usage, signal: None };
    let _ = s.events.send((s.key, event));
}

/// Samples a container's cgroup until aborted, keeping the latest figures in `meter`: Docker
/// removes the cgroup with the container, so what it used in all is the last sample. Often
/// at first (short jobs), then once a second: what a long job uses in its last second is
/// lost, a small share of its total.
async fn sample(pid: u32, meter: Arc<Mutex<KernelUsage>>) {
    let Some(reader) = CgroupReader::for_pid(pid).filter(|_| pid > 0) else { return };
    for n in 0u32.. {
        let now = reader.read();
        if now.is_known() {
            let mut m = meter.lock().expect("meter lock");
            *m = m.merge_later(now);
        }
        tokio::time::sleep(Duration::from_millis(if n < 40 { 250 } else { 1000 })).await;
    }
}

/// Why a kernel whose log could not be written ended.
fn log_reason(node: &str, data_dir: &std::path::Path, e: &std::io::Error) -> String {
    if crate::disk::is_full(e) {
        crate::disk::logs_lost(node, data_dir)
    } else {
        format!("node {node}: cannot write logs under {}: {}", data_dir.display(), crate::disk::errno_text(e))
    }
}

/// How an exited container ended.
pub(super) fn classify(exit_code: Option<i32>, oom: bool, mem_limit: u64) -> (KernelOutcome, String) {
    match exit_code {
        _ if oom => (KernelOutcome::OutOfMemory, format!("out of memory (limit {})", format_bytes(mem_limit))),
        Some(0) => (KernelOutcome::Succeeded, String::new()),
        Some(c) => (KernelOutcome::Failed, format!("exit code {c}")),
        None => (KernelOutcome::Failed, "ended without an exit code (the container is gone)".into()),
    }
}

/// The job's time limit in seconds, from the container's labels (for the message).
async fn limit_secs(client: &bollard::Docker, name: &str) -> Option<u64> {
    let c = client.inspect_container(name, None::<InspectContainerOptions>).await.ok()?;
    c.config?.labels?.get(super::labels::LABEL_LIMIT)?.parse().ok()
}

/// Waits until the container is not running (returns at once if it already stopped).
async fn wait(client: &bollard::Docker, name: &str) {
    let opts = WaitContainerOptions { condition: "not-running".into() };
    let mut w = client.wait_container(name, Some(opts));
    // Non-zero exits come as errors; either way the container stopped, or the daemon is gone
    // (then inspect tells what is known).
    let _ = w.next().await;
}

/// SIGTERM (the init forwards it to the command), SIGKILL after `grace`.
pub(super) async fn terminate(client: &bollard::Docker, name: &str, grace: Duration) {
    let _ = client.kill_container(name, Some(KillContainerOptions { signal: "SIGTERM".into() })).await;
    if tokio::time::timeout(grace, wait(client, name)).await.is_err() {
        let _ = client.kill_container(name, Some(KillContainerOptions { signal: "SIGKILL".into() })).await;
        wait(client, name).await;
    }
}

/// Removes the container (and its anonymous volumes); a missing one is fine.
pub(super) async fn remove(client: &bollard::Docker, name: &str) {
    let opts = RemoveContainerOptions { force: true, v: true, ..Default::default() };
    if let Err(e) = client.remove_container(name, Some(opts)).await
        && !super::is_not_found(&e)
    {
        tracing::warn!("cannot remove container {name}: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ends_are_classified_like_processes() {
        assert_eq!(classify(Some(0), false, 1).0, KernelOutcome::Succeeded);
        assert_eq!(classify(Some(3), false, 1), (KernelOutcome::Failed, "exit code 3".into()));
        assert_eq!(
            classify(Some(137), true, 32 << 20),
            (KernelOutcome::OutOfMemory, "out of memory (limit 32MiB)".into())
        );
    }
}
