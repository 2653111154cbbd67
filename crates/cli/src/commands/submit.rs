//! `berth submit`: build a job spec from flags, a job file or a batch script, send it, and
//! with `--wait` show its output as it runs and exit with its exit code (like `srun`).

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context;
use berth_model::JobSpec;
use berth_model::api::SubmitRequest;
use clap::Args;

use crate::UsageError;
use crate::client::Client;
use crate::commands::wait;
use crate::output::{self, OutputArgs};
use crate::specflags::SpecFlags;
use crate::{jobfile, script};

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  berth submit --gpus 1 --cpus 4 --mem 16GiB -- python train.py --epochs 3
  berth submit job.toml                  # flags on the command line override the file
  berth submit train.sh ARG...           # #BERTH / #SBATCH lines at the top give flags
  berth submit --output-file 'logs/%x-%j.out' -- python train.py   # output to a file, as Slurm's -o

Memory units: 4GiB, 4Gi and 4G (as in Slurm) are 4×2^30 bytes; 4GB is 4×10^9 bytes.")]
pub struct SubmitArgs {
    #[command(flatten)]
    pub job: JobArgs,

    /// Wait until the job ends, showing its stdout and stderr as it runs (like srun), and
    /// exit with its exit code. Ctrl-C stops waiting and leaves the job running
    #[arg(long)]
    pub wait: bool,

    /// With --wait: do not show the job's output, only its end
    #[arg(short, long, requires = "wait")]
    pub quiet: bool,

    /// Print only the job id, for scripts (like sbatch --parsable):
    /// `id=$(berth submit --parsable -- true)`
    #[arg(long, conflicts_with = "wait")]
    pub parsable: bool,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// What a job is: the job flags, and a job file, script or command (`submit` and `run`).
#[derive(Debug, Args)]
pub struct JobArgs {
    #[command(flatten)]
    pub flags: SpecFlags,

    /// A job file (*.toml), a batch script and its arguments, or a command
    #[arg(value_name = "FILE|COMMAND")]
    pub target: Vec<OsString>,

