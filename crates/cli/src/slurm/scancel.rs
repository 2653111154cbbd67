//! `scancel [ID...]` with `-u`, `-t`, `-n`, `-p`: `berth cancel`'s selection
//! ([`crate::commands::cancel::selected`]), silent on success like scancel, with its error
//! lines (`Kill job error on job id N: Invalid job id specified`) and exit 1 on any failure.
//! `-s SIG` sends a signal instead (to the steps; `-b` the batch shell, `-f` both), like
//! `berth cancel --signal` ([`crate::commands::signal`]); `-b`/`-f` without `-s` cancel.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Parser;
use reqwest::StatusCode;

use crate::client::refused_with;
use crate::commands::cancel::{Selection, selected};
use crate::commands::signal::Send;

/// cancel berth jobs (Slurm's scancel)
#[derive(Debug, Parser)]
#[command(name = "scancel", version)]
struct Args {
    /// Jobs to cancel; with filters, only those of them that match
    #[arg(value_name = "JOB_ID")]
    ids: Vec<String>,
    /// Only this user's jobs
    #[arg(short = 'u', long = "user", value_name = "USER")]
    user: Option<String>,
    /// Only jobs in these states (PENDING, RUNNING, ...)
    #[arg(short = 't', long = "state", value_name = "STATES")]
    state: Option<String>,
    /// Only jobs with exactly this name
    #[arg(short = 'n', long = "name", alias = "jobname", value_name = "NAME")]
    name: Option<String>,
    /// Only jobs of this partition (berth queue)
    #[arg(short = 'p', long = "partition", value_name = "PARTITION")]
    partition: Option<String>,
    /// Send this signal (USR1, SIGUSR1 or a number) to the jobs' steps instead of cancelling
    #[arg(short = 's', long = "signal", value_name = "SIGNAL")]
    signal: Option<String>,
    /// With --signal: to the batch shell alone, not the steps
    #[arg(short = 'b', long = "batch")]
    batch: bool,
    /// With --signal: to the batch shell, its children and the steps
    #[arg(short = 'f', long = "full")]
    full: bool,
    /// Do not report jobs that already ended (-q too: berth has no QOS)
    #[arg(short = 'Q', long = "quiet", short_alias = 'q')]
    quiet: bool,
    /// Ask before each job (not supported: berth's scancel does not read stdin)
    #[arg(short = 'i', long = "interactive")]
    interactive: bool,
    /// Say more (accepted, changes nothing)
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    verbose: u8,
}

pub async fn run(argv: Vec<OsString>) -> anyhow::Result<ExitCode> {
    let args = Args::parse_from(argv);
    if args.interactive {
        anyhow::bail!("--interactive is not supported: berth's scancel does not ask, list the jobs to cancel instead");
    }
    let refs = crate::job_ref::parse_list(&args.ids.join(",")).map_err(anyhow::Error::msg)?;
    let states = match &args.state {
        Some(s) => berth_slurm::states::parse_states(s).map_err(anyhow::Error::msg)?.unwrap_or_default(),
        None => Vec::new(),
    };
    let client = crate::client::from_env()?;
    let mut sel = Selection { ids: Vec::new(), user: args.user, states, name: args.name, queue: args.partition };
    // As `berth cancel`: tasks go to their array unless filters pick among made jobs.
    let tasks = if sel.filtered() {
        sel.ids = crate::job_ref::resolve(&client, &refs).await?;
        Vec::new()
    } else {
        let (ids, tasks) = crate::job_ref::split(&refs);
        sel.ids = ids;
        tasks
    };
    if sel.ids.is_empty() && tasks.is_empty() && !sel.filtered() {
        anyhow::bail!("No job identification provided");
    }
    if let Some(signal) = &args.signal {
        berth_model::signal::parse_signal(signal).map_err(|_| anyhow::anyhow!("Invalid job signal: {signal}"))?;
        let what = Send { signal: signal.clone(), target: crate::commands::signal::target(args.batch, args.full) };
        let ids = selected(&client, &sel).await?;
        let mut failed = false;
        for (label, r) in crate::commands::signal::send_all(&client, &what, &ids, &tasks).await {
            let Err(e) = r else { continue };
            let Some(why) = kill_error(&e, args.quiet) else { continue };
            eprintln!("scancel: error: Kill job error on job id {label}: {why}");
            failed = true;
        }
        return Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS });
    }
    let mut failed = false;
    for id in selected(&client, &sel).await? {
        if let Err(e) = client.cancel(id).await {
            let Some(why) = kill_error(&e.into(), args.quiet) else { continue };
            eprintln!("scancel: error: Kill job error on job id {id}: {why}");
            failed = true;
        }
    }
    for (array, spec) in tasks {
        if let Err(e) = client.cancel_tasks(array, &spec.to_string()).await {
            let Some(why) = kill_error(&e.into(), args.quiet) else { continue };
            eprintln!("scancel: error: Kill job error on job id {}: {why}", crate::job_ref::tasks_label(array, &spec));
            failed = true;
        }
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// Slurm's words for a refused cancel; `None` for one `--quiet` does not report (the job
/// had ended already).
fn kill_error(e: &anyhow::Error, quiet: bool) -> Option<String> {
    Some(match refused_with(e) {
        Some(StatusCode::NOT_FOUND) => "Invalid job id specified".into(),
        Some(StatusCode::FORBIDDEN) => "Access/permission denied".into(),
        Some(StatusCode::CONFLICT) if e.to_string().contains("is pending") => "Job is pending execution".into(),
        Some(StatusCode::UNPROCESSABLE_ENTITY) if e.to_string().contains("signal") => "Invalid signal specified".into(),
        Some(StatusCode::CONFLICT) if e.to_string().contains("already finished") => {
            if quiet {
                return None;
            }
            "Job/step already completing or completed".into()
        }
        _ => format!("{e:#}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(status: StatusCode, msg: &str) -> anyhow::Error {
        anyhow::Error::new(berth_client::Error::from_answer(status, msg.into()))
    }

    #[test]
    fn errors_in_slurms_words() {
        assert_eq!(
            kill_error(&refused(StatusCode::NOT_FOUND, "job 9 not found"), false).unwrap(),
            "Invalid job id specified"
        );
        let done = refused(StatusCode::CONFLICT, "job 9 already finished (SUCCEEDED)");
        assert_eq!(kill_error(&done, false).unwrap(), "Job/step already completing or completed");
        assert_eq!(kill_error(&done, true), None, "--quiet");
        assert_eq!(kill_error(&refused(StatusCode::FORBIDDEN, "no"), true).unwrap(), "Access/permission denied");
        let pending = refused(StatusCode::CONFLICT, "job 9 is pending: only a running job can be signalled");
        assert_eq!(kill_error(&pending, true).unwrap(), "Job is pending execution");
        let bad = refused(StatusCode::UNPROCESSABLE_ENTITY, "signal: unknown signal `FOO`");
        assert_eq!(kill_error(&bad, false).unwrap(), "Invalid signal specified");
    }
}
