//! `berth srun` (and the binary called as `srun`): Slurm's task launcher inside a job, and its
//! options ([`SrunArgs`], read as Slurm reads them: `srun_args.rs`). Inside a running job (`BERTH_JOB_ID` set) it starts the step's tasks over the job's kernels, block
//! by block (tasks 0..k-1 in kernel 0, ...), each a `berth exec` stream opened with the job's
//! step token (`BERTH_STEP_TOKEN`, which opens streams into this job only), in the kernel's
//! cgroup or container and as its user, with the task's variables (`SLURM_PROCID`,
//! `SLURM_LOCALID`, `RANK`, ...) over srun's exported environment. Output comes back to
//! srun's (`srun_io.rs`); srun exits with the worst task's code.
//!
//! Outside a job it asks for one, as Slurm's srun asks for an allocation: that is `berth run`'s,
//! so the `berth` binary does it ([`in_job`] tells which).
//!
//! As in Slurm, a failing task does not stop the others unless `-K/--kill-on-bad-exit`; srun
//! killed (SIGINT, SIGTERM) closes every stream, which kills the tasks.

use std::process::ExitCode;

use berth_client::Client;
use berth_model::stream::{self, CONTROL, ExecRequest, STDERR, STDOUT, StreamEnd};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message;

use crate::error::chain;
pub use crate::srun_args::SrunArgs;
use crate::srun_io::{JobInfo, Outputs, TaskInfo, TaskWriter};
use crate::srun_plan::{exported, layout, task_env};
use crate::{Error, Result};

/// An environment variable, unset when empty.
fn var(k: &str) -> Option<String> {
    std::env::var(k).ok().filter(|v| !v.is_empty())
}

/// The job this runs in (`BERTH_JOB_ID`), if any: srun runs its step there, and asks for a job
/// elsewhere.
pub fn in_job() -> Option<String> {
    var("BERTH_JOB_ID")
}

