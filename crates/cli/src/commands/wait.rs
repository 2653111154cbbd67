//! `berth submit --wait`: follow a job to its end like `srun`, streaming its main kernel's
//! stdout and stderr to ours while it runs (unless `--quiet`), and turn its end into our exit
//! code. Ctrl-C stops the waiting, not the job: it keeps running and we say how to reach it.
//! `berth wait ID...` does the same for jobs already submitted, like the shell's `wait`.

use std::io::Write;
use std::time::Duration;

use berth_model::api::JobDetail;
use berth_model::protocol::LogStream;
use berth_model::{JobId, JobState};

use crate::client::Client;
use crate::commands::follow::{self, LogRef, Until};
use crate::output;

/// `berth wait`.
#[derive(Debug, clap::Args)]
pub struct WaitArgs {
    /// The jobs to wait for
    #[arg(value_name = "ID", required = true, add = crate::completion::job_ids_arg())]
    pub ids: Vec<JobId>,
    /// Show the job's output while it runs (one job only), as `submit --wait` does
    #[arg(long)]
    pub follow: bool,
}

/// `berth wait ID...`: waits until every job has ended. The exit code is the job's (0 when it
/// succeeded, its exit code when it failed, 128+N for a signal, 1 otherwise); of several, the
/// worst (the highest). A line on stderr names each job that did not succeed.
pub async fn run(args: WaitArgs) -> anyhow::Result<std::process::ExitCode> {
    let client = crate::client::from_env()?;
    if args.follow && args.ids.len() != 1 {
        anyhow::bail!("--follow shows one job's output: give one job id, or drop --follow");
    }
    // Every id is checked first: a typo fails at once, not after the other jobs ended.
    for id in &args.ids {
        client.job(*id).await?;
    }
    let show = if args.follow { Show::Output } else { Show::Quiet };
    let mut worst = 0u8;
    for id in args.ids {
        let code = wait_for(&client, id, show).await?;
        if code == 130 {
            return Ok(130.into());
        }
        worst = worst.max(code);
    }
    Ok(worst.into())
}

/// Whether the job's output is shown while waiting.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Show {
    /// Kernel 0's stdout to our stdout, its stderr to our stderr.
    Output,
    /// Nothing but the failure line (`--quiet`).
    Quiet,
}

/// How many failed log fetches in a row the wait rides out before it stops showing a log.
const RETRIES: u32 = 10;

/// How long a job may stay pending before we say why it waits.
const PENDING_NOTICE_AFTER: Duration = Duration::from_secs(1);

/// Waits for job `id` to end and returns the process exit code (see [`finish`]); on Ctrl-C it
/// returns 130 and leaves the job running.
pub async fn wait_for(client: &Client, id: JobId, show: Show) -> anyhow::Result<u8> {
    let waited = async {
        if show == Show::Output {
            stream(client, id).await;
        }
        poll_until_terminal(client, id).await
    };
    tokio::select! {
        d = waited => Ok(finish(&d?)),
        _ = tokio::signal::ctrl_c() => {
            // A line of its own: the job's output may have stopped mid-line.
            eprintln!(
                "\nberth: stopped waiting; job {id} keeps running (`berth logs -f {id}` follows it, `berth cancel {id}` \
                 stops it)"
            );
            Ok(130)
        }
    }
}

