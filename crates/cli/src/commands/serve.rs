//! `berth serve`: model serving endpoints, an HTTP service at `/serve/NAME/` on the app
//! listener made of replica jobs. This module defines the command tree and the commands that
//! change an endpoint (create, update, scale, public, rm); `serve_show.rs` has those that
//! read one (ls, show, logs) and its tokens.
//!
//! A replica's job is described by the very job flags `berth submit` takes (`specflags.rs`),
//! the endpoint's own by `serveflags.rs`, and a service file by `servefile.rs`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context;
use berth_model::endpoint::{CreateEndpoint, EndpointSpec, UpdateEndpoint};
use clap::{Args, Subcommand, ValueEnum};

use crate::UsageError;
use crate::commands::serve_show::{self, TokenCommand};
use crate::commands::submit::{attach_code, utf8_args};
use crate::output::{self, OutputArgs};
use crate::serveflags::{self, ServeFlags};
use crate::specflags::SpecFlags;

#[derive(Debug, Args)]
pub struct ServeArgs {
    #[command(subcommand)]
    pub command: ServeCommand,
}

#[derive(Debug, Subcommand)]
pub enum ServeCommand {
    /// Create an endpoint: replicas of a server, reachable at /serve/NAME/ on the app listener
    #[command(after_help = "\
Examples:
  berth serve create hello --replicas 2 -- sh -c 'exec python3 -m http.server --bind 127.0.0.1 $PORT'
  berth serve create llm --gpus 1 --health /ready --min 0 --max 4 --target-inflight 8 -- python3 serve.py
  berth serve create svc.toml --replicas 3     # a service file; flags override it

A replica gets the port to listen on in $PORT unless --port says which it uses. Flags that
make no sense for a replica (--array, --time-limit, --nodes, --app, ...) are refused.")]
    Create(CreateArgs),
    /// Change an endpoint: new flags or command roll out one replica at a time
    Update(UpdateArgs),
    /// Set how many replicas an endpoint runs
    Scale {
        name: String,
        #[arg(value_parser = clap::value_parser!(u32).range(0..=berth_model::endpoint::MAX_REPLICAS as i64))]
        replicas: u32,
    },
    /// Let anyone call an endpoint without a token (on), or only token holders (off)
    Public { name: String, state: OnOff },
    /// List endpoints with their replicas, rollout and traffic
    #[command(alias = "list")]
    Ls {
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Show an endpoint and its replicas
    Show {
        name: String,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Print a replica's output (as `berth logs` does for its job)
    Logs(serve_show::LogsArgs),
    /// Remove an endpoint and stop its replicas
    Rm { name: String },
    /// The tokens that may call an endpoint: create, ls, revoke
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnOff {
    On,
    Off,
}

#[derive(Debug, Args)]
#[command(mut_args(hide_job_only))]
pub struct CreateArgs {
    /// The endpoint's name (lowercase letters, digits and -), or a service file (*.toml)
    #[arg(value_name = "NAME|FILE.toml")]
    pub target: String,
    #[command(flatten)]
    pub serve: ServeFlags,
    #[command(flatten)]
    pub job: SpecFlags,
    /// The server each replica runs, and its arguments
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Args)]
#[command(mut_args(hide_job_only))]
pub struct UpdateArgs {
    /// The endpoint's name (`--name` is the replica jobs', as for `berth submit`)
    #[arg(id = "endpoint", value_name = "NAME")]
    pub name: String,
    #[command(flatten)]
    pub serve: ServeFlags,
    #[command(flatten)]
    pub job: SpecFlags,
    /// A new command for the replicas
    #[arg(last = true, value_name = "COMMAND")]
    pub command: Vec<OsString>,
    #[command(flatten)]
    pub output: OutputArgs,
}

/// The job flags a replica cannot take (`EndpointSpec::validate` refuses them, saying why):
/// parsed as for `berth submit`, since they share one definition, but left out of the help.
const JOB_ONLY: [&str; 10] =
    ["array", "dependency", "begin", "time_limit", "signal", "nodes", "kernels", "apps", "jupyter", "tensorboard"];

fn hide_job_only(a: clap::Arg) -> clap::Arg {
    // Only ever hides: a flag hidden for `submit` stays hidden.
    if JOB_ONLY.contains(&a.get_id().as_str()) { a.hide(true) } else { a }
}

pub async fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    match args.command {
        ServeCommand::Create(a) => create(a).await,
        ServeCommand::Update(a) => update(a).await,
        ServeCommand::Scale { name, replicas } => {
            let req = UpdateEndpoint { replicas: Some(replicas), ..Default::default() };
            let v = crate::client::from_env()?.update_endpoint(&name, &req).await?;
            println!("endpoint {name}: {} wanted, {} ready", berth_model::replica::replicas(v.desired), v.ready);
            if let Some(a) = &v.spec.autoscale {
                eprintln!("note: it autoscales between {} and {}: the count will follow the load", a.min, a.max);
            }
            Ok(ExitCode::SUCCESS)
        }
        ServeCommand::Public { name, state } => {
            let req = UpdateEndpoint { public: Some(state == OnOff::On), ..Default::default() };
            let v = crate::client::from_env()?.update_endpoint(&name, &req).await?;
            match v.spec.public {
                true => println!("endpoint {name} is public: anyone may call it without a token"),
                false => println!("endpoint {name} is private: calls need a token (berth serve token create {name})"),
            }
            Ok(ExitCode::SUCCESS)
        }
        ServeCommand::Ls { output } => serve_show::list(output).await,
        ServeCommand::Show { name, output } => serve_show::show(&name, output).await,
        ServeCommand::Logs(a) => serve_show::logs(a).await,
        ServeCommand::Rm { name } => {
            crate::client::from_env()?.remove_endpoint(&name).await?;
            println!("removed endpoint {name}");
            Ok(ExitCode::SUCCESS)
        }
        ServeCommand::Token(t) => serve_show::token(t).await,
    }
}

/// The endpoint's spec from the arguments: a service file (if the target is one) below the
/// flags, the command after `--` replacing the file's; and the `--code` directory to send.
pub fn build_spec(args: &CreateArgs, cwd: &Path) -> anyhow::Result<(EndpointSpec, Option<PathBuf>)> {
    let after_dashes = utf8_args(&args.command, 2)?;
    let (name, serve, job, file_command) = if args.target.ends_with(".toml") {
        let l = crate::servefile::load(Path::new(&args.target)).map_err(|e| UsageError::error(format!("{e:#}")))?;
        let name = l.name.unwrap_or_default();
        (name, l.serve, l.job.flags, l.job.command)
    } else {
        (args.target.clone(), ServeFlags::default(), SpecFlags::default(), None)
    };
    let command = if after_dashes.is_empty() { file_command.unwrap_or_default() } else { after_dashes };
    let mut cli = args.job.clone();
    cli.resolve_workdir(cwd);
    let job = job.overlay(cli);
    let serve = serve.overlay(args.serve.clone());
    let spec = serveflags::new_spec(&name, &serve, &job, command, cwd, std::env::vars_os())
        .map_err(|e| UsageError::error(e.to_string()))?;
    spec.validate().map_err(|e| UsageError::error(e.0))?;
    Ok((spec, job.code.map(PathBuf::from)))
}

async fn create(args: CreateArgs) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let (mut spec, code) = build_spec(&args, &cwd)?;
    let client = crate::client::from_env()?;
    attach_code(&client, &mut spec.job, code.as_deref()).await?;
    let name = spec.name.clone();
    let view = client.create_endpoint(&CreateEndpoint { spec }).await?;
    if args.output.json() {
        output::print_json(&view)?;
        return Ok(ExitCode::SUCCESS);
    }
    let url = serve_show::endpoint_url(&view);
    println!("created endpoint {name}: {url}");
    serve_show::explain_url(&url);
    if !view.spec.public {
        eprintln!("calls need a token: berth serve token create {name}");
    }
    eprintln!("watch its replicas get ready: berth serve show {name}");
    Ok(ExitCode::SUCCESS)
}