/// Runs the step `args` ask for in job `job` (the one this runs in, [`in_job`]): its tasks'
/// output goes to srun's own output or to files, and the exit code is the worst task's.
pub async fn run(job: String, args: SrunArgs) -> Result<ExitCode> {
    if args.pty {
        return Err(Error::Usage("--pty is for srun outside a job (it asks for a job with a terminal)".into()));
    }
    let token = var("BERTH_STEP_TOKEN").ok_or_else(|| {
        Error::failed(format!(
            "job {job} has no step token (BERTH_STEP_TOKEN): its manager or its node's agent predates srun"
        ))
    })?;
    let url = var("BERTH_URL")
        .ok_or_else(|| Error::failed(format!("job {job} has no manager address (BERTH_URL) to reach")))?;
    let kernels: u32 = var("BERTH_CLUSTER_SIZE").and_then(|v| v.parse().ok()).unwrap_or(1);
    let default_per_node: u32 = var("SLURM_NTASKS_PER_NODE").and_then(|v| v.parse().ok()).unwrap_or(1);
    let counts =
        layout(kernels, default_per_node, args.ntasks, args.nodes, args.ntasks_per_node).map_err(Error::Usage)?;
    if args.cpu_bind.is_some() && !args.quiet {
        eprintln!("srun: note: --cpu-bind is ignored: the tasks of a kernel share its CPUs");
    }
    let mut base = exported(args.export.as_deref(), std::env::vars()).map_err(Error::Usage)?;
    if let Some(c) = args.cpus_per_task {
        let on_node = var("SLURM_CPUS_ON_NODE").and_then(|v| v.parse().ok());
        fits_cpus(c, &counts, on_node).map_err(Error::Usage)?;
        base.insert("SLURM_CPUS_PER_TASK".into(), c.to_string());
    }
    let command = args.task_command();
    let node_names: Vec<String> =
        var("BERTH_CLUSTER_NODES").map(|n| n.split(',').map(str::to_string).collect()).unwrap_or_default();
    let info = JobInfo {
        id: job.clone(),
        name: var("SLURM_JOB_NAME").unwrap_or_default(),
        user: var("SLURM_JOB_USER").or_else(|| var("USER")).unwrap_or_default(),
        step: next_step(&job, &token),
        array: var("SLURM_ARRAY_JOB_ID")
            .and_then(|a| a.parse().ok())
            .zip(var("SLURM_ARRAY_TASK_ID").and_then(|i| i.parse().ok())),
    };
    let client = Client::new(crate::step_credentials(url, token))?;
    let outputs = Outputs::new(args.label, args.unbuffered, args.output.clone(), args.error.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let (done_tx, done_rx) = tokio::sync::mpsc::unbounded_channel();
    // srun's flag, else the job's (`#SBATCH --gpus-per-task`, passed down by the manager).
    let per_task_gpus = args.gpus_per_task.or_else(|| var("SLURM_GPUS_PER_TASK").and_then(|v| v.parse().ok()));
    let mut rank = 0;
    for (node, count) in counts.iter().enumerate() {
        for local in 0..*count {
            let task = TaskInfo {
                rank,
                node: node as u32,
                node_name: node_names.get(node).cloned().unwrap_or_else(|| node.to_string()),
            };
            let env = task_env(&base, &task, local, &counts, info.step);
            let (out, err) = outputs.for_task(&info, &task)?;
            let gpus = per_task_gpus.map(|g| task_gpus(local, g));
            let req =
                ExecRequest { kernel: node as u32, command: command.clone(), stdin: false, tty: false, env, gpus };
            let (client, path, stop, done) =
                (client.clone(), format!("/v1/jobs/{job}/exec"), stop_rx.clone(), done_tx.clone());
            tokio::spawn(async move {
                let end = run_task(&client, &path, req, (out, err), stop).await;
                let _ = done.send((task, end));
            });
            rank += 1;
        }
    }
    drop(done_tx);
    let kill_on_bad_exit = args.kill_on_bad_exit.is_some_and(|k| k != 0);
    wait_tasks(done_rx, rank, stop_tx, kill_on_bad_exit).await
}

/// Whether `per_task` CPUs for each task of the step laid out as `counts` fit in the job's
/// `on_node` CPUs per node (when known), as Slurm refuses a step bigger than its allocation.
fn fits_cpus(per_task: u32, counts: &[u32], on_node: Option<u32>) -> Result<(), String> {
    let most = counts.iter().copied().max().unwrap_or(1);
    match on_node {
        Some(cpus) if u64::from(per_task) * u64::from(most) > u64::from(cpus) => Err(format!(
            "-c {per_task} for {most} task(s) on a node is {} CPUs, but the job has {cpus} per node: \
             srun runs within the job's allocation; ask for fewer tasks or CPUs per task",
            u64::from(per_task) * u64::from(most)
        )),
        _ => Ok(()),
    }
}

/// The positions among its kernel's GPUs of local task `local` with `per_task` GPUs each.
fn task_gpus(local: u32, per_task: u32) -> Vec<u32> {
    (local * per_task..(local + 1) * per_task).collect()
}

/// Waits for the `ntasks` tasks' ends, says which failed, stops the others on a signal (or
/// with `-K` on a failure), and gives the exit code: the worst task's, or 128 + the signal.
async fn wait_tasks(
    mut done: tokio::sync::mpsc::UnboundedReceiver<(TaskInfo, TaskEnd)>,
    ntasks: u32,
    stop: watch::Sender<bool>,
    kill_on_bad_exit: bool,
) -> Result<ExitCode> {
    let mut worst = 0;
    let mut signalled = None;
    let mut ended = 0;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    while ended < ntasks {
        let (task, end) = tokio::select! {
            d = done.recv() => match d {
                Some(d) => d,
                None => break,
            },
            _ = int.recv() => { signalled = Some(libc::SIGINT); let _ = stop.send(true); continue }
            _ = term.recv() => { signalled = Some(libc::SIGTERM); let _ = stop.send(true); continue }
        };
        ended += 1;
        let code = match end {
            TaskEnd::Exited(0) | TaskEnd::Stopped => 0,
            TaskEnd::Exited(c) => {
                eprintln!("srun: error: {}: task {}: exited with exit code {c}", task.node_name, task.rank);
                c
            }
            TaskEnd::Failed(e) => {
                eprintln!("srun: error: {}: task {}: {e}", task.node_name, task.rank);
                1
            }
        };
        if code != 0 && kill_on_bad_exit && !*stop.borrow() {
            eprintln!("srun: error: task {} failed: stopping the step's other tasks (--kill-on-bad-exit)", task.rank);
            let _ = stop.send(true);
        }
        worst = worst.max(code);
    }
    if let Some(sig) = signalled {
        return Ok(ExitCode::from(128 + sig as u8));
    }
    Ok(ExitCode::from(worst.clamp(0, 255) as u8))
}

/// The step's number in the job: 0, 1, ... in the order the job's sruns start, counted with
/// files created exclusively in the kernel's temp dir (named after the job's token, so jobs
/// of another manager that reuse the id count on their own).
fn next_step(job: &str, token: &str) -> u32 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    token.hash(&mut h);
    let dir = std::env::temp_dir();
    for n in 0..100_000 {
        let p = dir.join(format!(".berth-srun-{job}-{:016x}-{n}", h.finish()));
        match std::fs::OpenOptions::new().write(true).create_new(true).open(&p) {
            Ok(_) => return n,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(_) => return n,
        }
    }
    0
}

