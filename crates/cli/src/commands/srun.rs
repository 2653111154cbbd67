//! `berth srun` (and the binary called as `srun`): Slurm's task launcher inside a job. Inside a
//! running job (`BERTH_JOB_ID` set) it starts the step's tasks over the job's kernels, block
//! by block (tasks 0..k-1 in kernel 0, ...), each a `berth exec` stream opened with the job's
//! step token (`BERTH_STEP_TOKEN`, which opens streams into this job only), in the kernel's
//! cgroup or container and as its user, with the task's variables (`SLURM_PROCID`,
//! `SLURM_LOCALID`, `RANK`, ...) over srun's exported environment. Output comes back to
//! srun's (`srun_io.rs`); srun exits with the worst task's code.
//!
//! As in Slurm, a failing task does not stop the others unless `-K/--kill-on-bad-exit`; srun
//! killed (SIGINT, SIGTERM) closes every stream, which kills the tasks.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::{Context, anyhow, bail};
use berth_model::stream::{self, CONTROL, ExecRequest, STDERR, STDOUT, StreamEnd};
use clap::{Args, Parser};
use futures_util::{SinkExt, StreamExt};
use tokio::sync::watch;
use tokio_tungstenite::tungstenite::Message;

use super::srun_io::{JobInfo, Outputs, TaskInfo, TaskWriter};
use crate::UsageError;
use crate::client::Client;

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

    /// Stop the other tasks when one exits non-zero (Slurm's default is to let them run)
    #[arg(short = 'K', long, value_name = "0|1", num_args = 0..=1, default_missing_value = "1")]
    pub kill_on_bad_exit: Option<u8>,

    /// The program to run in every task, and its arguments
    #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true, value_name = "COMMAND")]
    pub command: Vec<String>,
}

/// `srun` as its own program (the binary called as `srun`, Slurm style).
#[derive(Debug, Parser)]
#[command(name = "srun", about = "Run a job step's tasks over a berth job's kernels")]
struct SrunCli {
    #[command(flatten)]
    args: SrunArgs,
}

/// The entry for the binary called as `srun` (`args` as the process got them, argv[0] first).
pub fn slurm_srun_main(args: Vec<OsString>) -> ExitCode {
    let cli = match SrunCli::try_parse_from(args) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("srun: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli.args)) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("srun: error: {e:#}");
            if e.downcast_ref::<UsageError>().is_some() { ExitCode::from(2) } else { ExitCode::FAILURE }
        }
    }
}

/// Variables srun does not pass on to its tasks: berth's own and those that describe the
/// kernel srun runs in rather than the job (each task's kernel has its own).
const NODE_LOCAL: [&str; 13] = [
    "SLURM_NODEID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_CPUS_ON_NODE",
    "SLURM_GPUS_ON_NODE",
    "SLURM_MEM_PER_NODE",
    "RANK",
    "LOCAL_RANK",
    "NODE_RANK",
    "PWD",
    "OLDPWD",
    "HOSTNAME",
    "PFIO_HTTP_BEARER_TOKEN_PATH",
];