    /// The program to run and its arguments
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
}

pub async fn run(args: SubmitArgs) -> anyhow::Result<ExitCode> {
    let (mut spec, code) = build_job(&args.job)?;
    let client = crate::client::from_env()?;
    attach_code(&client, &mut spec, code.as_deref()).await?;
    crate::run_as::note_before_submit(&client, &spec).await;
    let job = client.submit(&SubmitRequest { spec }).await?;
    if args.output.json() {
        output::print_json(&job)?;
    } else if args.parsable {
        println!("{}", job.id);
    } else if args.wait {
        // Stdout is the job's own output from here on, as with srun: `> out.txt` gets it alone.
        eprintln!("submitted job {}", job.id);
    } else {
        println!("submitted job {}", job.id);
    }
    if !args.wait {
        return Ok(ExitCode::SUCCESS);
    }
    // JSON output stays one parseable document: no job output mixed in.
    let show = if args.quiet || args.output.json() { wait::Show::Quiet } else { wait::Show::Output };
    Ok(ExitCode::from(wait::wait_for(&client, job.id, show).await?))
}

/// Sends the code in `dir` (`--code`) and records its snapshot in `spec`.
pub async fn attach_code(client: &Client, spec: &mut JobSpec, dir: Option<&Path>) -> anyhow::Result<()> {
    if let Some(dir) = dir {
        spec.code = Some(crate::transfer::code::upload(client, dir).await?);
        spec.validate().map_err(|e| UsageError::error(e.0))?;
    }
    Ok(())
}

/// Turns the arguments into a valid spec, without talking to the manager (`submit` and
/// `run`); a `--code` directory is for the caller to send.
pub fn build_job(args: &JobArgs) -> anyhow::Result<(JobSpec, Option<std::path::PathBuf>)> {
    let spec = build_spec(args)?;
    let mut cli = args.flags.clone();
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    cli.resolve_workdir(&cwd);
    let code = cli.code.clone().or_else(|| job_file_code(args)).map(std::path::PathBuf::from);
    if code.is_some() && (spec.workdir.is_some() || spec.image.is_some()) {
        let what = if spec.image.is_some() { "--image" } else { "--workdir" };
        return Err(UsageError::error(format!(
            "--code runs a process job in a fresh copy of the code: it cannot be combined with {what}"
        )));
    }
    Ok((spec, code))
}

/// The `code` of the job file among the arguments, if any (relative to the file).
fn job_file_code(args: &JobArgs) -> Option<String> {
    let first = args.target.first()?.to_str()?;
    if !first.ends_with(".toml") {
        return None;
    }
    jobfile::load(Path::new(first)).ok()?.flags.code
}

/// Turns the arguments into a valid spec, without talking to the manager.
pub fn build_spec(args: &JobArgs) -> anyhow::Result<JobSpec> {
    let target = utf8_args(&args.target, 1)?;
    let after_dashes = utf8_args(&args.command, target.len() + 1)?;
    let cwd = std::env::current_dir().context("cannot read the current directory")?;

    let (base, command) = match target.first() {
        None => (SpecFlags::default(), after_dashes),
        Some(file) if file.ends_with(".toml") => {
            if target.len() > 1 {
                return Err(UsageError::error(format!(
                    "a job file takes no arguments (got `{}`): to replace its command use `berth submit {file} -- \
                     COMMAND...`",
                    target[1]
                )));
            }
            let loaded = jobfile::load(Path::new(file))?;
            let command = if after_dashes.is_empty() { loaded.command.unwrap_or_default() } else { after_dashes };
            if command.is_empty() && !loaded.flags.has_preset() && !args.flags.has_preset() {
                return Err(UsageError::error(format!(
                    "job file {file} has no `command` or `script`: add one, or give the command after `--`"
                )));
            }
            (loaded.flags, command)
        }
        Some(first) => match script::read_if_script(Path::new(first))? {
            Some(text) => {
                let name = Path::new(first).file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                let mut rest = target[1..].to_vec();
                rest.extend(after_dashes);
                let s = script::parse(&text, &name, rest)?;
                for w in &s.warnings {
                    eprintln!("warning: {w}");
                }
                for n in &s.notes {
                    eprintln!("note: {n}");
                }
                // `#SBATCH --chdir=runs` is relative to where sbatch runs, as in Slurm.
                let mut flags = s.flags;
                flags.resolve_workdir(&cwd);
                (flags, s.command)
            }
            None => {
                if let Some(why) = script::not_runnable(first, std::env::var_os("PATH").as_deref()) {
                    return Err(UsageError::error(why));
                }
                let mut cmd = target.clone();
                cmd.extend(after_dashes);
                (SpecFlags::default(), cmd)
            }
        },
    };

    let mut cli = args.flags.clone();
    cli.resolve_workdir(&cwd);
    let flags = base.overlay(cli);
    let preset = if flags.jupyter { Some("jupyter") } else { flags.tensorboard.as_ref().map(|_| "tensorboard") };
    let name = default_name(&command).or(preset.map(String::from));
    let mut spec = flags.to_spec(command);
    spec.environment = flags.environment().map_err(|e| UsageError::error(e.to_string()))?;
    if spec.name.is_none() {
        spec.name = name;
    }
    let skipped = flags.submitted_from(&mut spec, &cwd, std::env::vars_os());
    if !skipped.is_empty() {
        eprintln!("warning: not exported (not UTF-8): {}", skipped.join(", "));
    }
    spec.validate().map_err(|e| UsageError::error(e.0))?;
    Ok(spec)
}

/// Checks that every argument is UTF-8 (the API carries text). `first` is the 1-based number
/// of the first one, counted over everything after the flags, so the message points at it.
pub(crate) fn utf8_args(args: &[OsString], first: usize) -> anyhow::Result<Vec<String>> {
    args.iter()
        .enumerate()
        .map(|(i, a)| {
            a.to_str().map(str::to_string).ok_or_else(|| {
                UsageError::error(format!(
                    "argument {} is not valid UTF-8: berth passes commands as UTF-8 text",
                    first + i
                ))
            })
        })
        .collect()
}

/// The program's file name, so `berth ps` shows something better than nothing.
fn default_name(command: &[String]) -> Option<String> {
    let prog = command.first()?;
    Path::new(prog).file_name().map(|n| n.to_string_lossy().into_owned()).filter(|n| !n.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(flatten)]
        a: SubmitArgs,
    }

    fn spec(args: &[&str]) -> anyhow::Result<JobSpec> {
        let t = T::try_parse_from(std::iter::once("submit").chain(args.iter().copied()))?;
        build_spec(&t.a.job)
    }

    #[test]
    fn command_after_dashes_and_without() {
        let s = spec(&["--cpus", "2", "--", "python", "train.py", "--epochs", "3"]).unwrap();
        assert_eq!(s.command, ["python", "train.py", "--epochs", "3"]);
        assert_eq!(s.resources.cpu_milli, 2000);
        assert_eq!(s.name.as_deref(), Some("python"));
        let s = spec(&["--mem", "2GiB", "sleep", "10"]).unwrap();
        assert_eq!(s.command, ["sleep", "10"]);
        assert!(s.env.is_empty());
    }

