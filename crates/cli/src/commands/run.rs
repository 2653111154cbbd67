//! `berth run [-i] [-t] [submit flags] -- CMD`: submits a job as `berth submit` does (the same
//! flags, job files and scripts), says why it waits while it is queued, and attaches to it as
//! soon as it starts, like `srun --pty` or `docker run -it`: with `-t` its main kernel runs on
//! a terminal (this one in raw mode), with `-i` alone its standard input and output are plain
//! streams (`echo data | berth run -i -- wc -c`). berth exits with the job's exit code, or 0
//! after a detach (`--detach-keys`; `berth attach ID` comes back). Ctrl-C while the job is
//! still queued cancels it.

use std::process::ExitCode;

use berth_model::api::SubmitRequest;
use clap::Args;

use crate::UsageError;
use crate::commands::attach::{Session, wait_started};
use crate::commands::submit::{self, JobArgs};
use crate::commands::wait;
use crate::terminal;

#[derive(Debug, Args)]
#[command(after_help = "\
Examples:
  berth run -it --gpus 1 --mem 16GiB -- bash     # a shell on a node; Ctrl-P Ctrl-Q detaches
  echo data | berth run -i -- wc -c
  berth attach ID                                # back to a detached session")]
pub struct RunArgs {
    #[command(flatten)]
    pub job: JobArgs,

    /// Send this terminal's standard input to the job
    #[arg(short = 'i', long = "stdin", alias = "interactive")]
    pub stdin: bool,

    /// Run the job's main kernel on a terminal (with -i: this terminal in raw mode, so keys
    /// such as Ctrl-C go to the job; window size changes follow)
    #[arg(short = 't', long = "tty")]
    pub tty: bool,

    /// The keys that detach from a terminal (leaving the job running): characters or ctrl-X,
    /// separated by commas; empty: never detach
    #[arg(long, default_value = terminal::DEFAULT_DETACH_KEYS, value_name = "KEYS")]
    pub detach_keys: String,
}

pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let keys = terminal::parse_detach_keys(&args.detach_keys).map_err(UsageError::error)?;
    let (mut spec, code) = submit::build_job(&args.job)?;
    spec.tty = args.tty;
    spec.stdin = args.stdin;
    let client = crate::client::from_env()?;
    submit::attach_code(&client, &mut spec, code.as_deref()).await?;
    crate::run_as::note_before_submit(&client, &spec).await;
    let job = client.submit(&SubmitRequest { spec }).await?;
    let id = job.id;
    // Stdout is the job's own from here on.
    eprintln!("submitted job {id}");
    // A session nobody waits for would hold its resources for nothing: Ctrl-C while the job
    // is queued cancels it (as srun gives up its allocation request).
    let d = tokio::select! {
        d = wait_started(&client, id) => d?,
        _ = tokio::signal::ctrl_c() => {
            client.cancel(id).await?;
            eprintln!("\nberth: cancelled job {id} before it started");
            return Ok(ExitCode::from(130));
        }
    };
    // Ended before it could be attached to (or never interactive): its output from its logs.
    if d.job.state.is_terminal() || !d.spec.interactive() {
        return Ok(ExitCode::from(wait::wait_for(&client, id, wait::Show::Output).await?));
    }
    let session =
        Session { id, tty: args.tty, stdin: args.stdin, keys, keys_text: args.detach_keys, redraw: false, first: true };
    session.attach(&client).await
}
