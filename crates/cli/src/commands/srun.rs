//! `berth srun` (and the binary called as `srun`): Slurm's task launcher. Inside a job it runs
//! the step's tasks over the job's kernels (`berth_slurm::srun`, which has srun's flags too);
//! outside one it asks for a job and runs the step there (`srun_alloc.rs`), as Slurm's srun
//! asks for an allocation.

use std::ffi::OsString;
use std::process::ExitCode;

pub use berth_slurm::srun::SrunArgs;
use clap::Parser;

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
            if crate::is_usage_error(&e) { ExitCode::from(2) } else { ExitCode::FAILURE }
        }
    }
}

pub async fn run(args: SrunArgs) -> anyhow::Result<ExitCode> {
    let Some(job) = berth_slurm::srun::in_job() else {
        // No job: ask for one, as Slurm's srun asks for an allocation.
        let step = super::srun_alloc::Step {
            ntasks: args.ntasks,
            nodes: args.nodes,
            per_node: args.ntasks_per_node,
            cpus_per_task: args.cpus_per_task,
            pty: args.pty,
            options: args.output_options(),
            command: args.command,
        };
        return super::srun_alloc::run(step).await;
    };
    Ok(berth_slurm::srun::run(job, args).await?)
}
