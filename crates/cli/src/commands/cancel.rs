//! `berth cancel ID...`: cancels each job, reporting each failure and going on with the rest.

use std::process::ExitCode;

use berth_model::api::CancelResult;
use berth_model::{JobId, JobState};
use clap::Args;

use crate::client::Client;
use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Ids of the jobs to cancel
    #[arg(required = true, value_name = "ID", value_parser = clap::value_parser!(JobId).range(1..))]
    pub ids: Vec<JobId>,

    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn run(args: CancelArgs) -> anyhow::Result<ExitCode> {
    let client = Client::from_env()?;
    let mut done: Vec<CancelResult> = Vec::new();
    let mut failed = false;
    for id in args.ids {
        match client.cancel(id).await {
            Ok(r) => {
                if !args.output.json() {
                    println!("{}", describe(&r));
                }
                done.push(r);
            }
            Err(e) => {
                // Per job, so that one bad id does not hide the others' results.
                eprintln!("error: job {id}: {}", without_job_prefix(id, &format!("{e:#}")));
                failed = true;
            }
        }
    }
    if args.output.json() {
        output::print_json(&done)?;
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// The manager's messages usually start with `job N ...`; after our own `job N: ` prefix
/// that would say it twice.
fn without_job_prefix(id: JobId, msg: &str) -> String {
    msg.strip_prefix(&format!("job {id} ")).unwrap_or(msg).to_string()
}

fn describe(r: &CancelResult) -> String {
    match r.state {
        JobState::Cancelled => format!("cancelled job {}", r.id),
        JobState::Terminating => format!("job {} is stopping", r.id),
        s => format!("job {} is {s}", r.id),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages() {
        assert_eq!(describe(&CancelResult { id: 7, state: JobState::Cancelled }), "cancelled job 7");
        assert_eq!(describe(&CancelResult { id: 7, state: JobState::Terminating }), "job 7 is stopping");
        assert_eq!(without_job_prefix(9, "job 9 not found"), "not found");
        assert_eq!(without_job_prefix(9, "job 99 not found"), "job 99 not found");
        assert_eq!(without_job_prefix(9, "forbidden"), "forbidden");
    }
}
