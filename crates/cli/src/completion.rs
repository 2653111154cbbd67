//! Shell completion that knows the cluster: `berth logs <TAB>` offers your jobs' ids, each with
//! its name and state, as `kubectl logs <TAB>` offers pods. The shells' scripts
//! (`berth completions SHELL`) call berth back on each TAB (`clap_complete`'s dynamic engine,
//! `BERTH_COMPLETE=SHELL berth -- WORDS`), so flags and subcommands come from the same definition and
//! job ids from the manager; with no manager reachable there are simply no ids to offer.

use std::time::Duration;

use berth_model::api::JobListQuery;
use clap_complete::engine::{ArgValueCandidates, CompletionCandidate};

/// The most jobs offered (the most recent first).
const MOST: u32 = 200;
/// A TAB must not hang on a manager that does not answer.
const PATIENCE: Duration = Duration::from_secs(2);

/// What a job-id argument completes to: [`job_ids`].
pub fn job_ids_arg() -> ArgValueCandidates {
    ArgValueCandidates::new(job_ids)
}

/// The ids of the caller's most recent jobs, unfinished and finished, with `name STATE` as help.
fn job_ids() -> Vec<CompletionCandidate> {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return vec![] };
    rt.block_on(async {
        let Ok(client) = crate::client::from_env() else { return vec![] };
        let q = JobListQuery { all: true, limit: Some(MOST), ..Default::default() };
        let Ok(Ok(jobs)) = tokio::time::timeout(PATIENCE, client.jobs(&q)).await else { return vec![] };
        jobs.iter()
            .map(|j| {
                let name = j.name.as_deref().unwrap_or("-");
                CompletionCandidate::new(crate::jobfields::display_id(j))
                    .help(Some(format!("{name} {}", j.state).into()))
            })
            .collect()
    })
}

/// Handles a completion request from a shell's script (`BERTH_COMPLETE` set) and exits; returns
/// otherwise. Call before anything writes to stdout.
pub fn complete_if_asked(cmd: impl Fn() -> clap::Command) {
    clap_complete::CompleteEnv::with_factory(cmd).var(VAR).complete();
}

/// The variable the scripts set to ask for completions: berth's own, so that a `COMPLETE` set
/// for something else in a user's environment cannot turn every command into a completion.
const VAR: &str = "BERTH_COMPLETE";

/// Writes the script that registers berth's completion in `shell`.
pub fn registration(shell: clap_complete::Shell, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    use clap_complete::env::EnvCompleter;
    let (var, name) = (VAR, "berth");
    match shell {
        clap_complete::Shell::Bash => clap_complete::env::Bash.write_registration(var, name, name, name, out),
        clap_complete::Shell::Zsh => clap_complete::env::Zsh.write_registration(var, name, name, name, out),
        clap_complete::Shell::Fish => clap_complete::env::Fish.write_registration(var, name, name, name, out),
        clap_complete::Shell::Elvish => clap_complete::env::Elvish.write_registration(var, name, name, name, out),
        clap_complete::Shell::PowerShell => {
            clap_complete::env::Powershell.write_registration(var, name, name, name, out)
        }
        _ => Err(std::io::Error::other(format!("no completion for {shell}"))),
    }
}
