//! `berth attach ID`: back to a job submitted with `berth run -i/-t` (its terminal or its
//! input and output), after a detach or from another terminal; the detach sequence
//! (`--detach-keys`, Ctrl-P Ctrl-Q by default) leaves it running again. A job that has ended
//! prints its end and gives its exit code; one without a terminal or input shows its output
//! until it ends, as `submit --wait` does. Also the attaching half of `berth run`.

use std::process::ExitCode;

use anyhow::anyhow;
use berth_model::stream::{AttachRequest, StreamEnd};
use berth_model::{JobId, JobState};
use clap::Args;

use crate::UsageError;
use crate::client::Client;
use crate::commands::stream::{self, Io, Outcome};
use crate::commands::wait;
use crate::terminal;

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The job's id
    #[arg(value_parser = clap::value_parser!(JobId).range(1..))]
    pub id: JobId,

    /// The keys that detach from a terminal (leaving the job running): characters or ctrl-X,
    /// separated by commas; empty: never detach
    #[arg(long, default_value = terminal::DEFAULT_DETACH_KEYS, value_name = "KEYS")]
    pub detach_keys: String,
}

pub async fn run(args: AttachArgs) -> anyhow::Result<ExitCode> {
    let keys = terminal::parse_detach_keys(&args.detach_keys).map_err(UsageError::error)?;
    let client = Client::from_env()?;
    let id = args.id;
    let d = wait_started(&client, id).await?;
    if d.job.state.is_terminal() {
        eprintln!("berth: job {id} has ended");
        return Ok(ExitCode::from(wait::finish(&d)));
    }
    if !d.spec.interactive() {
        eprintln!("berth: job {id} has no terminal or input (not started by `berth run -i/-t`): showing its output");
        return Ok(ExitCode::from(wait::wait_for(&client, id, wait::Show::Output).await?));
    }
    let session =
        Session { id, tty: d.spec.tty, stdin: true, keys, keys_text: args.detach_keys, redraw: true, first: false };
    session.attach(&client).await
}

/// How long a job may wait before we say why.
const NOTICE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// Waits until job `id` has started (or ended), saying on stderr why it waits while it does,
/// on one line kept up to date on a terminal.
pub async fn wait_started(client: &Client, id: JobId) -> anyhow::Result<berth_model::api::JobDetail> {
    let on_tty = nix::unistd::isatty(2).unwrap_or(false);
    let since = std::time::Instant::now();
    let mut shown: Option<String> = None;
    let mut delay = std::time::Duration::from_millis(20);
    loop {
        let d = client.job(id).await?;
        let waiting = matches!(d.job.state, JobState::Pending | JobState::Scheduled | JobState::Preparing);
        if !waiting {
            if on_tty && shown.is_some() {
                eprint!("\r\x1b[K");
            }
            return Ok(d);
        }
        let reason = d.job.reason.clone().filter(|r| !r.is_empty()).unwrap_or_else(|| d.job.state.to_string());
        let line = format!("berth: job {id} is waiting: {reason}");
        // A job that starts at once needs no word; the reason may not be known yet either.
        if since.elapsed() >= NOTICE_AFTER && shown.as_deref() != Some(line.as_str()) {
            if on_tty {
                eprint!("\r\x1b[K{line}");
            } else {
                eprintln!("{line}");
            }
            shown = Some(line);
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(std::time::Duration::from_millis(500));
    }
}

/// An attach to a running interactive job.
pub struct Session {
    pub id: JobId,
    pub tty: bool,
    pub stdin: bool,
    pub keys: Vec<u8>,
    pub keys_text: String,
    /// Make the program on the terminal redraw (a reattach).
    pub redraw: bool,
    /// The job's first attach (`berth run`): if it ended before we could attach, its output
    /// comes from its logs instead.
    pub first: bool,
}

/// How long a first attach that finds no session waits for the job's end to be reported.
const END_REPORT_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

impl Session {
    /// Attaches until the job's output ends (then its exit code), the user detaches (0) or we
    /// get SIGINT, SIGTERM or SIGHUP (128 + it; the job runs on).
    pub async fn attach(self, client: &Client) -> anyhow::Result<ExitCode> {
        let id = self.id;
        // Keys are watched for on a terminal only: plain input may hold any byte (as Docker).
        let keys = if self.tty { self.keys } else { Vec::new() };
        if self.stdin && terminal::stdin_is_tty() && !keys.is_empty() {
            eprintln!("berth: attached to job {id}; detach with {}", self.keys_text);
        }
        let ws = client.websocket(&format!("/v1/jobs/{id}/attach")).await?;
        let io = Io { stdin: self.stdin, tty: self.tty, detach: Some(keys), redraw: self.redraw };
        let req = serde_json::to_string(&AttachRequest { kernel: 0 })?;
        let outcome = stream::run(ws, req, io).await?;
        let left = |code: u8| {
            // After raw mode the cursor may sit mid-line.
            eprintln!("\r\nberth: detached from job {id}; it keeps running (`berth attach {id}` comes back)");
            Ok(ExitCode::from(code))
        };
        match outcome {
            Outcome::Detached => left(0),
            Outcome::Signalled(sig) => left(128 + sig as u8),
            Outcome::Ended(end) => {
                let d = client.job(id).await?;
                // No end from the node: the connection broke (the agent or manager went away).
                if end.is_none() && !d.job.state.is_terminal() {
                    eprintln!(
                        "\r\nberth: lost the stream to job {id}; it keeps running (`berth attach {id}` comes back)"
                    );
                    return Ok(ExitCode::FAILURE);
                }
                // An error from a job that is still running is the stream's own (no session on
                // the node, for one); a job that ended meanwhile ends here as it ended.
                if let Some(StreamEnd { error: Some(e), .. }) = end {
                    // A job that ends as we first attach has no session left on its node before
                    // the node's report of its end reaches the manager: wait for that report
                    // a moment rather than call the stream broken.
                    let ended = if self.first && !d.job.state.is_terminal() {
                        matches!(
                            tokio::time::timeout(END_REPORT_WAIT, wait::poll_until_terminal(client, id)).await,
                            Ok(Ok(_))
                        )
                    } else {
                        d.job.state.is_terminal()
                    };
                    if !ended {
                        return Err(anyhow!(e));
                    }
                    if self.first {
                        // It ended before we could attach: nothing of it was shown yet.
                        return Ok(ExitCode::from(wait::wait_for(client, id, wait::Show::Output).await?));
                    }
                }
                let d = wait::poll_until_terminal(client, id).await?;
                Ok(ExitCode::from(wait::finish(&d)))
            }
        }
    }
}