/// Copies both logs of kernel 0 at once until the job has ended and each has been read to its
/// end, and says once on stderr why the job waits if it is still pending after a second. A log
/// that cannot be read is reported once the job has ended, and the wait goes on without it;
/// not for a job that never ran (it failed in setup, say), which has no logs to show and whose
/// failure line says why.
async fn stream(client: &Client, id: JobId) {
    let out = LogRef { id, stream: LogStream::Stdout, kernel: 0 };
    let err = LogRef { id, stream: LogStream::Stderr, kernel: 0 };
    let failed = std::sync::Mutex::new(Vec::new());
    let copy_out = async {
        if let Err(e) = follow::copy(client, out, Until::JobDone, RETRIES, &mut std::io::stdout()).await {
            failed.lock().expect("log failures lock").push(format!("stdout: {e:#}"));
        }
    };
    let copy_err = async {
        if let Err(e) = follow::copy(client, err, Until::JobDone, RETRIES, &mut std::io::stderr()).await {
            failed.lock().expect("log failures lock").push(format!("stderr: {e:#}"));
        }
    };
    // The notice must not hold the copies up: it ends on its own, and the copies end the join.
    let notice = pending_notice(client, id);
    tokio::pin!(notice);
    let copies = async { tokio::join!(copy_out, copy_err) };
    tokio::pin!(copies);
    tokio::select! {
        _ = &mut copies => {}
        () = &mut notice => {
            copies.await;
        }
    }
    let failed = std::mem::take(&mut *failed.lock().expect("log failures lock"));
    if failed.is_empty() {
        return;
    }
    let ran = match poll_until_terminal(client, id).await {
        Ok(d) => d.transitions.iter().any(|t| t.to == JobState::Running),
        Err(_) => true,
    };
    if ran {
        for f in failed {
            eprintln!("berth: cannot show the rest of job {id}'s {f}");
        }
    }
}

/// After [`PENDING_NOTICE_AFTER`], one stderr line if the job is still pending (as `srun`'s
/// "queued and waiting for resources").
async fn pending_notice(client: &Client, id: JobId) {
    tokio::time::sleep(PENDING_NOTICE_AFTER).await;
    let Ok(d) = client.job(id).await else { return };
    // The scheduler's reason; the last transition's (`submitted`) says nothing (issue 41).
    if d.job.state == JobState::Pending {
        match d.job.pending_reason.filter(|r| !r.message.is_empty()) {
            Some(r) => eprintln!("berth: job {id} queued and waiting: {}", r.message),
            None => eprintln!("berth: job {id} queued and waiting for the scheduler"),
        }
    }
}

/// Polls the job until it is terminal, quickly at first (short jobs end in milliseconds),
/// backing off to half a second so that long jobs cost the manager little.
pub async fn poll_until_terminal(client: &Client, id: JobId) -> anyhow::Result<JobDetail> {
    let mut delay = Duration::from_millis(20);
    loop {
        let d = client.job(id).await?;
        if d.job.state.is_terminal() {
            return Ok(d);
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_millis(500));
    }
}

/// The exit code for a finished job, and a line on stderr when it did not succeed.
pub fn finish(d: &JobDetail) -> u8 {
    let j = &d.job;
    let default_reason = || match j.state {
        JobState::Timeout => match d.spec.time_limit_secs {
            Some(s) => format!("time limit {} exceeded", output::duration(s)),
            None => "time limit exceeded".into(),
        },
        JobState::Failed => match j.exit_code {
            Some(c) => format!("exit code {c}"),
            None => "failed".into(),
        },
        JobState::Lost => "its node was lost".into(),
        _ => j.state.as_str().to_lowercase(),
    };
    if j.state == JobState::Succeeded {
        return 0;
    }
    let reason = j.reason.clone().filter(|r| !r.is_empty()).unwrap_or_else(default_reason);
    // Our stdout may end mid-line (the job's output): flush it so the line comes after it.
    let _ = std::io::stdout().flush();
    eprintln!("job {} {}: {reason}", j.id, j.state);
    match (j.state, j.exit_code) {
        (JobState::Failed, Some(c)) => exit_byte(c),
        _ => 1,
    }
}

/// A kernel exit code as a process exit code: 1..=255 as is, a signal (negative) as 128+N like
/// a shell, anything else 1 so that a failure never reads as success.
fn exit_byte(code: i32) -> u8 {
    match code {
        1..=255 => code as u8,
        -127..=-1 => 128 + (-code) as u8,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes() {
        assert_eq!(exit_byte(3), 3);
        assert_eq!(exit_byte(0), 1);
        assert_eq!(exit_byte(-9), 137);
        assert_eq!(exit_byte(1000), 1);
    }
}
