//! `srun` outside a job: as Slurm's srun without an allocation asks for one, it submits a job
//! of the nodes and tasks it was given and runs its step there, through `berth run` (queued
//! with its reasons, cancelled by Ctrl-C while it waits, its output followed, its exit code
//! ours). The job is a batch job (`launch = first`) whose kernel 0 runs this very binary as
//! `srun` with the same output options, which then starts the tasks as inside any job; so the
//! nodes must have berth where this one is (an installed berth, or a shared file system).
//! `--pty` runs one task on a terminal: `berth run -it`.

use std::ffi::OsString;
use std::process::ExitCode;

use anyhow::Context;

use crate::UsageError;
use crate::commands::run::{self, RunArgs};
use crate::commands::submit::JobArgs;
use crate::specflags::{LaunchArg, SpecFlags};

/// The step srun was asked for outside a job.
pub struct Step {
    pub ntasks: Option<u32>,
    pub nodes: Option<u32>,
    pub per_node: Option<u32>,
    /// CPUs of each task (`-c`): the job's kernels get that many per task.
    pub cpus_per_task: Option<u32>,
    /// One task on a terminal.
    pub pty: bool,
    /// srun's output options, passed on to the srun in the job (`--label`, `--output=P`, ...).
    pub options: Vec<String>,
    pub command: Vec<String>,
}

/// Submits the job for `step` and runs the step in it.
pub async fn run(step: Step) -> anyhow::Result<ExitCode> {
    let (nodes, per_node) = shape(step.ntasks, step.nodes, step.per_node).map_err(UsageError::error)?;
    let program = std::path::Path::new(&step.command[0]).file_name().map(|n| n.to_string_lossy().into_owned());
    let mut flags = SpecFlags { name: program, nodes: Some(nodes), ..SpecFlags::default() };
    let command: Vec<String> = if step.pty {
        if nodes * per_node > 1 {
            return Err(UsageError::error("--pty runs one task on a terminal: drop -n and -N (or --pty)"));
        }
        step.command.clone()
    } else {
        flags.tasks_per_node = Some(per_node);
        // A CPU per task, as Slurm gives without -c.
        flags.cpus = Some(per_node as u64 * step.cpus_per_task.unwrap_or(1) as u64 * 1000);
        flags.launch = Some(LaunchArg::First);
        inner_srun(&step)?
    };
    let run_args = RunArgs {
        job: JobArgs { flags, target: Vec::new(), command: command.into_iter().map(OsString::from).collect() },
        stdin: step.pty,
        tty: step.pty,
        detach_keys: crate::terminal::DEFAULT_DETACH_KEYS.to_string(),
    };
    run::run(run_args).await
}

/// Nodes and tasks per node of the job for `-n`, `-N` and `--ntasks-per-node`: one node
/// unless `-N`, `-n` split evenly over the nodes.
pub fn shape(ntasks: Option<u32>, nodes: Option<u32>, per_node: Option<u32>) -> Result<(u32, u32), String> {
    let nodes = nodes.unwrap_or(1);
    let per = match (per_node, ntasks) {
        (Some(p), _) => p,
        (None, Some(n)) if n % nodes != 0 || n < nodes => {
            return Err(format!(
                "-n {n} does not split evenly over -N {nodes}: a job runs the same number of tasks on every \
                 node; use --ntasks-per-node"
            ));
        }
        (None, Some(n)) => n / nodes,
        (None, None) => 1,
    };
    let max = berth_model::job::MAX_TASKS_PER_NODE;
    if per > max {
        return Err(format!("{per} tasks per node: at most {max}"));
    }
    Ok((nodes, per))
}

/// The command of the job's kernel 0: this binary as `srun` with the output options given.
fn inner_srun(step: &Step) -> anyhow::Result<Vec<String>> {
    let exe = std::env::current_exe().context("cannot find the berth binary to run srun in the job")?;
    let mut cmd = vec![exe.to_string_lossy().into_owned(), "srun".to_string()];
    cmd.extend(step.options.iter().cloned());
    cmd.push("--".into());
    cmd.extend(step.command.iter().cloned());
    Ok(cmd)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_job_has_the_steps_shape() {
        assert_eq!(shape(None, None, None).unwrap(), (1, 1));
        assert_eq!(shape(Some(4), None, None).unwrap(), (1, 4));
        assert_eq!(shape(Some(8), Some(2), None).unwrap(), (2, 4));
        assert_eq!(shape(None, Some(3), Some(2)).unwrap(), (3, 2));
        assert!(shape(Some(3), Some(2), None).unwrap_err().contains("does not split evenly"));
        assert!(shape(None, None, Some(5000)).unwrap_err().contains("at most 1024"));
    }
}
