//! `berth exec ID [--kernel N] [-i] -- CMD`: runs a command inside a running job's kernel, as
//! its own processes run (its cgroups, mounts, user, directory and environment; containers:
//! `docker exec`), streams its output back, and exits with its exit code, like `kubectl exec`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::anyhow;
use berth_model::JobId;
use berth_model::stream::{self, CONTROL, ExecRequest, MAX_CHUNK, STDERR, STDIN, STDIN_EOF, STDOUT, StreamEnd};
use clap::Args;
use futures_util::{SinkExt, StreamExt};
use tokio::io::AsyncReadExt;
use tokio_tungstenite::tungstenite::Message;

use crate::client::Client;

#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The job's id
    #[arg(value_parser = clap::value_parser!(JobId).range(1..))]
    pub id: JobId,

    /// Which kernel of a job with several (0: `main`, 1: `sub1`, ...)
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub kernel: u32,

    /// Send this terminal's standard input to the command (otherwise it reads nothing)
    #[arg(short = 'i', long = "stdin", alias = "interactive")]
    pub stdin: bool,

    /// The command and its arguments
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

pub async fn run(args: ExecArgs) -> anyhow::Result<ExitCode> {
    let client = Client::from_env()?;
    let ws = client.websocket(&format!("/v1/jobs/{}/exec", args.id)).await?;
    let (mut tx, mut rx) = ws.split();
    let req = ExecRequest { kernel: args.kernel, command: args.command, stdin: args.stdin };
    tx.send(Message::text(serde_json::to_string(&req)?)).await?;
    // Standard input, on a task of its own: the output must flow while it waits for input.
    let input = tokio::spawn(async move {
        if args.stdin {
            let mut stdin = tokio::io::stdin();
            let mut buf = vec![0u8; MAX_CHUNK];
            while let Ok(n) = stdin.read(&mut buf).await {
                if n == 0 || tx.send(Message::binary(stream::frame(STDIN, &buf[..n]))).await.is_err() {
                    break;
                }
            }
            let _ = tx.send(Message::binary(stream::frame(STDIN_EOF, &[]))).await;
        }
        // Kept open (not closed) until the end: closing would end the stream.
        std::future::pending::<()>().await;
        drop(tx);
    });
    let end = loop {
        match rx.next().await {
            Some(Ok(Message::Binary(b))) => match stream::split(&b) {
                Some((STDOUT, data)) => {
                    let mut out = std::io::stdout().lock();
                    out.write_all(data)?;
                    out.flush()?;
                }
                Some((STDERR, data)) => {
                    let mut err = std::io::stderr().lock();
                    err.write_all(data)?;
                    err.flush()?;
                }
                Some((CONTROL, data)) => break serde_json::from_slice::<StreamEnd>(data).ok(),
                _ => {}
            },
            Some(Ok(Message::Close(_))) | None => break None,
            Some(Err(e)) => return Err(anyhow!("the stream broke: {e}")),
            Some(Ok(_)) => {}
        }
    };
    input.abort();
    match end {
        Some(StreamEnd { exit_code: Some(code), .. }) => Ok(ExitCode::from(code.clamp(0, 255) as u8)),
        Some(StreamEnd { error: Some(e), .. }) => Err(anyhow!(e)),
        _ => Err(anyhow!("the stream ended before the command did")),
    }
}
