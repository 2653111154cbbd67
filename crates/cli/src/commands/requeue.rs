//! `berth requeue JOB...` and Slurm's `scontrol requeue JOB[,JOB]`: a running job is stopped
//! and queued again as a new attempt, keeping its id (`POST /v1/jobs/{id}/requeue`). Inside
//! the job itself (`scontrol requeue $SLURM_JOB_ID` in a checkpoint trap) the job's step token
//! is the credential, so it works on nodes that hold no user credentials.

use std::process::ExitCode;

use anyhow::Context;
use berth_model::JobId;
use clap::Args;

use crate::client::Client;
use crate::client::credentials::Credentials;

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

/// Asks the manager to requeue job `id`, as the job itself when called from inside it.
pub async fn requeue(id: JobId) -> anyhow::Result<()> {
    client_for(id)?.requeue(id).await?;
    Ok(())
}

/// The job's own credential (`BERTH_STEP_TOKEN` with `BERTH_URL`) when this runs inside job
/// `id`; the user's otherwise.
fn client_for(id: JobId) -> anyhow::Result<Client> {
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let inside = var("SLURM_JOB_ID").or_else(|| var("BERTH_JOB_ID")).and_then(|j| j.parse::<JobId>().ok());
    match (inside == Some(id), var("BERTH_STEP_TOKEN"), var("BERTH_URL")) {
        (true, Some(token), Some(url)) => Client::new(Credentials {
            url,
            token: Some(token),
            ca_file: var("BERTH_CA_FILE").map(Into::into),
            socket: None,
            data_dir: None,
        })
        .context("cannot reach the manager with the job's step token"),
        _ => crate::client::from_env(),
    }
}
