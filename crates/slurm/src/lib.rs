//! `berth-slurm`: Slurm's client commands as berth speaks them, for the `berth` binary
//! called as `sbatch`, `squeue`, `scancel`, `sacct`, `sinfo`, `scontrol` and `srun`. Each
//! command is its flags (clap) and a `run` that takes a [`Connect`] (the client, asked for
//! only when needed) and writes to a `std::io::Write`; the binary parses, picks the context
//! and passes its standard output.
//!
//! - [`squeue`], [`sacct`], [`sinfo`], [`scontrol`] (`show`, `requeue`): the commands whole;
//! - [`sacctmgr`], [`sshare`]: the read-only account queries tools make, from berth's users,
//!   projects and usage (`assoc.rs`);
//! - [`srun`]: its flags and a job step inside a job (tasks over the job's kernels, their
//!   output and variables); outside a job srun is `berth run`'s, so the binary's;
//! - [`sbatch`]: `#SBATCH` directives (and sbatch's options) translated into `berth submit`
//!   flags, with the task directives combined per node (the submit itself is the binary's, as
//!   is scancel's selection, shared with `berth cancel`);
//! - [`states`]: berth's job and node states in Slurm's words (`PD`, `RUNNING`, `drain`),
//!   and Slurm's state lists (`-t PD,R`) back;
//! - [`format`]: squeue's and sinfo's `-o`/`-O` output formats and hostlists (`n[1-4]`);
//! - [`Wanted`]: the job query behind squeue, sacct and scontrol, through `berth-client`,
//!   with arrays folded as Slurm shows them ([`fold_arrays`]);
//! - what berth's own commands share with them: [`job_ref`] (`12_7`, array tasks),
//!   [`jobfields`] (`sacct -o` and `berth history -o` columns), [`when`] (times as typed and
//!   printed);
//! - [`getopt`]: long options' prefixes as `getopt_long` reads them (`--part`);
//! - [`Tool`], [`invoked_as`]: which command a link to berth is; [`Error`]: why one failed.
//!
//! What is supported: docs/slurm.md.

mod assoc;
pub mod error;
#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
pub mod format;
pub mod getopt;
pub mod job_ref;
pub mod jobfields;
mod query;
pub mod sacct;
pub mod sacctmgr;
pub mod sbatch;
pub mod sbatch_line;
pub mod scancel;
pub mod scontrol;
pub mod scontrol_config;
mod scontrol_nodes;
pub mod sinfo;
pub mod squeue;
pub mod srun;
mod srun_args;
mod srun_io;
mod srun_plan;
pub mod sshare;
pub mod states;
pub mod when;

use std::ffi::OsStr;

use berth_client::Client;
use berth_client::credentials::Credentials;
use berth_model::JobId;
pub use error::{Error, Result};
pub use query::{Wanted, fold_arrays};

/// The Slurm release whose commands berth answers as: `--version` prints `slurm 22.05.8`
/// (as Slurm built from its own sources does; Debian's package says `slurm-wlm`), and
/// `scontrol show config` says `SLURM_VERSION = 22.05.8`.
pub const SLURM_VERSION: &str = "22.05.8";

/// What every command's `-V`/`--version` prints.
pub fn version_line() -> String {
    format!("slurm {SLURM_VERSION}")
}

/// The Slurm commands berth answers to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Sbatch,
    Squeue,
    Scancel,
    Sacct,
    Sinfo,
    Scontrol,
}

/// The names `install-slurm-commands` links: [`Tool`]'s, `srun` (`commands::srun`) and the
/// accounting queries ([`ACCOUNTING`]).
pub const LINKED: [&str; 9] =
    ["sbatch", "squeue", "scancel", "sacct", "sinfo", "scontrol", "srun", "sacctmgr", "sshare"];

/// `sacctmgr` and `sshare`, read-only (the binary dispatches them by name beside [`Tool`]'s).
pub const ACCOUNTING: [&str; 2] = ["sacctmgr", "sshare"];

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Sbatch => "sbatch",
            Tool::Squeue => "squeue",
            Tool::Scancel => "scancel",
            Tool::Sacct => "sacct",
            Tool::Sinfo => "sinfo",
            Tool::Scontrol => "scontrol",
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
        "scontrol" => Some(Tool::Scontrol),
        // "srun" has its own entry (`commands::srun`, dispatched in main.rs first).
        _ => None,
    }
}

/// The accounting command (`sacctmgr`, `sshare`) `argv0` names, if any.
pub fn accounting_as(argv0: &OsStr) -> Option<&'static str> {
    let name = std::path::Path::new(argv0).file_name()?.to_str()?;
    ACCOUNTING.into_iter().find(|a| *a == name)
}

/// How a command gets its client: called once it needs the manager, so that what needs none
/// (`scontrol show hostnames` in a job, `sacct -e`, a usage mistake) runs without one.
pub trait Connect: Fn() -> Result<Client, berth_client::Error> {}

impl<F: Fn() -> Result<Client, berth_client::Error>> Connect for F {}

/// The credential of the job this runs in: its step token (`BERTH_STEP_TOKEN`, which acts on
/// that job only) for its manager at `url` (`BERTH_URL`), trusting `BERTH_CA_FILE`.
pub fn step_credentials(url: String, token: String) -> Credentials {
    let ca_file = std::env::var("BERTH_CA_FILE").ok().filter(|v| !v.is_empty()).map(Into::into);
    Credentials { url, token: Some(token), ca_file, socket: None, data_dir: None }
}

/// A comma-separated list of job ids and array tasks (`-j 3,7,12_1`), as job ids (a task as
/// the job made for it).
pub async fn job_list(client: &Client, list: &str) -> Result<Vec<JobId>> {
    let refs = job_ref::parse_list(list).map_err(Error::Failed)?;
    job_ref::resolve(client, &refs).await
}

/// A comma-separated list of names (`-u alice,bob`, `-p gpu,cpu`).
pub fn names(list: &Option<String>) -> Vec<String> {
    list.iter().flat_map(|l| l.split(',')).map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
}

/// `-M`/`--clusters` of squeue and sacct: `all` or berth's own cluster name (comma lists of
/// them too) select this cluster; another name is refused, as Slurm refuses a cluster its
/// database does not know.
pub fn check_clusters(list: Option<&str>) -> Result<()> {
    for name in list.iter().flat_map(|l| l.split(',')).map(str::trim).filter(|n| !n.is_empty()) {
        if !name.eq_ignore_ascii_case("all") && name != scontrol_config::CLUSTER_NAME {
            return Err(Error::failed(format!(
                "no cluster '{name}' known by database: berth is one cluster, named {0}; use -M {0} or -M all",
                scontrol_config::CLUSTER_NAME
            )));
        }
    }
    Ok(())
}

/// The one name of a list, if it has exactly one: the manager can filter on it.
pub fn single(names: &[String]) -> Option<String> {
    if names.len() == 1 { names.first().cloned() } else { None }
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
        assert_eq!(accounting_as(OsStr::new("/opt/bin/sshare")), Some("sshare"));
        assert_eq!(accounting_as(OsStr::new("squeue")), None);
    }

    #[test]
    fn clusters_all_or_berths_own() {
        for ok in [None, Some("all"), Some("berth"), Some("ALL"), Some("berth,all")] {
            assert!(check_clusters(ok).is_ok(), "{ok:?}");
        }
        let e = check_clusters(Some("berth,other")).unwrap_err().to_string();
        assert!(e.contains("no cluster 'other' known by database") && e.contains("-M all"), "{e}");
    }
}
