//! Slurm's client commands, for users and tools (submitit, workflow engines) that call
//! `sbatch`, `squeue`, `scancel`, `sacct` and `sinfo` and parse what they print. They are
//! this same binary under those names (links made by `berth install-slurm-commands`, or
//! shipped by a package): `main` looks at the name it was called by and runs the command
//! with Slurm's flags and Slurm's output, talking to the manager like any berth command.
//!
//! Errors print as Slurm's do (`squeue: error: ...`) and exit 1; usage mistakes are clap's
//! (exit 2). What is supported: docs/slurm.md.

pub mod format;
pub mod install;
mod sacct;
mod sbatch_cmd;
mod scancel;
mod sinfo;
mod squeue;
pub mod states;

use std::ffi::{OsStr, OsString};
use std::process::ExitCode;

use berth_model::api::{JobListQuery, JobView};
use berth_model::{JobId, JobState};

use crate::client::Client;

/// The Slurm commands berth answers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Sbatch,
    Squeue,
    Scancel,
    Sacct,
    Sinfo,
}

/// The names `install-slurm-commands` links; `srun` is among them for when it exists.
pub const LINKED: [&str; 6] = ["sbatch", "squeue", "scancel", "sacct", "sinfo", "srun"];

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Sbatch => "sbatch",
            Tool::Squeue => "squeue",
            Tool::Scancel => "scancel",
            Tool::Sacct => "sacct",
            Tool::Sinfo => "sinfo",
        }
    }
}

/// The Slurm command `argv0` names (by its file name), if any.
pub fn invoked_as(argv0: &OsStr) -> Option<Tool> {
    let name = std::path::Path::new(argv0).file_name()?.to_str()?;
    match name {
        "sbatch" => Some(Tool::Sbatch),
        "squeue" => Some(Tool::Squeue),
        "scancel" => Some(Tool::Scancel),
        "sacct" => Some(Tool::Sacct),
        "sinfo" => Some(Tool::Sinfo),
        // "srun" has its own entry (`commands::srun`, dispatched in main.rs first).
        _ => None,
    }
}

/// Runs `tool` with `args` (its own name first) and returns its exit status.
pub fn main(tool: Tool, args: Vec<OsString>) -> ExitCode {
    crate::service::init_logging("warn", crate::service::LogFormat::default());
    crate::credentials::choose(std::env::var("BERTH_CONTEXT").ok());
    let runtime = match crate::runtime(false) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{}: error: cannot start the async runtime: {e}", tool.name());
            return ExitCode::FAILURE;
        }
    };
    let run = async {
        match tool {
            Tool::Sbatch => sbatch_cmd::run(args).await,
            Tool::Squeue => squeue::run(args).await,
            Tool::Scancel => scancel::run(args).await,
            Tool::Sacct => sacct::run(args).await,
            Tool::Sinfo => sinfo::run(args).await,
        }
    };
    match runtime.block_on(run) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("{}: error: {e:#}", tool.name());
            ExitCode::FAILURE
        }
    }
}

/// A comma-separated list of job ids and array tasks (`-j 3,7,12_1`), as job ids (a task as
/// the job made for it).
pub async fn job_list(client: &crate::client::Client, list: &str) -> anyhow::Result<Vec<JobId>> {
    let refs = crate::job_ref::parse_list(list).map_err(anyhow::Error::msg)?;
    crate::job_ref::resolve(client, &refs).await
}

/// A comma-separated list of names (`-u alice,bob`, `-p gpu,cpu`).
pub fn names(list: &Option<String>) -> Vec<String> {
    list.iter().flat_map(|l| l.split(',')).map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

/// The one name of a list, if it has exactly one: the manager can filter on it.
pub fn single(names: &[String]) -> Option<String> {
    if names.len() == 1 { names.first().cloned() } else { None }
}

/// The jobs a command asks for: the manager filters by ids, states, a time window and one
/// user or queue; several users or queues, exact names and accounts are filtered here.
#[derive(Debug, Default)]
pub struct Wanted {
    pub ids: Option<Vec<JobId>>,
    /// `None`: any state.
    pub states: Option<Vec<JobState>>,
    /// Finished jobs too.
    pub all: bool,
    pub since: Option<jiff::Timestamp>,
    pub until: Option<jiff::Timestamp>,
    pub users: Vec<String>,
    pub partitions: Vec<String>,
    pub names: Vec<String>,
    pub accounts: Vec<String>,
}

impl Wanted {
    pub async fn fetch(&self, client: &Client) -> anyhow::Result<Vec<JobView>> {
        if self.states.as_ref().is_some_and(Vec::is_empty) || self.ids.as_ref().is_some_and(Vec::is_empty) {
            return Ok(Vec::new());
        }
        let joined = |v: Vec<String>| v.join(",");
        let q = JobListQuery {
            all: self.all,
            state: self.states.as_ref().map(|s| joined(s.iter().map(|s| s.as_str().to_string()).collect())),
            user: single(&self.users),
            queue: single(&self.partitions),
            ids: self.ids.as_ref().map(|i| joined(i.iter().map(|i| i.to_string()).collect())),
            since: self.since.map(|t| t.to_string()),
            until: self.until.map(|t| t.to_string()),
            ..Default::default()
        };
        let among = |list: &[String], v: Option<&String>| list.is_empty() || v.is_some_and(|v| list.contains(v));
        Ok(client
            .jobs(&q)
            .await?
            .into_iter()
            .filter(|j| among(&self.users, Some(&j.user)) && among(&self.partitions, Some(&j.queue)))
            .filter(|j| among(&self.names, j.name.as_ref()) && among(&self.accounts, j.project.as_ref()))
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn called_by_name() {
        assert_eq!(invoked_as(OsStr::new("/usr/local/bin/squeue")), Some(Tool::Squeue));
        assert_eq!(invoked_as(OsStr::new("sbatch")), Some(Tool::Sbatch));
        assert_eq!(invoked_as(OsStr::new("berth")), None);
        assert_eq!(invoked_as(OsStr::new("srun")), None, "srun is commands::srun's");
    }
}
