//! `berth cancel ID...` or `berth cancel --user U --state S --name N --queue Q` (like
//! `scancel`): cancels each job named or matched, reporting each failure and going on with the
//! rest, and how many it cancelled.

use std::process::ExitCode;

use berth_model::api::{CancelResult, JobListQuery, SignalResult};
use berth_model::{JobId, JobState};
use clap::Args;

use crate::client::Client;
use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct CancelArgs {
    /// Ids of the jobs to cancel (an array: all its tasks; 12_7: task 7 of array 12); with
    /// filters, only those of them that match
    #[arg(
        value_name = "ID",
        required_unless_present_any = ["user", "state", "name", "queue"],
        add = crate::completion::job_ids_arg()
    )]
    pub ids: Vec<crate::job_ref::JobRef>,

    /// Cancel this user's unfinished jobs
    #[arg(short, long, value_name = "USER")]
    pub user: Option<String>,

    /// Cancel the unfinished jobs in this state (PENDING, RUNNING, ...)
    #[arg(long, value_name = "STATE", value_parser = super::ps::parse_state)]
    pub state: Option<JobState>,

    /// Cancel the unfinished jobs with exactly this name
    #[arg(short, long, value_name = "NAME")]
    pub name: Option<String>,

    /// Cancel the unfinished jobs of this queue
    #[arg(short, long, value_name = "QUEUE")]
    pub queue: Option<String>,

    /// Send this signal (USR1, SIGUSR1 or a number) to the running jobs' steps instead of
    /// cancelling them
    #[arg(short = 's', long, value_name = "SIGNAL")]
    pub signal: Option<String>,

    /// With --signal: to the batch shell alone (the script), not the steps
    #[arg(short, long, requires = "signal", conflicts_with = "full")]
    pub batch: bool,

    /// With --signal: to the batch shell, its children and the steps
    #[arg(short, long, requires = "signal")]
    pub full: bool,

    #[command(flatten)]
    pub output: OutputArgs,
}

impl CancelArgs {
    fn selection(&self, ids: Vec<JobId>) -> Selection {
        Selection {
            ids,
            user: self.user.clone(),
            states: self.state.into_iter().collect(),
            name: self.name.clone(),
            queue: self.queue.clone(),
        }
    }
}

/// Which jobs to cancel: the ids given, or the unfinished jobs that match every filter
/// (among the ids given, when there are both). `scancel` selects with the same.
#[derive(Debug, Clone, Default)]
pub struct Selection {
    pub ids: Vec<JobId>,
    pub user: Option<String>,
    /// Any of these states (none: any unfinished state).
    pub states: Vec<JobState>,
    /// Exactly this name.
    pub name: Option<String>,
    pub queue: Option<String>,
}

impl Selection {
    /// Whether jobs are selected by filters (not only by id).
    pub fn filtered(&self) -> bool {
        self.user.is_some() || !self.states.is_empty() || self.name.is_some() || self.queue.is_some()
    }
}

/// The ids `sel` selects.
pub async fn selected(client: &Client, sel: &Selection) -> anyhow::Result<Vec<JobId>> {
    if !sel.filtered() {
        return Ok(sel.ids.clone());
    }
    if let Some(s) = sel.states.iter().find(|s| s.is_terminal()) {
        anyhow::bail!("jobs in state {s} have ended: pick an unfinished state (PENDING, RUNNING, ...)");
    }
    let q = JobListQuery {
        state: (!sel.states.is_empty()).then(|| sel.states.iter().map(|s| s.as_str()).collect::<Vec<_>>().join(",")),
        user: sel.user.clone(),
        queue: sel.queue.clone(),
        name: sel.name.clone(),
        ..Default::default()
    };
    let jobs = client.jobs(&q).await?;
    Ok(jobs
        .into_iter()
        // the API matches names by substring; a cancel takes the exact name, as scancel does
        .filter(|j| sel.name.is_none() || j.name == sel.name)
        .filter(|j| sel.ids.is_empty() || sel.ids.contains(&j.id))
        .map(|j| j.id)
        .collect())
}

pub async fn run(args: CancelArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    let mut done: Vec<CancelResult> = Vec::new();
    let mut failed = false;
    let filtered = args.selection(Vec::new()).filtered();
    // Without filters, tasks go to the array (a task not made yet is cancelled too); with
    // filters, only the jobs made for them can match.
    let (ids, tasks) = if filtered {
        (crate::job_ref::resolve(&client, &args.ids).await?, Vec::new())
    } else {
        crate::job_ref::split(&args.ids)
    };
    let ids = selected(&client, &args.selection(ids)).await?;
    if filtered && ids.is_empty() && !args.output.json() {
        eprintln!("no unfinished job matches");
    }
    if let Some(signal) = &args.signal {
        let what = super::signal::Send { signal: signal.clone(), target: super::signal::target(args.batch, args.full) };
        return signalled(&args, super::signal::send_all(&client, &what, &ids, &tasks).await);
    }
    let mut report = |r: CancelResult, task: Option<String>| {
        if !args.output.json() {
            println!("{}{}", describe(&r), task.map(|t| format!(" ({t})")).unwrap_or_default());
        }
        done.push(r);
    };
    for id in ids {
        match client.cancel(id).await {
            Ok(r) => report(r, None),
            Err(e) => {
                // Per job, so that one bad id does not hide the others' results.
                eprintln!("error: job {id}: {}", without_job_prefix(id, &format!("{e:#}")));
                failed = true;
            }
        }
    }
    for (array, spec) in tasks {
        match client.cancel_tasks(array, &spec.to_string()).await {
            Ok(rs) => {
                for t in rs {
                    report(CancelResult { id: t.id, state: t.state }, Some(format!("{array}_{}", t.index)));
                }
            }
            Err(e) => {
                let label = crate::job_ref::tasks_label(array, &spec);
                eprintln!("error: job {label}: {}", without_job_prefix(array, &format!("{e:#}")));
                failed = true;
            }
        }
    }
    if args.output.json() {
        output::print_json(&done)?;
    } else if filtered && !done.is_empty() {
        let n = done.len();
        println!("cancelled {n} job{}", if n == 1 { "" } else { "s" });
    }
    Ok(if failed { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// Prints what `--signal` reached and each failure; fails if any did.
fn signalled(args: &CancelArgs, all: Vec<(String, anyhow::Result<SignalResult>)>) -> anyhow::Result<ExitCode> {
    let mut done = Vec::new();
    let mut failed = false;
    for (label, r) in all {
        match r {
            Ok(r) if args.output.json() => done.push(r),
            Ok(r) => println!("{}", super::signal::describe(&r)),
            Err(e) => {
                eprintln!("error: job {label}: {}", without_job_prefix(label.parse().unwrap_or(0), &format!("{e:#}")));
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
