//! scancel's flags ([`Args`]) and its words for a refused cancel or signal ([`kill_error`]).
//! The selection and the cancels are `berth cancel`'s (and the signals `berth cancel
//! --signal`'s), so the `berth` binary runs them.

use berth_model::api::ErrorReason;
use clap::Parser;
use reqwest::StatusCode;

/// cancel berth jobs (Slurm's scancel)
#[derive(Debug, Parser)]
#[command(name = "scancel", version = crate::SLURM_VERSION, display_name = "slurm", infer_long_args = true)]
pub struct Args {
    /// Jobs to cancel; with filters, only those of them that match
    #[arg(value_name = "JOB_ID")]
    pub ids: Vec<String>,
    /// Only this user's jobs
    #[arg(short = 'u', long = "user", value_name = "USER")]
    pub user: Option<String>,
    /// Only jobs in these states (PENDING, RUNNING, ...)
    #[arg(short = 't', long = "state", value_name = "STATES")]
    pub state: Option<String>,
    /// Only jobs with exactly this name
    #[arg(short = 'n', long = "name", alias = "jobname", value_name = "NAME")]
    pub name: Option<String>,
    /// Only jobs of this partition (berth queue)
    #[arg(short = 'p', long = "partition", value_name = "PARTITION")]
    pub partition: Option<String>,
    /// Send this signal (USR1, SIGUSR1 or a number) to the jobs' steps instead of cancelling
    #[arg(short = 's', long = "signal", value_name = "SIGNAL")]
    pub signal: Option<String>,
    /// With --signal: to the batch shell alone, not the steps
    #[arg(short = 'b', long = "batch")]
    pub batch: bool,
    /// With --signal: to the batch shell, its children and the steps
    #[arg(short = 'f', long = "full")]
    pub full: bool,
    /// Do not report jobs that already ended (-q too: berth has no QOS)
    #[arg(short = 'Q', long = "quiet", short_alias = 'q')]
    pub quiet: bool,
    /// Ask before each job (not supported: berth's scancel does not read stdin)
    #[arg(short = 'i', long = "interactive")]
    pub interactive: bool,
    /// Say more (accepted, changes nothing)
    #[arg(short = 'v', long = "verbose", action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// Slurm's words for a refused cancel; `None` for one `--quiet` does not report (the job
/// had ended already). `status` and `reason` are the refusal's, if the manager refused: the
/// manager's typed reason decides, never its message's words.
pub fn kill_error(
    e: &(dyn std::error::Error + 'static),
    status: Option<StatusCode>,
    reason: Option<ErrorReason>,
    quiet: bool,
) -> Option<String> {
    Some(match (status, reason) {
        (Some(StatusCode::NOT_FOUND), _) => "Invalid job id specified".into(),
        (Some(StatusCode::FORBIDDEN), _) => "Access/permission denied".into(),
        (_, Some(ErrorReason::JobPending)) => "Job is pending execution".into(),
        (_, Some(ErrorReason::BadSignal)) => "Invalid signal specified".into(),
        (_, Some(ErrorReason::JobEnded)) => {
            if quiet {
                return None;
            }
            "Job/step already completing or completed".into()
        }
        _ => crate::error::chain(e),
    })
}

#[cfg(test)]
mod tests {
    use berth_model::api::ErrorBody;

    use super::*;

    fn kill_error(e: &berth_client::Error, quiet: bool) -> Option<String> {
        super::kill_error(e, e.refused_status(), e.refused_reason(), quiet)
    }

    fn refused(status: StatusCode, msg: &str, reason: Option<ErrorReason>) -> berth_client::Error {
        berth_client::Error::from_body(status, ErrorBody { error: msg.into(), reason })
    }

    #[test]
    fn errors_in_slurms_words() {
        let gone = refused(StatusCode::NOT_FOUND, "job 9 not found", None);
        assert_eq!(kill_error(&gone, false).unwrap(), "Invalid job id specified");
        let done = refused(StatusCode::CONFLICT, "job 9 already finished (SUCCEEDED)", Some(ErrorReason::JobEnded));
        assert_eq!(kill_error(&done, false).unwrap(), "Job/step already completing or completed");
        assert_eq!(kill_error(&done, true), None, "--quiet");
        assert_eq!(kill_error(&refused(StatusCode::FORBIDDEN, "no", None), true).unwrap(), "Access/permission denied");
        let pending = refused(
            StatusCode::CONFLICT,
            "job 9 is pending: only a running job can be signalled",
            Some(ErrorReason::JobPending),
        );
        assert_eq!(kill_error(&pending, true).unwrap(), "Job is pending execution");
        let bad =
            refused(StatusCode::UNPROCESSABLE_ENTITY, "signal: unknown signal `FOO`", Some(ErrorReason::BadSignal));
        assert_eq!(kill_error(&bad, false).unwrap(), "Invalid signal specified");
    }

    #[test]
    fn the_reason_decides_scancels_words_not_the_message() {
        // Words that once matched the message's text, with no reason: the manager's own
        // message is printed, as for any other refusal.
        let said = refused(StatusCode::CONFLICT, "job array 9 is pending and already finished its signal", None);
        assert_eq!(kill_error(&said, true).unwrap(), "job array 9 is pending and already finished its signal");
        // A reason with other words still says Slurm's.
        let ended = refused(StatusCode::CONFLICT, "gone", Some(ErrorReason::JobEnded));
        assert_eq!(kill_error(&ended, false).unwrap(), "Job/step already completing or completed");
        let local = berth_client::Error::NoLeader;
        assert_eq!(kill_error(&local, false).unwrap(), local.to_string());
    }
}
