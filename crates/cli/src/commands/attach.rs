//! `berth attach ID`: back to a job submitted with `berth run -i/-t` (its terminal or its
//! input and output), after a detach or from another terminal; the detach sequence
//! (`--detach-keys`, Ctrl-P Ctrl-Q by default) leaves it running again. A job that has ended
//! prints its end and gives its exit code; one without a terminal or input shows its output
//! until it ends, as `submit --wait` does. Also the attaching half of `berth run`.

use std::process::ExitCode;

use anyhow::anyhow;
use berth_model::stream::{AttachRequest, StreamEnd};
use std::time::{Duration, Instant};

use berth_model::api::JobView;
use berth_model::{JobId, JobState, PendingKind};
use clap::Args;

use crate::UsageError;
use crate::client::Client;
use crate::commands::stream::{self, Io, Outcome};
use crate::commands::wait;
use crate::terminal;

#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The job's id
    #[arg(value_parser = clap::value_parser!(JobId).range(1..), add = crate::completion::job_ids_arg())]
    pub id: JobId,

    /// The keys that detach from a terminal (leaving the job running): characters or ctrl-X,
    /// separated by commas; empty: never detach
    #[arg(long, default_value = terminal::DEFAULT_DETACH_KEYS, value_name = "KEYS")]
    pub detach_keys: String,
}

pub async fn run(args: AttachArgs) -> anyhow::Result<ExitCode> {
    let keys = terminal::parse_detach_keys(&args.detach_keys).map_err(UsageError::error)?;
    let client = crate::client::from_env()?;
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
const NOTICE_AFTER: Duration = Duration::from_secs(1);

/// Off a terminal, how often a line whose text alone changed is printed again (a reserved
/// start counts down at each pass, every second).
const PLAIN_EVERY: Duration = Duration::from_secs(30);

/// Waits until job `id` has started (or ended), saying on stderr why it waits while it does,
/// on one line kept up to date on a terminal ([`WaitLine`]).
pub async fn wait_started(client: &Client, id: JobId) -> anyhow::Result<berth_model::api::JobDetail> {
    let mut line = WaitLine::new(nix::unistd::isatty(2).unwrap_or(false));
    let mut delay = Duration::from_millis(20);
    loop {
        let d = client.job(id).await?;
        if !not_started(d.job.state) {
            line.clear();
            return Ok(d);
        }
        line.update(id, &d.job);
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(500));
    }
}

/// Whether a job in `state` has yet to start: pending, placed, or being set up.
fn not_started(state: JobState) -> bool {
    matches!(state, JobState::Pending | JobState::Scheduled | JobState::Preparing)
}

/// The stderr line that says why a job has not started ([`waiting_text`]), from
/// [`NOTICE_AFTER`] on (a job that starts at once needs no word). On a terminal it is one
/// row, rewritten in place whenever it changes; elsewhere (a log) a new line comes when the
/// job's state or the kind of its reason changes, and when only the text did, at most every
/// [`PLAIN_EVERY`].
struct WaitLine {
    in_place: bool,
    since: Instant,
    shown: Option<(String, (JobState, Option<PendingKind>), Instant)>,
}

impl WaitLine {
    pub fn new(in_place: bool) -> Self {
        WaitLine { in_place, since: Instant::now(), shown: None }
    }

    /// Shows job `id` as `j` says, if due.
    pub fn update(&mut self, id: JobId, j: &JobView) {
        if self.since.elapsed() < NOTICE_AFTER {
            return;
        }
        let line = format!("berth: job {id} {}", waiting_text(j));
        let key = (j.state, j.pending_reason.as_ref().map(|r| r.kind));
        let due = match &self.shown {
            None => true,
            Some((text, _, _)) if *text == line => false,
            Some(_) if self.in_place => true,
            Some((_, k, at)) => *k != key || at.elapsed() >= PLAIN_EVERY,
        };
        if !due {
            return;
        }
        if self.in_place {
            // A wrapped line would leave its first rows behind at each rewrite.
            let cols = crate::terminal::window_size().map_or(80, |w| w.cols as usize);
            eprint!("\r\x1b[K{}", clip_to(&line, cols.saturating_sub(1).max(20)));
        } else {
            eprintln!("{line}");
        }
        self.shown = Some((line, key, Instant::now()));
    }

    /// Erases the line on a terminal, for what follows it.
    pub fn clear(&mut self) {
        if self.in_place && self.shown.take().is_some() {
            eprint!("\r\x1b[K");
        }
    }
}

/// What job `j`, not started yet, is doing, after `berth: job N `: `is waiting: REASON` with
/// the scheduler's reason while it is pending (`queued: waiting for the next scheduling pass`
/// before the first pass has looked at it), `is starting on n1` once placed, with its setup
/// step while one runs. Never the bare state: `PENDING` says nothing `berth run` did not.
pub fn waiting_text(j: &JobView) -> String {
    if j.state == JobState::Pending {
        return match j.pending_reason.as_ref().filter(|r| !r.message.is_empty()) {
            Some(r) => format!("is waiting: {}", r.message),
            None => "is waiting for the scheduler".into(),
        };
    }
    let on = if j.nodes.is_empty() { String::new() } else { format!(" on {}", j.nodes.join(", ")) };
    match &j.setup {
        Some(s) => format!("is being set up{on}: {}", s.short()),
        None => format!("is starting{on}"),
    }
}

/// `s` cut to `max` characters, ending in `…` when cut.
fn clip_to(s: &str, max: usize) -> String {
    match s.char_indices().nth(max.saturating_sub(1)) {
        Some((cut, _)) if s.chars().count() > max => format!("{}…", &s[..cut]),
        _ => s.to_string(),
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

#[cfg(test)]
mod tests {
    use berth_model::{PendingReason, SetupProgress, SetupStep};

    use super::*;

    /// Regression (issue 41): `berth run` showed `berth: job 42 is waiting: PENDING`, the
    /// state, for as long as the job waited, and never the scheduler's reason.
    #[test]
    fn a_waiting_job_shows_the_schedulers_reason_not_its_state() {
        let why = "resources: needs 1 CPU, node n1 has 0 free; reserved to start in ~4s on n1 (backfill; predicted \
                   from earlier runs)";
        let mut j = JobView {
            state: JobState::Pending,
            pending_reason: Some(PendingReason::new(PendingKind::Resources, why)),
            ..JobView::default()
        };
        assert_eq!(waiting_text(&j), format!("is waiting: {why}"));
        j.pending_reason = None;
        assert_eq!(waiting_text(&j), "is waiting for the scheduler");
        j.state = JobState::Scheduled;
        j.nodes = vec!["n1".into()];
        assert_eq!(waiting_text(&j), "is starting on n1");
        j.state = JobState::Preparing;
        let since = jiff::Timestamp::UNIX_EPOCH;
        j.setup = Some(SetupProgress { step: SetupStep::Environment, done: 2, total: 4, detail: None, since });
        assert_eq!(waiting_text(&j), "is being set up on n1: env build 2/4");
    }

    #[test]
    fn a_line_for_one_terminal_row_is_clipped() {
        assert_eq!(clip_to("abcdef", 4), "abc…");
        assert_eq!(clip_to("abcd", 4), "abcd");
    }
}
