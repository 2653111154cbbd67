//! `berth logs ID`: a kernel's output as raw bytes: its stdout on ours and its stderr on ours
//! (so a crashed script's traceback shows beside what it printed, and `> file` still keeps the
//! stdout alone), or one log alone (`--stdout`, `--stderr`, `--setup`) on our stdout; `-f`
//! follows until the job has ended and every byte has been printed; `--tail N` starts each log
//! at its last N lines (the log is read to its end once, keeping only those lines).

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;

use berth_model::JobId;
use berth_model::protocol::LogStream;
use clap::Args;

use crate::client::Client;
use crate::commands::follow::{self, LogRef, Until};

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The job's id
    #[arg(value_parser = clap::value_parser!(JobId).range(1..), add = crate::completion::job_ids_arg())]
    pub id: JobId,

    /// Keep printing new output until the job ends
    #[arg(short, long)]
    pub follow: bool,

    /// Print only the stdout log
    #[arg(long, conflicts_with_all = ["stderr", "setup"])]
    pub stdout: bool,

    /// Print only the stderr log (on stdout, for pipes)
    #[arg(long)]
    pub stderr: bool,

    /// Print the setup log alone: how the job's Python environment was built or reused (uv's
    /// output)
    #[arg(long, conflicts_with = "stderr")]
    pub setup: bool,

    /// Which kernel of a job with several (--nodes, --kernels): 0 is main, 1 is sub1, ...
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub kernel: u32,

    /// Print only the last N lines of each log (then, with -f, what comes next)
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
}

pub async fn run(args: LogsArgs) -> anyhow::Result<ExitCode> {
    let client = crate::client::from_env()?;
    let one = match (args.stdout, args.stderr, args.setup) {
        (true, _, _) => Some(LogStream::Stdout),
        (_, true, _) => Some(LogStream::Stderr),
        (_, _, true) => Some(LogStream::Setup),
        _ => None,
    };
    if one != Some(LogStream::Setup)
        && let Ok(d) = client.job(args.id).await
        && d.spec.output.has_files()
    {
        for stream in one.map_or(vec![LogStream::Stdout, LogStream::Stderr], |s| vec![s]) {
            note_output_files(&d, stream, args.kernel);
        }
    }
    let until = if args.follow { Until::JobDone } else { Until::Now };
    let log = |stream| LogRef { id: args.id, stream, kernel: args.kernel };
    if let Some(stream) = one {
        print_log(&client, log(stream), until, args.tail, &mut std::io::stdout()).await?;
        return Ok(ExitCode::SUCCESS);
    }
    // Both at once (a follow of one must not wait for the other's end). The stdout log
    // answers for the job (not found, not yours); a stderr log that cannot be read beside it
    // (a job that failed before it ran has none) is left out without a word.
    let (mut stdout, mut stderr) = (std::io::stdout(), std::io::stderr());
    let out = print_log(&client, log(LogStream::Stdout), until, args.tail, &mut stdout);
    let err = print_log(&client, log(LogStream::Stderr), until, args.tail, &mut stderr);
    let (out, err) = tokio::join!(out, err);
    out?;
    if let Err(e) = err {
        tracing::debug!("job {}'s stderr log: {e:#}", args.id);
    }
    Ok(ExitCode::SUCCESS)
}

/// Copies one log to `out`: all of it, or (`tail`) its last lines as it stands, then with
/// `Until::JobDone` what comes after them.
async fn print_log(
    client: &Client,
    log: LogRef,
    until: Until,
    tail: Option<usize>,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let Some(n) = tail else {
        return follow::copy(client, log, until, 0, out).await;
    };
    let mut last = follow::LastLines::new(n);
    let end = follow::copy_from(client, log, Until::Now, 0, 0, &mut last).await?;
    out.write_all(&last.into_bytes()).and_then(|()| out.flush()).context("cannot write the job's output")?;
    if until == Until::JobDone {
        follow::copy_from(client, log, until, 0, end, out).await?;
    }
    Ok(())
}

/// Says on stderr where a stream went when the job writes it to a file of its own (`--output`,
/// `--error`): berth's log of it stays empty, and printing nothing would look like a job that
/// wrote nothing.
fn note_output_files(d: &berth_model::api::JobDetail, stream: LogStream, kernel: u32) {
    let p = super::show::output_files(d, kernel);
    let (name, path) = match stream {
        LogStream::Stderr => ("stderr", p.stderr),
        _ => ("stdout", p.stdout),
    };
    let Some(path) = path else { return };
    let held = d.spec.holds_only(kernel);
    let node = d.kernels.iter().find(|k| k.index == kernel).map(|k| k.binding.node.as_str());
    let whose = if kernel == 0 { String::new() } else { format!(" kernel {kernel}'s") };
    match (node, held) {
        (_, true) => {}
        (Some(node), false) => {
            eprintln!("berth: job {}{whose} {name} goes to {path} on node {node}, not to berth's logs", d.job.id)
        }
        (None, false) => eprintln!(
            "berth: job {}{whose} {name} will go to {path} on its node once it starts, not to berth's logs",
            d.job.id
        ),
    }
}