pub async fn run(args: SrunArgs) -> anyhow::Result<ExitCode> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let Some(job) = var("BERTH_JOB_ID") else {
        return Err(UsageError::error(
            "srun starts a job step's tasks inside a job (BERTH_JOB_ID is not set): submit a batch script \
             that calls srun (berth submit job.sh, whose #SBATCH lines give its nodes and tasks), or run a \
             command on nodes directly with berth run --nodes N -- CMD",
        ));
    };
    let token = var("BERTH_STEP_TOKEN").ok_or_else(|| {
        anyhow!("job {job} has no step token (BERTH_STEP_TOKEN): its manager or its node's agent predates srun")
    })?;
    let url = var("BERTH_URL").ok_or_else(|| anyhow!("job {job} has no manager address (BERTH_URL) to reach"))?;
    let kernels: u32 = var("BERTH_CLUSTER_SIZE").and_then(|v| v.parse().ok()).unwrap_or(1);
    let default_per_node: u32 = var("SLURM_NTASKS_PER_NODE").and_then(|v| v.parse().ok()).unwrap_or(1);
    let counts =
        layout(kernels, default_per_node, args.ntasks, args.nodes, args.ntasks_per_node).map_err(UsageError::error)?;
    if args.cpu_bind.is_some() {
        eprintln!("srun: note: --cpu-bind is ignored: the tasks of a kernel share its CPUs");
    }
    let base = exported(args.export.as_deref(), std::env::vars()).map_err(UsageError::error)?;
    let node_names: Vec<String> =
        var("BERTH_CLUSTER_NODES").map(|n| n.split(',').map(str::to_string).collect()).unwrap_or_default();
    let info = JobInfo {
        id: job.clone(),
        name: var("SLURM_JOB_NAME").unwrap_or_default(),
        user: var("SLURM_JOB_USER").or_else(|| var("USER")).unwrap_or_default(),
        step: next_step(&job, &token),
    };
    let creds = crate::credentials::Credentials {
        url,
        token: Some(token),
        ca_file: var("BERTH_CA_FILE").map(Into::into),
        socket: None,
        data_dir: None,
    };
    let client = Client::new(creds)?;
    let outputs = Outputs::new(args.label, args.unbuffered, args.output.clone(), args.error.clone());
    let kill_on_bad_exit = args.kill_on_bad_exit.is_some_and(|k| k != 0);
    let (stop_tx, stop_rx) = watch::channel(false);
    let (done_tx, mut done_rx) = tokio::sync::mpsc::unbounded_channel();
    let ntasks: u32 = counts.iter().sum();
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
            let req = ExecRequest { kernel: node as u32, command: args.command.clone(), stdin: false, tty: false, env };
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
    let mut worst = 0;
    let mut signalled = None;
    let mut ended = 0;
    let mut int = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    while ended < ntasks {
        let (task, end) = tokio::select! {
            d = done_rx.recv() => match d {
                Some(d) => d,
                None => break,
            },
            _ = int.recv() => { signalled = Some(libc::SIGINT); let _ = stop_tx.send(true); continue }
            _ = term.recv() => { signalled = Some(libc::SIGTERM); let _ = stop_tx.send(true); continue }
        };
        ended += 1;
        let code = match end {
            TaskEnd::Exited(0) => 0,
            TaskEnd::Exited(c) => {
                eprintln!("srun: error: {}: task {}: exited with exit code {c}", task.node_name, task.rank);
                c
            }
            TaskEnd::Failed(e) => {
                eprintln!("srun: error: {}: task {}: {e}", task.node_name, task.rank);
                1
            }
            TaskEnd::Stopped => 0,
        };
        if code != 0 && kill_on_bad_exit && !*stop_tx.borrow() {
            eprintln!("srun: error: task {} failed: stopping the step's other tasks (--kill-on-bad-exit)", task.rank);
            let _ = stop_tx.send(true);
        }
        worst = worst.max(code);
    }
    if let Some(sig) = signalled {
        return Ok(ExitCode::from(128 + sig as u8));
    }
    Ok(ExitCode::from(worst.clamp(0, 255) as u8))
}

