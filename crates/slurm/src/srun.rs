//! `berth srun` (and the binary called as `srun`): Slurm's task launcher inside a job, and its
//! flags ([`SrunArgs`]). Inside a
//! running job (`BERTH_JOB_ID` set) it starts the step's tasks over the job's kernels, block
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
use clap::Args;
use futures_util::{SinkExt, StreamExt};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message;

use crate::error::chain;
use crate::srun_io::{JobInfo, Outputs, TaskInfo, TaskWriter};
use crate::srun_plan::{exported, layout, task_env};
use crate::{Error, Result};

#[derive(Debug, Clone, Args)]
pub struct SrunArgs {
    /// Tasks to run [default: nodes × tasks per node]
    #[arg(short = 'n', long = "ntasks", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub ntasks: Option<u32>,

    /// Nodes (kernels) of the job to run them on [default: all, or as many as -n needs]
    #[arg(short = 'N', long = "nodes", value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub nodes: Option<u32>,

    /// Tasks per node [default: the job's, SLURM_NTASKS_PER_NODE]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub ntasks_per_node: Option<u32>,

    /// Put the task's rank before each line of its output (`3: ...`)
    #[arg(short = 'l', long)]
    pub label: bool,

    /// Write output as it comes instead of line by line
    #[arg(short = 'u', long)]
    pub unbuffered: bool,

    /// Write the tasks' output to files: %j job, %t task, %n node of the step, %N node
    /// name, %s step, %u user, %x job name, %% a percent sign
    #[arg(short = 'o', long, value_name = "PATTERN")]
    pub output: Option<String>,

    /// Write the tasks' standard error to files (same patterns) [default: with their output]
    #[arg(short = 'e', long, value_name = "PATTERN")]
    pub error: Option<String>,

    /// Accepted for Slurm scripts and ignored: a kernel's tasks share its CPUs
    #[arg(long, value_name = "TYPE")]
    pub cpu_bind: Option<String>,

    /// Which of srun's variables the tasks get: ALL (but node-specific ones), NONE (only the
    /// kernel's and the task's), or NAME[=value],... (ALL,NAME=value adds to all) [default: ALL]
    #[arg(long, value_name = "ALL|NONE|NAME[=VALUE],...")]
    pub export: Option<String>,

    /// GPUs of its own for each task: task L of a node gets the kernel's GPUs L×G to L×G+G-1
    /// (CUDA_VISIBLE_DEVICES), so a node's tasks get disjoint sets
    #[arg(long, value_name = "G", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub gpus_per_task: Option<u32>,

    /// Stop the other tasks when one exits non-zero (Slurm's default is to let them run)
    #[arg(short = 'K', long, value_name = "0|1", num_args = 0..=1, default_missing_value = "1")]
    pub kill_on_bad_exit: Option<u8>,

    /// Outside a job: run one task on a terminal (`berth run -it`)
    #[arg(long)]
    pub pty: bool,

    /// The program to run in every task, and its arguments
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

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
    if args.cpu_bind.is_some() {
        eprintln!("srun: note: --cpu-bind is ignored: the tasks of a kernel share its CPUs");
    }
    let base = exported(args.export.as_deref(), std::env::vars()).map_err(Error::Usage)?;
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
                ExecRequest { kernel: node as u32, command: args.command.clone(), stdin: false, tty: false, env, gpus };
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

impl SrunArgs {
    /// The output options as words, for the srun of a job srun asked for.
    pub fn output_options(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (flag, v) in [("--output", &self.output), ("--error", &self.error), ("--export", &self.export)] {
            if let Some(v) = v {
                out.push(format!("{flag}={v}"));
            }
        }
        for (flag, on) in [
            ("--label", self.label),
            ("--unbuffered", self.unbuffered),
            ("--kill-on-bad-exit", self.kill_on_bad_exit.is_some_and(|k| k != 0)),
        ] {
            if on {
                out.push(flag.to_string());
            }
        }
        out
    }
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
}