    #[test]
    fn a_job_runs_where_it_was_submitted_with_the_submitters_environment() {
        let s = spec(&["--", "true"]).unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(s.workdir.as_deref(), cwd.to_str(), "like sbatch: the directory submitted from");
        assert_eq!(s.submit_env.get("PATH"), std::env::var("PATH").ok().as_ref(), "the submitter's PATH goes along");
        assert!(s.submit_env.keys().all(|k| !k.starts_with("BERTH_")), "berth's own never do");
        let s = spec(&["--export", "NONE", "--job-dir", "--", "true"]).unwrap();
        assert!(s.submit_env.is_empty() && s.workdir.is_none());
        let s = spec(&["--export", "PATH,X=1", "--", "true"]).unwrap();
        assert_eq!(s.submit_env.keys().collect::<Vec<_>>(), ["PATH", "X"]);
        // A container runs where its image says, with only what --export names.
        let s = spec(&["--image", "busybox", "--", "true"]).unwrap();
        assert!(s.workdir.is_none() && s.submit_env.is_empty());
        let s = spec(&["--image", "busybox", "--export", "ALL,X=1", "--", "true"]).unwrap();
        assert_eq!(s.submit_env.keys().collect::<Vec<_>>(), ["X"]);
        assert!(spec(&["--job-dir", "--workdir", "/x", "--", "true"]).is_err(), "one or the other");
    }

    #[test]
    fn empty_command_is_a_usage_error() {
        let e = spec(&["--cpus", "1"]).unwrap_err();
        assert!(e.downcast_ref::<UsageError>().is_some());
        assert!(e.to_string().contains("empty command"), "{e}");
    }

    #[test]
    fn flags_override_the_job_file() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("job.toml");
        std::fs::write(&p, "command = [\"python\", \"a.py\"]\ncpus = 2\nmem = \"8GiB\"\n[env]\nA = \"1\"\n").unwrap();
        let f = p.to_str().unwrap();
        let s = spec(&["--cpus", "4", "--env", "B=2", f]).unwrap();
        assert_eq!(s.resources.cpu_milli, 4000);
        assert_eq!(s.resources.mem_bytes, 8 << 30);
        assert_eq!(s.env.len(), 2);
        assert_eq!(s.name.as_deref(), Some("job"));
        let s = spec(&[f, "--", "echo", "hi"]).unwrap();
        assert_eq!(s.command, ["echo", "hi"]);
        let e = spec(&[f, "extra"]).unwrap_err();
        assert!(e.to_string().contains("takes no arguments"), "{e}");
    }

    #[test]
    fn scripts_with_arguments() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("run.sh");
        std::fs::write(&p, "#!/bin/sh\n#BERTH --cpus 3\necho \"$@\"\n").unwrap();
        let f = p.to_str().unwrap();
        let s = spec(&["--mem", "1GiB", f, "a", "--", "--b"]).unwrap();
        assert_eq!(s.resources.cpu_milli, 3000);
        assert_eq!(s.command[3..], ["run.sh", "a", "--b"]);
        let s = spec(&["--cpus", "1", f, "--", "-x"]).unwrap();
        assert_eq!(s.resources.cpu_milli, 1000, "the command line beats #BERTH");
        assert_eq!(s.command.last().map(String::as_str), Some("-x"));
    }

    #[test]
    fn a_relative_sbatch_chdir_is_relative_to_the_submit_dir() {
        // It reached the manager relative, which refused it: "workdir must be an absolute path".
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("ckpt.sh");
        std::fs::write(&p, "#!/bin/sh\n#SBATCH --chdir=runs\ntrue\n").unwrap();
        let s = spec(&[p.to_str().unwrap()]).unwrap();
        let cwd = std::env::current_dir().unwrap();
        assert_eq!(s.workdir.as_deref(), cwd.join("runs").to_str());
        std::fs::write(&p, "#!/bin/sh\n#BERTH --workdir out\ntrue\n").unwrap();
        assert_eq!(spec(&[p.to_str().unwrap()]).unwrap().workdir.as_deref(), cwd.join("out").to_str());
    }

    #[test]
    fn relative_workdir_becomes_absolute() {
        let s = spec(&["--workdir", "out", "--", "true"]).unwrap();
        let w = s.workdir.unwrap();
        assert!(w.starts_with('/') && w.ends_with("/out"), "{w}");
    }
}