/// How many tasks go to each of the step's nodes (kernels 0, 1, ...), in block order: the
/// job's `kernels` at most, `per_node` each unless `-n` says otherwise, then spread as evenly
/// as Slurm's block distribution does (the first nodes take one more when it does not divide).
pub fn layout(
    kernels: u32,
    default_per_node: u32,
    ntasks: Option<u32>,
    nodes: Option<u32>,
    per_node: Option<u32>,
) -> Result<Vec<u32>, String> {
    let kernels = kernels.max(1);
    let per = per_node.unwrap_or(default_per_node).max(1);
    let nodes = match (nodes, ntasks) {
        (Some(n), _) => n,
        (None, Some(t)) => t.div_ceil(per).min(kernels),
        (None, None) => kernels,
    };
    if nodes > kernels {
        return Err(format!("-N {nodes}: the job has {kernels} node(s); srun runs within the job's allocation"));
    }
    let total = match ntasks {
        Some(t) => t,
        None => nodes.checked_mul(per).ok_or("too many tasks")?,
    };
    if total < nodes {
        return Err(format!("-n {total} is fewer tasks than -N {nodes}: give each node at least one task"));
    }
    const MAX_TASKS: u32 = 1 << 16;
    if total > MAX_TASKS {
        return Err(format!("{total} tasks in one step: at most {MAX_TASKS}"));
    }
    let (base, extra) = (total / nodes, total % nodes);
    Ok((0..nodes).map(|i| base + u32::from(i < extra)).collect())
}

/// Slurm's compressed per-node counts: `4(x2),3`.
pub fn counts_form(counts: &[u32]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < counts.len() {
        let run = counts[i..].iter().take_while(|c| **c == counts[i]).count();
        parts.push(if run > 1 { format!("{}(x{run})", counts[i]) } else { counts[i].to_string() });
        i += run;
    }
    parts.join(",")
}

/// The variables srun passes on (`--export`), before the task's own.
pub fn exported(
    export: Option<&str>,
    vars: impl Iterator<Item = (String, String)>,
) -> Result<BTreeMap<String, String>, String> {
    let ours: BTreeMap<String, String> = vars
        .filter(|(k, _)| !k.starts_with("BERTH_") && !NODE_LOCAL.contains(&k.as_str()) && k != "_" && k != "SHLVL")
        .collect();
    let spec = export.unwrap_or("ALL");
    let mut items = spec.split(',').filter(|i| !i.is_empty()).peekable();
    let mut out = match items.peek().map(|i| i.to_ascii_uppercase()) {
        Some(first) if first == "ALL" => {
            items.next();
            ours.clone()
        }
        Some(first) if first == "NONE" => {
            items.next();
            BTreeMap::new()
        }
        _ => BTreeMap::new(),
    };
    for item in items {
        match item.split_once('=') {
            Some((k, v)) if !k.is_empty() => {
                out.insert(k.to_string(), v.to_string());
            }
            Some(_) => return Err(format!("--export item `{item}` has an empty name: use NAME or NAME=value")),
            None => {
                if let Some(v) = ours.get(item) {
                    out.insert(item.to_string(), v.clone());
                }
            }
        }
    }
    Ok(out)
}

