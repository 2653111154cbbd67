//! scancel's flags ([`Args`]) and its words for a refused cancel or signal ([`kill_error`]).
//! The selection and the cancels are `berth cancel`'s (and the signals `berth cancel
//! --signal`'s), so the `berth` binary runs them.

use clap::Parser;
use reqwest::StatusCode;

/// cancel berth jobs (Slurm's scancel)
#[derive(Debug, Parser)]
#[command(name = "scancel", version)]
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
/// had ended already). `status` is the refusal's, if the manager refused.
pub fn kill_error(e: &(dyn std::error::Error + 'static), status: Option<StatusCode>, quiet: bool) -> Option<String> {
    Some(match status {
        Some(StatusCode::NOT_FOUND) => "Invalid job id specified".into(),
        Some(StatusCode::FORBIDDEN) => "Access/permission denied".into(),
        Some(StatusCode::CONFLICT) if e.to_string().contains("is pending") => "Job is pending execution".into(),
        Some(StatusCode::UNPROCESSABLE_ENTITY) if e.to_string().contains("signal") => "Invalid signal specified".into(),
        Some(StatusCode::CONFLICT) if e.to_string().contains("already finished") => {
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
    use super::*;

    fn kill_error(e: &berth_client::Error, quiet: bool) -> Option<String> {
        super::kill_error(e, e.refused_status(), quiet)
    }

    fn refused(status: StatusCode, msg: &str) -> berth_client::Error {
        berth_client::Error::from_answer(status, msg.into())
    }

    #[test]
    fn errors_in_slurms_words() {
        assert_eq!(
            kill_error(&refused(StatusCode::NOT_FOUND, "job 9 not found"), false).unwrap(),
            "Invalid job id specified"
        );
        let done = refused(StatusCode::CONFLICT, "job 9 already finished (SUCCEEDED)");
        assert_eq!(kill_error(&done, false).unwrap(), "Job/step already completing or completed");
        assert_eq!(kill_error(&done, true), None, "--quiet");
        assert_eq!(kill_error(&refused(StatusCode::FORBIDDEN, "no"), true).unwrap(), "Access/permission denied");
        let pending = refused(StatusCode::CONFLICT, "job 9 is pending: only a running job can be signalled");
        assert_eq!(kill_error(&pending, true).unwrap(), "Job is pending execution");
        let bad = refused(StatusCode::UNPROCESSABLE_ENTITY, "signal: unknown signal `FOO`");
        assert_eq!(kill_error(&bad, false).unwrap(), "Invalid signal specified");
    }
}