/// How a task ended.
enum TaskEnd {
    Exited(i32),
    Failed(String),
    /// srun stopped it (a signal, or another task failed with `-K`).
    Stopped,
}

/// Runs one task as an exec stream and copies its output until it ends or `stop` is set.
async fn run_task(
    client: &Client,
    path: &str,
    req: ExecRequest,
    (mut out, mut err): (TaskWriter, TaskWriter),
    mut stop: watch::Receiver<bool>,
) -> TaskEnd {
    let end: Result<Option<StreamEnd>> = async {
        let ws = client.websocket(path).await?;
        let (mut tx, mut rx) = ws.split();
        let req = serde_json::to_string(&req).map_err(|e| Error::failed(chain(&e)))?;
        tx.send(Message::text(req)).await.map_err(|e| Error::failed(chain(&e)))?;
        loop {
            tokio::select! {
                msg = rx.next() => match msg {
                    Some(Ok(Message::Binary(b))) => match stream::split(&b) {
                        Some((STDOUT, data)) => out.write(data).map_err(cannot_write)?,
                        Some((STDERR, data)) => err.write(data).map_err(cannot_write)?,
                        Some((CONTROL, data)) => return Ok(serde_json::from_slice::<StreamEnd>(data).ok()),
                        _ => {}
                    },
                    Some(Ok(Message::Close(_))) | None => return Ok(None),
                    Some(Err(e)) => return Err(Error::failed(format!("the stream broke: {e}"))),
                    Some(Ok(_)) => {}
                },
                // The `Ref` a wait gives must not live across an await (it is not `Send`).
                _ = async {
                    if stop.wait_for(|s| *s).await.is_err() {
                        std::future::pending::<()>().await;
                    }
                } => {
                    // Closing the stream kills the command in the kernel.
                    let _ = tx.close().await;
                    return Ok(Some(StreamEnd { exit_code: None, error: Some(STOPPED.into()) }));
                }
            }
        }
    }
    .await;
    let _ = (out.finish(), err.finish());
    match end {
        Ok(Some(StreamEnd { error: Some(e), .. })) if e == STOPPED => TaskEnd::Stopped,
        Ok(Some(StreamEnd { exit_code: Some(c), .. })) => TaskEnd::Exited(c),
        Ok(Some(StreamEnd { error: Some(e), .. })) => TaskEnd::Failed(e),
        Ok(_) => TaskEnd::Failed("the stream ended before the task did".into()),
        Err(e) => TaskEnd::Failed(chain(&e)),
    }
}

fn cannot_write(source: std::io::Error) -> Error {
    Error::Io { what: "cannot write the task's output".into(), source }
}

const STOPPED: &str = "stopped by srun";

#[cfg(test)]
mod tests {
    #[test]
    fn a_nodes_tasks_get_disjoint_gpus_in_local_order() {
        assert_eq!(super::task_gpus(0, 1), [0]);
        assert_eq!(super::task_gpus(1, 1), [1]);
        assert_eq!(super::task_gpus(1, 2), [2, 3]);
    }

    #[test]
    fn cpus_per_task_must_fit_the_jobs_cpus_per_node() {
        assert!(super::fits_cpus(2, &[2, 2], Some(4)).is_ok());
        assert!(super::fits_cpus(1, &[1], None).is_ok(), "unknown: the kernel's cgroup decides");
        let e = super::fits_cpus(3, &[2, 1], Some(4)).unwrap_err();
        assert!(e.contains("-c 3 for 2 task(s) on a node is 6 CPUs, but the job has 4"), "{e}");
    }
}
