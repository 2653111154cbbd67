//! Following a job's output: `berth logs -f` (one stream) and `berth submit --wait` (stdout
//! and stderr together, like `srun`), both by byte offset through the manager, raw bytes out.

use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::Context;
use berth_model::api::JobDetail;
use berth_model::protocol::LogStream;
use berth_model::{JobId, JobState};

use crate::client::Client;

/// How long a follower waits before asking again when nothing new came, at most.
pub const FOLLOW_INTERVAL: Duration = Duration::from_millis(200);

/// The first wait of `--wait`: short jobs end in milliseconds.
const FIRST_INTERVAL: Duration = Duration::from_millis(20);

/// How long a job may wait in the queue before `--wait` says why.
const QUIET_WAIT: Duration = Duration::from_secs(1);

/// Writes every byte of `stream` of kernel `kernel` of job `id` from `offset` on to `out`, as
/// far as the log goes now. Returns the next offset, whether anything came, and whether the
/// job has ended (so the log is complete).
pub async fn pump(
    client: &Client,
    id: JobId,
    stream: LogStream,
    kernel: u32,
    mut offset: u64,
    out: &mut dyn Write,
) -> anyhow::Result<(u64, bool, bool)> {
    let mut got = false;
    loop {
        let chunk = client.logs(id, stream, kernel, offset).await?;
        if chunk.bytes.is_empty() {
            return Ok((chunk.next_offset.max(offset), got, chunk.done));
        }
        // Raw bytes: a log need not be UTF-8 and must come out exactly as written.
        out.write_all(&chunk.bytes).and_then(|()| out.flush()).context("cannot write the job's output")?;
        got = true;
        // The manager sends a long log in pieces: ask again at once while bytes come.
        offset = chunk.next_offset.max(offset + chunk.bytes.len() as u64);
    }
}

/// How `--wait` shows the job: its output (stdout to stdout, stderr to stderr) or nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    Output,
    Quiet,
}

/// Follows job `id` until it ends, streaming kernel 0's stdout and stderr unless `show` is
/// quiet, then returns the job as it ended. A job that waits in the queue longer than a
/// second gets one line on stderr saying why; a requeued job's output starts over (a new
/// attempt writes new logs) with a line saying so.
pub async fn wait(client: &Client, id: JobId, show: Show) -> anyhow::Result<JobDetail> {
    let since = Instant::now();
    let mut offsets = [0u64; 2];
    let mut said_waiting = false;
    let mut ran = false;
    let mut delay = FIRST_INTERVAL;
    loop {
        let d = client.job(id).await?;
        let state = d.job.state;
        if state == JobState::Pending && ran {
            // Requeued: the next attempt's logs start from nothing.
            ran = false;
            offsets = [0, 0];
            if show == Show::Output {
                eprintln!("berth: job {id} was requeued: {}", d.job.reason.clone().unwrap_or_default());
            }
        }
        if state == JobState::Pending && !said_waiting && show == Show::Output && since.elapsed() >= QUIET_WAIT {
            let why = d.job.pending_reason.as_ref().map(|r| r.message.clone()).unwrap_or_else(|| "queued".into());
            eprintln!("berth: job {id} is waiting: {why}");
            said_waiting = true;
        }
        let started = !matches!(state, JobState::Pending | JobState::Scheduled);
        ran |= started;
        let mut got = false;
        if started && show == Show::Output {
            got = pump_both(client, id, &mut offsets).await?;
        }
        if state.is_terminal() {
            if show == Show::Output {
                // The end is recorded after the kernel's last write: drain what is left.
                while pump_both(client, id, &mut offsets).await? {}
            }
            return Ok(d);
        }
        delay = if got { FIRST_INTERVAL } else { (delay * 2).min(FOLLOW_INTERVAL) };
        tokio::time::sleep(delay).await;
    }
}

/// Pumps kernel 0's stdout and stderr once each; whether any byte came.
async fn pump_both(client: &Client, id: JobId, offsets: &mut [u64; 2]) -> anyhow::Result<bool> {
    let (out, got_out, _) = pump(client, id, LogStream::Stdout, 0, offsets[0], &mut std::io::stdout().lock()).await?;
    let (err, got_err, _) = pump(client, id, LogStream::Stderr, 0, offsets[1], &mut std::io::stderr().lock()).await?;
    *offsets = [out, err];
    Ok(got_out || got_err)
}