async fn update(args: UpdateArgs) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let command = utf8_args(&args.command, 2)?;
    let client = crate::client::from_env()?;
    let view = client.endpoint(&args.name).await?;
    let mut spec = view.spec.clone();
    args.serve.apply(&mut spec).map_err(UsageError::error)?;
    let mut job = args.job.clone();
    job.resolve_workdir(&cwd);
    let command = Some(command).filter(|c| !c.is_empty());
    serveflags::overlay_job(&mut spec.job, &job, command).map_err(|e| UsageError::error(e.to_string()))?;
    if let Some(code) = job.code.as_deref() {
        attach_code(&client, &mut spec.job, Some(Path::new(code))).await?;
    }
    spec.validate().map_err(|e| UsageError::error(e.0))?;
    let req = update_request(&view.spec, spec);
    if req.spec.is_none() && req.replicas.is_none() && req.public.is_none() {
        eprintln!("endpoint {}: nothing to change", args.name);
        return Ok(ExitCode::SUCCESS);
    }
    let rolls = req.spec.is_some();
    let v = client.update_endpoint(&args.name, &req).await?;
    if args.output.json() {
        output::print_json(&v)?;
    } else if rolls {
        println!("updated endpoint {}: revision {}, rolling out one replica at a time", v.name, v.revision);
        eprintln!("follow it: berth serve show {} (a revision that never gets ready rolls back)", v.name);
    } else {
        println!("updated endpoint {}", v.name);
    }
    Ok(ExitCode::SUCCESS)
}

