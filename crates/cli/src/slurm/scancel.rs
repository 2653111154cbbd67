//! `scancel [ID...]` with `-u`, `-t`, `-n`, `-p`: `berth cancel`'s selection
//! ([`crate::commands::cancel::selected`]), silent on success like scancel, with its error
//! lines (`Kill job error on job id N: Invalid job id specified`) and exit 1 on any failure.
//! `-s SIG` sends a signal instead (to the steps; `-b` the batch shell, `-f` both), like
//! `berth cancel --signal` ([`crate::commands::signal`]); `-b`/`-f` without `-s` cancel.

use std::ffi::OsString;
use std::process::ExitCode;

use berth_slurm::scancel::Args;

use crate::client::refused_with;
use crate::commands::cancel::{Selection, selected};
use crate::commands::signal::Send;

pub async fn run(argv: Vec<OsString>) -> anyhow::Result<ExitCode> {
    let args: Args = berth_slurm::getopt::parse(berth_slurm::Tool::Scancel, argv);
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

/// scancel's words for `e` ([`berth_slurm::scancel::kill_error`]), by the refusal's status
/// and typed reason.
fn kill_error(e: &anyhow::Error, quiet: bool) -> Option<String> {
    let reason = e.downcast_ref::<berth_client::Error>().and_then(berth_client::Error::refused_reason);
    berth_slurm::scancel::kill_error(e.as_ref(), refused_with(e), reason, quiet)
}
