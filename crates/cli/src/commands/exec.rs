//! `berth exec ID [--kernel N] [-i] [-t] -- CMD`: runs a command inside a running job's kernel,
//! as its own processes run (its cgroups, mounts, user, directory and environment; containers:
//! `docker exec`), streams its output back, and exits with its exit code, like `kubectl exec`.
//! With `-t` the command gets a terminal of its own (`berth exec -it ID -- bash`).

use std::process::ExitCode;

use anyhow::anyhow;
use berth_model::JobId;
use berth_model::stream::{ExecRequest, StreamEnd};
use clap::Args;

use crate::commands::stream::{self, Io, Outcome};

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The job's id
    #[arg(value_parser = clap::value_parser!(JobId).range(1..), add = crate::completion::job_ids_arg())]
    pub id: JobId,

    /// Which kernel of a job with several (0: `main`, 1: `sub1`, ...)
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub kernel: u32,

    /// Send this terminal's standard input to the command (otherwise it reads nothing)
    #[arg(short = 'i', long = "stdin", alias = "interactive")]
    pub stdin: bool,

    /// Run the command on a terminal of its own (with -i: this terminal in raw mode, so keys
    /// such as Ctrl-C go to the command; window size changes follow)
    #[arg(short = 't', long = "tty")]
    pub tty: bool,

    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub async fn run(args: ExecArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    let ws = client.websocket(&format!("/v1/jobs/{}/exec", args.id)).await?;
    let req = ExecRequest {
        kernel: args.kernel,
        command: args.command,
        stdin: args.stdin,
        tty: args.tty,
        env: Default::default(),
        gpus: None,
    };
    let io = Io { stdin: args.stdin, tty: args.tty, detach: None, redraw: false };
    match stream::run(ws, serde_json::to_string(&req)?, io).await? {
        Outcome::Ended(Some(StreamEnd { exit_code: Some(code), .. })) => Ok(ExitCode::from(code.clamp(0, 255) as u8)),
        Outcome::Ended(Some(StreamEnd { error: Some(e), .. })) => Err(anyhow!(e)),
        Outcome::Signalled(sig) => Ok(ExitCode::from(128 + sig as u8)),
        _ => Err(anyhow!("the stream ended before the command did")),
    }
}
