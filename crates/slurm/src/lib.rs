//! `berth-slurm`: Slurm's client commands as berth speaks them, for the `berth` binary
//! called as `sbatch`, `squeue`, `scancel`, `sacct`, `sinfo`, `scontrol` (and `srun`). This
//! crate is the part with no terminal and no command line of its own:
//!
//! - [`sbatch`]: `#SBATCH` directives (and sbatch's options) translated into `berth submit`
//!   flags, with the task directives combined per node;
//! - [`states`]: berth's job and node states in Slurm's words (`PD`, `RUNNING`, `drain`),
//!   and Slurm's state lists (`-t PD,R`) back;
//! - [`format`]: squeue's and sinfo's `-o`/`-O` output formats and hostlists (`n[1-4]`);
//! - [`Wanted`]: the job query behind squeue, sacct and scontrol, through `berth-client`,
//!   with arrays folded as Slurm shows them ([`fold_arrays`]);
//! - [`Tool`], [`invoked_as`]: which command a link to berth is.
//!
//! The commands themselves (their clap flags, what they print, exit codes) are the CLI's
//! (`crates/cli/src/slurm/`), as is `srun` (`commands/srun*.rs`), whose job steps run
//! through the CLI's terminal and stream code. What is supported: docs/slurm.md.

#[cfg(any(test, feature = "test-support"))]
pub mod fixtures;
pub mod format;
mod query;
pub mod sbatch;
pub mod states;

use std::ffi::OsStr;

pub use query::{Wanted, fold_arrays};

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

/// The names `install-slurm-commands` links; `srun` is among them for when it exists.
pub const LINKED: [&str; 7] = ["sbatch", "squeue", "scancel", "sacct", "sinfo", "scontrol", "srun"];

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

/// A comma-separated list of names (`-u alice,bob`, `-p gpu,cpu`).
pub fn names(list: &Option<String>) -> Vec<String> {
    list.iter().flat_map(|l| l.split(',')).map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()
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
    }
}