/// The smallest request that makes `old` into `new`: a count or public access alone changes
/// no replica, so they go as such and only a change to anything else sends a new spec (which
/// the manager rolls out as a new revision).
fn update_request(old: &EndpointSpec, new: EndpointSpec) -> UpdateEndpoint {
    let replicas = Some(new.replicas).filter(|r| *r != old.replicas);
    let public = Some(new.public).filter(|p| *p != old.public);
    let rest_same = EndpointSpec { replicas: old.replicas, public: old.public, ..new.clone() } == *old;
    if rest_same {
        UpdateEndpoint { spec: None, replicas, public }
    } else {
        UpdateEndpoint { spec: Some(new), ..Default::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct T {
        #[command(subcommand)]
        c: ServeCommand,
    }

    fn create_args(args: &[&str]) -> CreateArgs {
        match T::try_parse_from(["serve", "create"].iter().chain(args)).map(|t| t.c) {
            Ok(ServeCommand::Create(a)) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn create_from_flags_and_from_a_file() {
        let cwd = Path::new("/home/a");
        let a = create_args(&["hello", "--replicas", "2", "--", "sh", "-c", "exec server $PORT"]);
        let s = build_spec(&a, cwd).unwrap().0;
        assert_eq!((s.name.as_str(), s.replicas), ("hello", 2));
        assert_eq!(s.job.command, ["sh", "-c", "exec server $PORT"]);
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("svc.toml");
        std::fs::write(&f, "name = \"llm\"\nreplicas = 3\ncpus = 2\ncommand = [\"serve\"]\n").unwrap();
        let a = create_args(&[f.to_str().unwrap(), "--replicas", "5", "--mem", "2GiB"]);
        let s = build_spec(&a, cwd).unwrap().0;
        assert_eq!(
            (s.name.as_str(), s.replicas, s.job.command.as_slice()),
            ("llm", 5, ["serve".to_string()].as_slice())
        );
        assert_eq!((s.job.resources.cpu_milli, s.job.resources.mem_bytes), (2000, 2 << 30));
        let a = create_args(&[f.to_str().unwrap(), "--", "other"]);
        assert_eq!(build_spec(&a, cwd).unwrap().0.job.command, ["other"]);
    }

    #[test]
    fn mistakes_are_usage_errors() {
        let cwd = Path::new("/home/a");
        for (args, says) in [
            (&["Hello", "--", "x"][..], "invalid endpoint name"),
            (&["hello"][..], "needs a command"),
            (&["hello", "--time-limit", "1h", "--", "x"][..], "no time limit"),
            (&["hello", "--min", "1", "--max", "2", "--", "x"][..], "needs a target"),
        ] {
            let e = build_spec(&create_args(args), cwd).unwrap_err();
            assert!(e.downcast_ref::<UsageError>().is_some() && e.to_string().contains(says), "{args:?}: {e}");
        }
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("svc.toml");
        std::fs::write(&f, "command = [\"x\"]\nreplcas = 2\n").unwrap();
        let e = build_spec(&create_args(&[f.to_str().unwrap()]), cwd).unwrap_err();
        assert!(e.downcast_ref::<UsageError>().is_some() && e.to_string().contains("unknown field `replcas`"), "{e}");
        assert!(T::try_parse_from(["serve", "scale", "x", "-1"]).is_err());
        // Hidden from the help, still parsed, and refused with the reason.
        let e = build_spec(&create_args(&["hello", "--array", "0-3", "--", "x"]), cwd).unwrap_err();
        assert!(e.to_string().contains("cannot be an array"), "{e}");
        assert!(T::try_parse_from(["serve", "public", "x", "maybe"]).is_err());
    }

    #[test]
    fn counts_and_access_change_without_a_new_revision() {
        let old = build_spec(&create_args(&["hello", "--", "x"]), Path::new("/")).unwrap().0;
        let mut new = old.clone();
        new.replicas = 4;
        new.public = true;
        let r = update_request(&old, new.clone());
        assert_eq!((r.spec.is_none(), r.replicas, r.public), (true, Some(4), Some(true)));
        new.job.command = vec!["y".into()];
        let r = update_request(&old, new);
        assert!(r.spec.is_some() && r.replicas.is_none());
        let r = update_request(&old, old.clone());
        assert!(r.spec.is_none() && r.replicas.is_none() && r.public.is_none());
    }
}