/// A task's environment: `base`, then its place in the step.
fn task_env(
    base: &BTreeMap<String, String>,
    task: &TaskInfo,
    local: u32,
    counts: &[u32],
    step: u32,
) -> BTreeMap<String, String> {
    let mut env = base.clone();
    let total: u32 = counts.iter().sum();
    let on_node = counts.get(task.node as usize).copied().unwrap_or(1);
    let mut set = |k: &str, v: String| {
        env.insert(k.to_string(), v);
    };
    set("SLURM_PROCID", task.rank.to_string());
    set("SLURM_LOCALID", local.to_string());
    set("SLURM_NODEID", task.node.to_string());
    set("SLURM_STEP_ID", step.to_string());
    set("SLURM_STEPID", step.to_string());
    set("SLURM_STEP_NUM_TASKS", total.to_string());
    set("SLURM_STEP_NUM_NODES", counts.len().to_string());
    set("SLURM_STEP_TASKS_PER_NODE", counts_form(counts));
    set("SLURM_NTASKS", total.to_string());
    set("SLURM_NPROCS", total.to_string());
    set("RANK", task.rank.to_string());
    set("LOCAL_RANK", local.to_string());
    set("WORLD_SIZE", total.to_string());
    set("LOCAL_WORLD_SIZE", on_node.to_string());
    env
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
    let end: anyhow::Result<Option<StreamEnd>> = async {
        let ws = client.websocket(path).await?;
        let (mut tx, mut rx) = ws.split();
        tx.send(Message::text(serde_json::to_string(&req)?)).await?;
        loop {
            tokio::select! {
                msg = rx.next() => match msg {
                    Some(Ok(Message::Binary(b))) => match stream::split(&b) {
                        Some((STDOUT, data)) => out.write(data).context("cannot write the task's output")?,
                        Some((STDERR, data)) => err.write(data).context("cannot write the task's output")?,
                        Some((CONTROL, data)) => return Ok(serde_json::from_slice::<StreamEnd>(data).ok()),
                        _ => {}
                    },
                    Some(Ok(Message::Close(_))) | None => return Ok(None),
                    Some(Err(e)) => bail!("the stream broke: {e}"),
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
        Err(e) => TaskEnd::Failed(format!("{e:#}")),
    }
}

const STOPPED: &str = "stopped by srun";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tasks_go_out_in_blocks() {
        assert_eq!(layout(2, 4, None, None, None).unwrap(), [4, 4]);
        assert_eq!(layout(2, 4, Some(5), None, None).unwrap(), [3, 2]);
        assert_eq!(layout(2, 4, Some(2), None, None).unwrap(), [2], "-n within one node's tasks");
        assert_eq!(layout(3, 1, None, Some(2), None).unwrap(), [1, 1]);
        assert_eq!(layout(2, 1, None, None, Some(3)).unwrap(), [3, 3]);
        assert_eq!(layout(1, 1, Some(4), None, None).unwrap(), [4]);
        assert!(layout(2, 1, None, Some(3), None).unwrap_err().contains("has 2 node(s)"));
        assert!(layout(2, 1, Some(1), Some(2), None).unwrap_err().contains("fewer tasks"));
        assert_eq!(counts_form(&[4, 4]), "4(x2)");
        assert_eq!(counts_form(&[3, 2]), "3,2");
        assert_eq!(counts_form(&[2, 2, 1]), "2(x2),1");
    }

    #[test]
    fn task_variables() {
        let task = TaskInfo { rank: 5, node: 1, node_name: "n2".into() };
        let base = BTreeMap::from([("A".to_string(), "1".to_string())]);
        let env = task_env(&base, &task, 1, &[4, 4], 2);
        let get = |k: &str| env.get(k).map(String::as_str);
        assert_eq!(get("A"), Some("1"));
        assert_eq!((get("SLURM_PROCID"), get("SLURM_LOCALID"), get("SLURM_NODEID")), (Some("5"), Some("1"), Some("1")));
        assert_eq!((get("SLURM_STEP_ID"), get("SLURM_STEP_NUM_TASKS")), (Some("2"), Some("8")));
        assert_eq!((get("RANK"), get("LOCAL_RANK"), get("WORLD_SIZE")), (Some("5"), Some("1"), Some("8")));
        assert_eq!(get("SLURM_STEP_TASKS_PER_NODE"), Some("4(x2)"));
    }

    #[test]
    fn export_selects_variables() {
        let vars = || {
            [("A", "1"), ("B", "2"), ("BERTH_STEP_TOKEN", "t"), ("SLURM_NODEID", "0"), ("SLURM_JOB_ID", "7")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
        };
        let all = exported(None, vars()).unwrap();
        assert_eq!(all.keys().collect::<Vec<_>>(), ["A", "B", "SLURM_JOB_ID"], "not berth's or the node's own");
        assert!(exported(Some("NONE"), vars()).unwrap().is_empty());
        let some = exported(Some("A,C=3"), vars()).unwrap();
        assert_eq!(some, BTreeMap::from([("A".into(), "1".into()), ("C".into(), "3".into())]));
        assert_eq!(exported(Some("ALL,C=3"), vars()).unwrap().len(), 4);
        assert!(exported(Some("=x"), vars()).is_err());
    }
}
