//! `berth hold JOB...` and `berth release JOB...` (Slurm's `scontrol hold/uhold/release`): a
//! pending job kept out of the scheduler until released (`POST /v1/jobs/{id}/hold`,
//! `/release`). A job array is held or released with its pending tasks.

use std::process::ExitCode;

use berth_model::{Hold, JobId};
use clap::Args;

#[derive(Debug, Args)]
pub struct HoldArgs {
    /// Pending jobs to hold (an array: with its pending tasks)
    #[arg(required = true, value_name = "JOB", add = crate::completion::job_ids_arg())]
    pub jobs: Vec<JobId>,

    /// An admin's hold, which only an admin can release (admins only; the default is a user's
    /// hold, which the job's owner can release too)
    #[arg(long)]
    pub admin: bool,
}

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// Held jobs to let run (an array: with its held tasks)
    #[arg(required = true, value_name = "JOB", add = crate::completion::job_ids_arg())]
    pub jobs: Vec<JobId>,
}

pub async fn hold(args: HoldArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    let kind = if args.admin { Hold::Admin } else { Hold::User };
    each(args.jobs, async |id| {
        let r = client.hold(id, Some(kind)).await?;
        Ok(format!("job {id}: held ({kind} hold){}: it waits until `berth release {id}`", tasks(&r.jobs, id)))
    })
    .await
}

pub async fn release(args: ReleaseArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    each(args.jobs, async |id| {
        let r = client.release(id).await?;
        Ok(match r.jobs.is_empty() {
            true => format!("job {id}: not held; nothing to release"),
            false => format!("job {id}: released{}: it waits in its queue", tasks(&r.jobs, id)),
        })
    })
    .await
}

/// Runs `f` for each job, printing its answer or its error and going on with the rest.
async fn each(jobs: Vec<JobId>, f: impl AsyncFn(JobId) -> anyhow::Result<String>) -> anyhow::Result<ExitCode> {
    let mut failed = false;
    for id in jobs {
        match f(id).await {
            Ok(line) => println!("{line}"),
            Err(e) => {
                eprintln!("error: job {id}: {e:#}");
                failed = true;
            }
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// ` with N tasks` when an array's tasks changed with it.
fn tasks(changed: &[JobId], id: JobId) -> String {
    match changed.iter().filter(|j| **j != id).count() {
        0 => String::new(),
        1 => " with 1 task".into(),
        n => format!(" with {n} tasks"),
    }
}
