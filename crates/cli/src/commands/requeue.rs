//! `berth requeue JOB...` and Slurm's `scontrol requeue JOB[,JOB]`: a running job is stopped
//! and queued again as a new attempt, keeping its id (`POST /v1/jobs/{id}/requeue`). Inside
//! the job itself (`scontrol requeue $SLURM_JOB_ID` in a checkpoint trap) the job's step token
//! is the credential, so it works on nodes that hold no user credentials.

use std::process::ExitCode;

use berth_model::JobId;
use clap::Args;

#[derive(Debug, Args)]
pub struct RequeueArgs {
    /// Running jobs to stop and queue again (each keeps its id; its next run is a new attempt)
    #[arg(required = true, value_name = "JOB", add = crate::completion::job_ids_arg())]
    pub jobs: Vec<JobId>,
}

pub async fn run(args: RequeueArgs) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    for id in args.jobs {
        match requeue(id).await {
            Ok(()) => println!("job {id}: requeued (it stops, then waits in its queue for its next run)"),
            Err(e) => {
                eprintln!("error: job {id}: {e:#}");
                failed = true;
            }
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// Asks the manager to requeue job `id`, as the job itself when called from inside it (its
/// step token is the credential there; `berth_slurm::scontrol::requeue_job`, which
/// `scontrol requeue` calls too).
pub async fn requeue(id: JobId) -> anyhow::Result<()> {
    Ok(berth_slurm::scontrol::requeue_job(&crate::slurm::connect, id).await?)
}
