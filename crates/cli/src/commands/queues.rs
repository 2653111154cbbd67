//! `berth queues`: every queue with its scheduling policy, nodes and load.

use std::process::ExitCode;

use berth_model::api::QueueView;
use clap::Args;

use crate::output::{self, OutputArgs};

#[derive(Debug, Args)]
pub struct QueuesArgs {
    #[command(flatten)]
    pub output: OutputArgs,
}

pub async fn run(args: QueuesArgs) -> anyhow::Result<ExitCode> {
    let queues = crate::client::from_env()?.queues().await?;
    if args.output.json() {
        output::print_json(&queues)?;
    } else {
        output::print_table(table(&queues));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn table(queues: &[QueueView]) -> comfy_table::Table {
    let mut t = output::table([
        "QUEUE",
        "ORDERING",
        "HEAD-OF-LINE",
        "WINDOW",
        "RESERVATIONS",
        "SCORING",
        "DEFAULT LIMIT",
        "MAX LIMIT",
        "PREEMPTION",
        "SESSIONS",
        "PROJECTS",
        "NODES",
        "PENDING",
        "RUNNING",
    ]);
    for q in queues {
        let p = &q.policy;
        let preemption = if p.preemption == "off" {
            "off".to_string()
        } else {
            format!("{} (after {})", p.preemption, output::duration(p.preempt_min_runtime_secs))
        };
        t.add_row([
            q.name.clone(),
            ordering(p),
            p.head_of_line.clone(),
            // Only a queue that lets jobs pass a blocked one tries a window of them.
            if p.head_of_line == "strict" { "-".to_string() } else { p.backfill_window.to_string() },
            reservations(p),
            p.scoring.clone(),
            output::duration(p.default_time_limit_secs),
            p.max_time_limit_secs.map(output::duration).unwrap_or_else(|| "-".into()),
            preemption,
            sessions(p),
            if p.projects.is_empty() { "all".to_string() } else { p.projects.join(",") },
            q.nodes.to_string(),
            q.pending.to_string(),
            q.running.to_string(),
        ]);
    }
    t
}

/// The ordering, with its levels for `las`: `las (1h, 10h)`.
fn ordering(p: &berth_model::api::QueuePolicy) -> String {
    if p.ordering != "las" || p.las_thresholds_secs.is_empty() {
        return p.ordering.clone();
    }
    let levels: Vec<String> = p.las_thresholds_secs.iter().map(|&s| output::duration(s)).collect();
    format!("las ({})", levels.join(", "))
}

/// Backfill's reservations per pass and the wait bound: `4, firm after 12h`; under
/// skip-after only jobs past the bound are reserved: `4, only past 12h (firm)`; `-` for a
/// queue that reserves nothing.
fn reservations(p: &berth_model::api::QueuePolicy) -> String {
    match (p.head_of_line.as_str(), p.reserve_after_secs) {
        ("backfill", Some(s)) => format!("{}, firm after {}", p.reservations, output::duration(s)),
        ("backfill", None) => p.reservations.to_string(),
        ("strict", _) | (_, None) => "-".into(),
        (_, Some(s)) => format!("{}, only past {} (firm)", p.reservations, output::duration(s)),
    }
}

/// What a queue does to interactive sessions: `idle 15m, max 8h`, or `-`.
fn sessions(p: &berth_model::api::QueuePolicy) -> String {
    let parts: Vec<String> = [("idle", p.idle_timeout_secs), ("max", p.max_session_secs)]
        .into_iter()
        .filter_map(|(what, secs)| secs.map(|s| format!("{what} {}", output::duration(s))))
        .collect();
    if parts.is_empty() { "-".into() } else { parts.join(", ") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use berth_model::api::QueuePolicy;

    #[test]
    fn rows_show_the_policy() {
        let q = QueueView {
            name: "gpu".into(),
            policy: QueuePolicy {
                ordering: "drf".into(),
                head_of_line: "backfill".into(),
                backfill_window: 200,
                scoring: "spread".into(),
                default_time_limit_secs: 3600,
                preemption: "requeue".into(),
                preempt_min_runtime_secs: 600,
                projects: vec!["vision".into(), "nlp".into()],
                max_time_limit_secs: Some(86_400),
                nodes: vec![],
                node_labels: Default::default(),
                idle_timeout_secs: Some(900),
                max_session_secs: None,
                reservations: 3,
                reserve_after_secs: Some(12 * 3600),
                las_thresholds_secs: vec![],
            },
            nodes: 2,
            pending: 3,
            running: 1,
        };
        let lines: Vec<String> = table(std::slice::from_ref(&q)).lines().collect();
        assert!(lines[0].contains("ORDERING") && lines[0].contains("PREEMPTION"), "{lines:?}");
        assert!(lines[0].contains("WINDOW"), "{lines:?}");
        assert!(lines[0].contains("RESERVATIONS"), "{lines:?}");
        for word in
            ["gpu", "drf", "backfill", "200", "3, firm after 12h", "spread", "1h", "requeue (after 10m)", "idle 15m"]
        {
            assert!(lines[1].contains(word), "{word}: {lines:?}");
        }
        // Skip-after reserves only jobs past the wait bound; strict reserves nothing.
        for (head, bound, shown) in [
            ("skip-after-3", Some(3600), "3, only past 1h (firm)"),
            ("skip-after-3", None, "-"),
            ("strict", Some(3600), "-"),
            ("backfill", None, "3"),
        ] {
            let mut q = q.clone();
            q.policy.head_of_line = head.into();
            q.policy.reserve_after_secs = bound;
            assert_eq!(reservations(&q.policy), shown, "{head} {bound:?}");
        }
    }
}
