//! Slurm's client commands, for users and tools (submitit, workflow engines) that call
//! `sbatch`, `squeue`, `scancel`, `sacct`, `sinfo` and `scontrol` and parse what they print. They are
//! this same binary under those names (links made by `berth install-slurm-commands`, or
//! shipped by a package): `main` looks at the name it was called by and runs the command
//! with Slurm's flags and Slurm's output, talking to the manager like any berth command.
//!
//! Errors print as Slurm's do (`squeue: error: ...`) and exit 1; usage mistakes are clap's
//! (exit 2). What is supported: docs/slurm.md. The Slurm layer without a command line (state
//! names, output formats, `#SBATCH` translation, the job query) is the `berth-slurm` crate.

pub mod install;
mod sacct;
mod sbatch_cmd;
mod scancel;
mod scontrol;
mod scontrol_nodes;
mod sinfo;
mod squeue;

use std::ffi::OsString;
use std::process::ExitCode;

use berth_model::JobId;
pub use berth_slurm::{LINKED, Tool, Wanted, format, invoked_as, names, states};

/// Runs `tool` with `args` (its own name first) and returns its exit status.
pub fn main(tool: Tool, args: Vec<OsString>) -> ExitCode {
    crate::service::init_logging("warn", crate::service::LogFormat::default());
    crate::client::choose(std::env::var("BERTH_CONTEXT").ok());
    let runtime = match crate::runtime(false) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{}: error: cannot start the async runtime: {e}", tool.name());
            return ExitCode::FAILURE;
        }
    };
    let run = async {
        match tool {
            Tool::Sbatch => sbatch_cmd::run(args).await,
            Tool::Squeue => squeue::run(args).await,
            Tool::Scancel => scancel::run(args).await,
            Tool::Sacct => sacct::run(args).await,
            Tool::Sinfo => sinfo::run(args).await,
            Tool::Scontrol => scontrol::run(args).await,
        }
    };
    match runtime.block_on(run) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}: error: {e:#}", tool.name());
            ExitCode::FAILURE
        }
    }
}

/// A comma-separated list of job ids and array tasks (`-j 3,7,12_1`), as job ids (a task as
/// the job made for it).
pub async fn job_list(client: &crate::client::Client, list: &str) -> anyhow::Result<Vec<JobId>> {
    let refs = crate::job_ref::parse_list(list).map_err(anyhow::Error::msg)?;
    crate::job_ref::resolve(client, &refs).await
}

#[cfg(test)]
mod tests {
    use berth_model::JobState;
    use berth_model::api::JobView;

    use super::*;

    #[test]
    fn arrays_fold_into_their_tasks() {
        let job = |id: JobId, state: JobState, array: Option<&str>, task: Option<u32>| {
            let mut j = berth_slurm::fixtures::job(state);
            j.id = id;
            j.array = array.map(str::to_string);
            j.array_task = task.map(|index| berth_model::ArrayTask { array_id: 10, index, min: 0, max: 3, count: 4 });
            j
        };
        let shown = |jobs: Vec<JobView>| {
            berth_slurm::fold_arrays(jobs).iter().map(crate::jobfields::display_id).collect::<Vec<_>>().join(" ")
        };
        let t0 = job(11, JobState::Succeeded, None, Some(0));
        let t1 = job(12, JobState::Running, None, Some(1));
        // Still making tasks: the manager's remainder row stays.
        assert_eq!(
            shown(vec![job(10, JobState::Pending, Some("[2-3%2]"), None), t0.clone(), t1.clone()]),
            "10_[2-3%2] 10_0 10_1"
        );
        // All made: only the tasks.
        assert_eq!(shown(vec![job(10, JobState::Pending, Some("0-1"), None), t0.clone(), t1.clone()]), "10_0 10_1");
        // Ended with tasks never made: those, in the array's state.
        assert_eq!(shown(vec![job(10, JobState::Cancelled, Some("0-3%2"), None), t0.clone()]), "10_[1-3%2] 10_0");
        assert_eq!(shown(vec![job(10, JobState::Succeeded, Some("0-1"), None), t0, t1]), "10_0 10_1");
    }
}
