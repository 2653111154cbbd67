//! `berth logs ID`: a kernel's stdout (or stderr) log as raw bytes; `-f` follows it until the
//! job has ended and every byte has been printed.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use berth_model::JobId;
use berth_model::protocol::LogStream;
use clap::Args;

use crate::client::Client;

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The job's id
    #[arg(value_parser = clap::value_parser!(JobId).range(1..))]
    pub id: JobId,

    /// Keep printing new output until the job ends
    #[arg(short, long)]
    pub follow: bool,

    /// Print the stderr log instead of stdout
    #[arg(long)]
    pub stderr: bool,

    /// Which kernel of a job with several (--nodes, --kernels): 0 is main, 1 is sub1, ...
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub kernel: u32,
}

/// How long `-f` waits before asking again when nothing new came.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);

pub async fn run(args: LogsArgs) -> anyhow::Result<ExitCode> {
    let client = Client::from_env()?;
    let stream = if args.stderr { LogStream::Stderr } else { LogStream::Stdout };
    let mut offset = 0;
    let mut out = std::io::stdout().lock();
    loop {
        let chunk = client.logs(args.id, stream, args.kernel, offset).await?;
        let got = !chunk.bytes.is_empty();
        if got {
            // Raw bytes: a log need not be UTF-8 and must come out exactly as written.
            out.write_all(&chunk.bytes).context("cannot write to stdout")?;
            out.flush().context("cannot write to stdout")?;
        }
        offset = chunk.next_offset.max(offset);
        if got {
            // The manager may send a log in pieces: ask again at once while bytes come.
            continue;
        }
        if !args.follow || chunk.done {
            return Ok(ExitCode::SUCCESS);
        }
        tokio::time::sleep(FOLLOW_INTERVAL).await;
    }
}
