//! `berth cancel --signal SIG [--batch|--full]` and `scancel --signal`: a signal sent now to
//! running jobs' processes (`POST /v1/jobs/{id}/signal`) instead of cancelling them. Jobs are
//! selected as a cancel selects them; a job array's id reaches its running tasks, `12_7`
//! task 7 alone.

use berth_model::api::{SignalRequest, SignalResult};
use berth_model::signal::SignalTarget;
use berth_model::{ArraySpec, JobId};

use crate::client::Client;

/// What to send: the signal as the user wrote it (the manager parses it) and to what.
#[derive(Debug, Clone)]
pub struct Send {
    pub signal: String,
    pub target: SignalTarget,
}

/// The target `--batch`/`--full` ask for (steps without either).
pub fn target(batch: bool, full: bool) -> SignalTarget {
    match (batch, full) {
        (_, true) => SignalTarget::All,
        (true, false) => SignalTarget::Batch,
        (false, false) => SignalTarget::Steps,
    }
}

/// Sends `what` to each job of `ids` and to tasks `tasks` of arrays; each answer with the
/// label of what it was sent to (`12`, `12_7`), in order.
pub async fn send_all(
    client: &Client,
    what: &Send,
    ids: &[JobId],
    tasks: &[(JobId, ArraySpec)],
) -> Vec<(String, anyhow::Result<SignalResult>)> {
    let req = |tasks: Option<String>| SignalRequest { signal: what.signal.clone(), target: what.target, tasks };
    let mut out = Vec::new();
    for id in ids {
        out.push((id.to_string(), client.signal(*id, &req(None)).await.map_err(Into::into)));
    }
    for (array, spec) in tasks {
        let label = crate::job_ref::tasks_label(*array, spec);
        out.push((label, client.signal(*array, &req(Some(spec.to_string()))).await.map_err(Into::into)));
    }
    out
}

/// One line for people: `sent SIGUSR1 to the steps of job 12: kernel 0 on n1, kernel 1 on n2`.
pub fn describe(r: &SignalResult) -> String {
    let kernels: Vec<String> = r
        .kernels
        .iter()
        .map(|k| {
            let job = match k.task {
                Some(t) => format!("task {t} (job {}) ", k.job),
                None if k.job != r.id => format!("job {} ", k.job),
                None => String::new(),
            };
            let only = if k.target != r.target { format!(" ({} only)", k.target.describe()) } else { String::new() };
            format!("{job}kernel {} on {}{only}", k.kernel, k.node)
        })
        .collect();
    format!("sent SIG{} to the {} of job {}: {}", r.signal, r.target.describe(), r.id, kernels.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::api::SignalledKernel;

    #[test]
    fn flags_pick_the_target_and_lines_say_what_was_reached() {
        assert_eq!(target(false, false), SignalTarget::Steps);
        assert_eq!(target(true, false), SignalTarget::Batch);
        assert_eq!(target(true, true), SignalTarget::All);
        let k = |job, task, kernel, target| SignalledKernel { job, task, kernel, node: "n1".into(), target };
        let r = SignalResult {
            id: 12,
            signal: "USR1".into(),
            target: SignalTarget::All,
            kernels: vec![k(12, None, 0, SignalTarget::All), k(12, None, 1, SignalTarget::Steps)],
        };
        assert_eq!(
            describe(&r),
            "sent SIGUSR1 to the batch shell and steps of job 12: kernel 0 on n1, kernel 1 on n1 (steps only)"
        );
        let r =
            SignalResult { kernels: vec![k(14, Some(7), 0, SignalTarget::Steps)], target: SignalTarget::Steps, ..r };
        assert_eq!(describe(&r), "sent SIGUSR1 to the steps of job 12: task 7 (job 14) kernel 0 on n1");
    }
}
