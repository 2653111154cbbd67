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
                eprintln!("error: job {id}: {e:#}");
                failed = true;
            }
        }
    }
    if args.output.json() {
        output::print_json(&done)?;
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
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
    }
}
