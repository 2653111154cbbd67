//! Slurm's client commands, for users and tools (submitit, workflow engines) that call
//! `sbatch`, `squeue`, `scancel`, `sacct`, `sinfo` and `scontrol` and parse what they print. They are
//! this same binary under those names (links made by `berth install-slurm-commands`, or
//! shipped by a package): `main` looks at the name it was called by and runs the command
//! with Slurm's flags and Slurm's output, talking to the manager like any berth command.
//!
//! The commands themselves (their flags, what they print) are the `berth-slurm` crate's; this
//! is the glue: the async runtime, the client of the chosen context, standard output, and the
//! commands that go through berth's own submit and cancel paths (`sbatch_cmd`, `scancel`).
//! Errors print as Slurm's do (`squeue: error: ...`) and exit 1; usage mistakes are clap's
//! (exit 2). What is supported: docs/slurm.md.

pub mod install;
mod sbatch_cmd;
mod scancel;

use std::ffi::OsString;
use std::process::ExitCode;

use berth_slurm::getopt;
pub use berth_slurm::{LINKED, Tool, invoked_as};

use crate::client::{Client, credentials};

/// Runs `tool` with `args` (its own name first) and returns its exit status.
pub fn main(tool: Tool, args: Vec<OsString>) -> ExitCode {
    crate::service::init_logging("warn", crate::service::LogFormat::default());
    crate::client::choose(std::env::var("BERTH_CONTEXT").ok());
    let runtime = match crate::runtime(false) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{}: error: cannot start the async runtime: {e}", tool.name());
            return ExitCode::FAILURE;
        }
    };
    let out = &mut std::io::stdout();
    let run = async {
        let done = |r: berth_slurm::Result<()>| r.map(|()| ExitCode::SUCCESS).map_err(anyhow::Error::from);
        match tool {
            Tool::Sbatch => sbatch_cmd::run(args).await,
            Tool::Squeue => done(berth_slurm::squeue::run(getopt::parse(tool, args), &connect, out).await),
            Tool::Scancel => scancel::run(args).await,
            Tool::Sacct => done(berth_slurm::sacct::run(getopt::parse(tool, args), &connect, out).await),
            Tool::Sinfo => done(berth_slurm::sinfo::run(getopt::parse(tool, args), &connect, out).await),
            Tool::Scontrol => Ok(berth_slurm::scontrol::run(args, &connect, out).await?),
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

/// Runs `sacctmgr` or `sshare` (`name`, read-only queries) with `args` (its own name first).
pub fn accounting_main(name: &'static str, args: Vec<OsString>) -> ExitCode {
    use clap::Parser;
    crate::client::choose(std::env::var("BERTH_CONTEXT").ok());
    let runtime = match crate::runtime(false) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{name}: error: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let out = &mut std::io::stdout();
    let run = async {
        match name {
            "sshare" => berth_slurm::sshare::run(berth_slurm::sshare::Args::parse_from(args), &connect, out).await,
            _ => berth_slurm::sacctmgr::run(berth_slurm::sacctmgr::Args::parse_from(args), &connect, out).await,
        }
    };
    match runtime.block_on(run) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{name}: error: {e}");
            if e.is_usage() { ExitCode::from(2) } else { ExitCode::FAILURE }
        }
    }
}

/// The client of the context this command runs in (`BERTH_CONTEXT`).
pub fn connect() -> Result<Client, berth_client::Error> {
    Client::new(credentials::load_context(crate::client::chosen())?)
}
