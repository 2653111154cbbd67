//! `berth ps --watch`: the list, then every change as the manager stores it, from its event
//! stream (`GET /ui/events`, server-sent events, the same one the dashboard follows); nothing
//! polls. On a terminal the table is drawn again after each change; otherwise each change is
//! one line (`TIME ID NAME STATE REASON`), for scripts and logs, like `kubectl get -w`. A
//! `resync` event (the stream fell behind) reloads the list. Ends with Ctrl-C, or with an
//! error when the manager goes away.

use std::collections::BTreeMap;
use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Context;
use berth_model::api::{JobListQuery, JobView};
use eventsource_stream::Eventsource;
use futures_util::StreamExt;

use crate::client::Client;
use crate::output;

/// Whether a job the stream announces belongs in the watched list.
fn wanted(q: &JobListQuery, j: &JobView) -> bool {
    q.user.as_ref().is_none_or(|u| &j.user == u)
        && q.queue.as_ref().is_none_or(|x| &j.queue == x)
        && q.state.as_ref().is_none_or(|s| j.state.as_str() == s)
        && q.name.as_ref().is_none_or(|n| j.name.as_deref().is_some_and(|x| x.contains(n.as_str())))
}

/// One change as a line: `12:00:01  7  train  RUNNING  started on n1`.
fn line(j: &JobView) -> String {
    let now = jiff::Zoned::now().strftime("%H:%M:%S").to_string();
    let why = j.pending_reason.as_ref().map(|r| r.message.clone()).or_else(|| j.reason.clone()).unwrap_or_default();
    let state = berth_model::cause::state_label(j.state, j.end_cause);
    format!("{now}  {}  {}  {state}  {why}", j.id, j.name.as_deref().unwrap_or("-"))
}

/// Follows the list `q` selects until interrupted; `table` renders it (`berth ps`'s).
pub async fn watch(
    client: &Client,
    q: JobListQuery,
    table: impl Fn(&[JobView]) -> comfy_table::Table,
) -> anyhow::Result<ExitCode> {
    let tty = std::io::stdout().is_terminal();
    let load = || async { client.jobs(&q).await.map(|v| v.into_iter().map(|j| (j.id, j)).collect()) };
    let mut jobs: BTreeMap<i64, JobView> = load().await?;
    let draw = |jobs: &BTreeMap<i64, JobView>| {
        let list: Vec<JobView> = jobs.values().rev().cloned().collect();
        if tty {
            // home and clear, then the table as `berth ps` prints it
            print!("\x1b[H\x1b[2J");
        }
        output::print_table(table(&list));
    };
    draw(&jobs);
    let resp = client.job_events().await?;
    let mut events = resp.bytes_stream().eventsource();
    while let Some(ev) = events.next().await {
        let ev = ev.context("the manager's event stream broke off")?;
        match ev.event.as_str() {
            "job" => {
                let j: JobView = serde_json::from_str(&ev.data).context("an unreadable job event")?;
                if !wanted(&q, &j) {
                    jobs.remove(&j.id);
                    continue;
                }
                if !tty {
                    println!("{}", line(&j));
                }
                if j.state.is_terminal() && !q.all {
                    jobs.remove(&j.id);
                } else {
                    jobs.insert(j.id, j);
                }
            }
            "resync" => jobs = load().await?,
            _ => continue,
        }
        if tty {
            draw(&jobs);
        }
    }
    anyhow::bail!("the manager ended the event stream (it stopped or lost the lead): run berth ps --watch again")
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::JobState;

    #[test]
    fn filters_match_what_the_list_asks() {
        let j: JobView = serde_json::from_value(serde_json::json!({
            "id": 7, "name": "train-a", "user": "ada", "state": "RUNNING", "queue": "gpu", "priority": 0,
            "nodes": [], "cpu_milli": 1000, "mem_bytes": 1, "gpu_milli": 0,
            "submitted_at": "2026-11-26T12:00:00Z"
        }))
        .unwrap();
        let q = |f: fn(&mut JobListQuery)| {
            let mut q = JobListQuery::default();
            f(&mut q);
            q
        };
        assert!(wanted(&q(|_| {}), &j));
        assert!(wanted(&q(|q| q.name = Some("train".into())), &j));
        assert!(!wanted(&q(|q| q.user = Some("bob".into())), &j));
        assert!(!wanted(&q(|q| q.state = Some(JobState::Pending.as_str().into())), &j));
        assert!(wanted(&q(|q| q.queue = Some("gpu".into())), &j));
        assert!(line(&j).ends_with("7  train-a  RUNNING  "), "{}", line(&j));
    }
}
